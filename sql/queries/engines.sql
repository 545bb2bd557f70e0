-- Engines: registering them, the room's agents, summons, runs, steps and episodes (sql/engines.sql, sql/runs.sql).
-- The writes that post messages return the wake hints their triggers kept (column wake_hints).

-- name: create_engine
-- returns: row
SELECT * FROM mycelium.create_engine(mycelium.acting(:room, :actor, :actor_kind), :handle, :kind,
                                     :description, :by)

-- name: list_engines
SELECT * FROM mycelium.engines WHERE room = :room AND mycelium.room_known(:room) ORDER BY handle

-- name: room_agents
-- every member of a room: the agents/<handle> manifests (engines among them), and whoever is present
-- or has written; with kind and presence. 404 without the room.
WITH manifests AS (
  SELECT substr(m.key, 8) AS handle, m.meta, m.created_by, m.created_at, m.body
  FROM mycelium.memories m
  WHERE m.room = :room AND m.key LIKE 'agents/%' AND strpos(substr(m.key, 8), '/') = 0
), present AS (
  SELECT p.handle, p.seen_at, p.expires_at > now() AS present FROM mycelium.presence p WHERE p.room = :room
), handles AS (
  SELECT handle FROM manifests UNION SELECT handle FROM present
  UNION SELECT handle FROM mycelium.engines WHERE room = :room
)
SELECT h.handle,
       coalesce(e.kind, m.meta ->> 'kind', 'agent') AS kind,
       CASE WHEN e.handle IS NOT NULL OR m.meta ->> 'adapter' = 'engine' THEN 'engine'
            ELSE coalesce(m.meta ->> 'adapter', 'agent') END AS adapter,
       coalesce(e.description, m.body, '') AS description,
       coalesce(p.present, false) OR e.handle IS NOT NULL AS present,
       p.seen_at, coalesce(e.created_by, m.created_by) AS created_by, coalesce(e.created_at, m.created_at) AS created_at
FROM handles h
LEFT JOIN manifests m ON m.handle = h.handle
LEFT JOIN mycelium.engines e ON e.room = :room AND e.handle = h.handle
LEFT JOIN present p ON p.handle = h.handle
WHERE mycelium.room_known(:room)
ORDER BY h.handle

-- name: invoke_engine
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.invoke_engine(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :engine, :text,
                            :episode, :by) r

-- name: coordinate
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.coordinate(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :engine, :text, :by) r

-- name: claim_engine_summons
SELECT * FROM mycelium.claim_engine_summons(mycelium.acting(:worker, :actor, :actor_kind), :limit,
                                            :lease_seconds, :kinds)

-- name: answer_summon
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.answer_summon(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :id, :worker, :content,
                            :payload, :outcome, :error, :remember) r

-- name: summon_failed
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.summon_failed(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :id, :worker, :error) r

-- name: start_engine_run
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.start_engine_run(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :summon, :worker,
                               :protocol, :flow, :open, :lease_seconds) r

-- name: claim_engine_runs
SELECT * FROM mycelium.claim_engine_runs(mycelium.acting(:worker, :actor, :actor_kind), :limit, :lease_seconds,
                                         :kinds)

-- name: renew_engine_runs
SELECT * FROM mycelium.renew_engine_runs(mycelium.acting(:worker, :actor, :actor_kind), :lease_seconds)

-- name: release_engine_runs
-- returns: value
SELECT mycelium.release_engine_runs(mycelium.acting(:worker, :actor, :actor_kind))

-- name: engine_step
-- returns: row
-- one move of a run (a flow's or a negotiation's, whose converged close carries its agreement);
-- the run's new seq (the worker reads the run again, flow and state, only when it is due again)
SELECT r.seq, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.engine_step(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :run, :worker, :seq,
                          :trace, :posts, :step, :waiting, :wait_seconds, :pending, :speakers, :close,
                          :reason, :outcome_text, :metrics, :memory, :assignments) r

-- name: run_replies
SELECT * FROM mycelium.run_replies(:room, :run)

-- name: row_title
-- returns: row
SELECT b.key, b.title FROM mycelium.row_of_episode(:room, :episode) b

-- name: room_protocols
-- the room's protocols/<name> memories (the flows it overrides or adds)
SELECT substr(key, 11) AS name, body, value, meta, updated_at FROM mycelium.memories
WHERE room = :room AND key LIKE 'protocols/%' ORDER BY key

