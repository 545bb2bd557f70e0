-- The web app's reads of engine runs: a run as a person follows it (sql/runs.sql defines them).

-- name: web_runs
-- A room's runs, newest first: the episode (flow, trace, quality and outcome, as mycelium.episodes
-- derives them), with what the page shows beside it from the run itself (its kind, state, whom it
-- waits for and until when, the agreement it carries), the floor of its thread while it is open and
-- the thread's row. :episode (a thread's URN) or :short_id narrow it to a thread's runs or one run
-- (NULL: every run). 404 without the room.
SELECT e.run_id, e.short_id, e.episode, e.outcome, e.subkind, e.engine, e.protocol, e.flow, e.within,
       e.task_key, e.current_step, e.turn, e.reason, e.outcome_text, e.metrics, e.created_at, e.updated_at,
       e.closed_at, e.quality, e.trace, e.post_count,
       r.kind AS run_kind, r.state AS run_state, r.waiting AS run_waiting, r.deadline AS run_deadline,
       r.assignments AS run_assignments,
       f.holder AS floor_holder, f.speakers AS floor_speakers,
       b.key AS row_key, b.title AS row_title
FROM mycelium.episodes e
JOIN mycelium.engine_runs r ON r.room = e.room AND r.id = e.run_id
LEFT JOIN mycelium.floors f ON f.room = r.room AND f.episode = r.episode AND r.state = 'open'
LEFT JOIN LATERAL mycelium.row_of_episode(r.room, r.episode) b ON true
WHERE e.room = :room AND mycelium.room_known(:room)
  AND (:episode::text IS NULL OR r.episode = :episode)
  AND (:short_id::text IS NULL OR r.short_id = :short_id)
ORDER BY r.id DESC
LIMIT :limit
