-- Swarms and the worker engine's turns (sql/swarms.sql, sql/worker_engine.sql). start_swarm is a
-- member's; the turn calls are the hub's own workers'.

-- name: start_swarm
-- returns: value
SELECT mycelium.start_swarm(mycelium.acting(:room, :actor, :actor_kind), :goal, CAST(:team AS text[]), :by, :title,
                            :conductor)

-- name: list_swarms
-- a room's swarms, newest first; 404 without the room (room_swarms)
SELECT * FROM mycelium.room_swarms(:room)

-- name: get_swarm
-- returns: row
SELECT * FROM mycelium.room_swarms(:room, :key)

-- name: worker_context
-- returns: value
SELECT mycelium.worker_context(:room, :id, :limit)

-- name: worker_turn
-- returns: row
SELECT mycelium.worker_turn(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :id, :worker, :content,
                            :tasks, :done, CAST(:mentions AS text[]), :payload) AS turn,
       current_setting('mycelium.wake_hints', true) AS wake_hints

-- name: worker_declined
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.worker_declined(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :id, :worker, :reason) r

-- name: renew_engine_summons
SELECT * FROM mycelium.renew_engine_summons(mycelium.acting(:worker, :actor, :actor_kind), CAST(:ids AS bigint[]),
                                            :lease_seconds)

-- name: list_worker_turns
-- a room's latest worker turns (their summons), newest first; 404 without the room
SELECT s.id, s.engine, s.how, coalesce(s.row_key, (SELECT b.key FROM mycelium.row_of_episode(s.room, s.episode) b
                                                   WHERE b.board)) AS row_key,
       s.state, s.outcome, s.attempts, s.error, s.created_at, s.done_at, a.payload AS answer
FROM mycelium.engine_summons s
LEFT JOIN mycelium.messages a ON a.room = s.room AND a.id = s.answer_id
WHERE s.room = :room AND s.kind = 'worker' AND mycelium.room_known(:room)
ORDER BY s.id DESC LIMIT :limit