-- name: persona_context
-- returns: row
-- a persona's system prompt (its agents/<handle>/notes memory) and what it said and heard, oldest first
SELECT (SELECT m.body FROM mycelium.memories m WHERE m.room = :room AND m.key = 'agents/' || :handle || '/notes')
         AS notes,
       coalesce((SELECT jsonb_agg(jsonb_build_object('role', t.role, 'content', t.content) ORDER BY t.seq)
                 FROM (SELECT * FROM mycelium.persona_turns WHERE room = :room AND handle = :handle
                       ORDER BY seq DESC LIMIT :limit) t), '[]') AS turns

-- name: list_episodes
-- newest first, with the agreement a converged run carries and the rows it was compiled into;
-- 404 without the room
SELECT e.*, r.assignments, mycelium.compiled_work(e.room, e.run_id) AS tasks FROM mycelium.episodes e
JOIN mycelium.engine_runs r ON r.room = e.room AND r.id = e.run_id
WHERE e.room = :room AND mycelium.room_known(:room)
ORDER BY e.created_at DESC, e.run_id DESC LIMIT :limit

-- name: get_episode
-- returns: row
SELECT e.*, r.assignments, mycelium.compiled_work(e.room, e.run_id) AS tasks FROM mycelium.episodes e
JOIN mycelium.engine_runs r ON r.room = e.room AND r.id = e.run_id
WHERE e.room = :room AND e.short_id = :short_id

-- name: episode_messages
-- the run's slice of its thread: the summon, what it posted and the replies it read, oldest first
SELECT t.* FROM mycelium.timeline t
JOIN mycelium.engine_runs r ON r.room = t.room AND r.episode = t.episode
WHERE r.room = :room AND r.short_id = :short_id
  AND t.position >= (SELECT s.position FROM mycelium.engine_summons s WHERE s.room = r.room AND s.id = r.summon_id)
  AND (r.closed_at IS NULL OR t.position <= (SELECT max(m.position) FROM mycelium.engine_posts p
                                             JOIN mycelium.messages m ON m.room = p.room AND m.id = p.message_id
                                             WHERE p.room = r.room AND p.run_id = r.id))
  AND t.payload_type NOT IN ('ping', 'notice', 'presence', 'keepalive')
ORDER BY t.position

-- name: due_engine_runs
-- the open runs a worker holds that have something to do now, oldest first (among :ids alone, when
-- given): no question asked yet, its deadline passed (the database's clock), or every member it
-- waits for answered; each with the replies its question got (run_replies, in its order: by
-- member, then position), so a move is read in one round trip; a negotiation's with who left it,
-- if anyone did (negotiation_departure: a worker whose mechanism is at the run's turn needs nothing
-- more). (run_replies is inlined here: a WITH ORDINALITY would keep it a function scan planned
-- without the run: 2.5 ms against 0.2-0.5)
SELECT r.*, coalesce(r.deadline <= now(), false) AS expired, coalesce(got.replies, '[]') AS replies,
       CASE WHEN r.kind = 'aligner' THEN mycelium.negotiation_departure(r.room, r.id) END AS departure
FROM mycelium.engine_runs r
LEFT JOIN LATERAL (
  SELECT jsonb_agg(to_jsonb(x) ORDER BY x.sender, x.position) AS replies, count(*) AS n
  FROM mycelium.run_replies(r.room, r.id) x
) got ON true
WHERE r.lease_owner = :worker AND r.state = 'open' AND r.lease_until > now()
  AND (CAST(:ids AS bigint[]) IS NULL OR r.id = ANY (CAST(:ids AS bigint[])))
  AND (r.asked_position IS NULL OR r.deadline <= now() OR coalesce(got.n, 0) >= cardinality(r.waiting))
ORDER BY r.id

-- name: next_engine_deadline
-- returns: value
-- seconds until the earliest deadline of the open runs a worker holds (the database's clock; NULL:
-- none), when it wakes to move them even if nobody answers
SELECT extract(epoch FROM min(r.deadline) - now())::double precision FROM mycelium.engine_runs r
WHERE r.lease_owner = :worker AND r.state = 'open' AND r.deadline IS NOT NULL
