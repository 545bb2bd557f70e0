-- Board: tasks, assignments (leases), fields, board verbs and the dependency gate setting.
-- Every write is one SQL function of sql/board.sql or sql/assignments.sql; refusals come from there.
-- The writes wrap their room in mycelium.defer_wakes() and return the wake hints their triggers
-- kept (column wake_hints): the hub sends them itself once the write has committed (db/hinted.py).

-- name: create_task
-- $1 room, $2 title, $3 by, $4 key, $5 assignee, $6 parent
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.create_task(mycelium.defer_wakes($1), $2, $3, $4, $5, $6) r

-- name: board_rows
-- $1 room, $2 attention (NULL for all), $3 namespace (NULL for all), $4 limit, $5 offset
SELECT * FROM mycelium.board_rows
WHERE room = $1 AND ($2::text IS NULL OR attention = $2) AND ($3::text IS NULL OR namespace = $3)
ORDER BY updated_at DESC, key
LIMIT $4 OFFSET $5

-- name: board_row
-- a row by key, thread URN or short thread id
SELECT * FROM mycelium.board_rows
WHERE room = $1 AND (key = $2 OR episode = $2 OR short_id = $2)
ORDER BY key = $2 DESC
LIMIT 1

-- name: read_assignment
SELECT *, extract(epoch FROM expires_at - now())::double precision AS seconds_left
FROM mycelium.read_assignment($1, $2)

-- name: claim
-- $1 room, $2 key, $3 handle, $4 ttl minutes, $5 force
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.claim_task(mycelium.defer_wakes($1), $2, $3, $4, $5) r

-- name: release
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.release_task(mycelium.defer_wakes($1), $2, $3, $4) r

-- name: resolve
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.resolve_task(mycelium.defer_wakes($1), $2, $3) r

-- name: renew
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.renew_tasks(mycelium.defer_wakes($1), $2) r ORDER BY r.key

-- name: write_fields
-- $1 room, $2 key, $3 by, $4 fields (jsonb)
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.write_fields(mycelium.defer_wakes($1), $2, $3, $4) r

-- name: read_fields
SELECT mycelium.read_fields($1, $2) AS fields,
       (SELECT version FROM mycelium.memories WHERE room = $1 AND key = $2) AS version

-- name: block_row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.block_row(mycelium.defer_wakes($1), $2, $3, $4) r

-- name: unblock_row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.unblock_row(mycelium.defer_wakes($1), $2, $3) r

-- name: dismiss_row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.dismiss_row(mycelium.defer_wakes($1), $2, $3) r

-- name: promote_row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.promote_row(mycelium.defer_wakes($1), $2, $3, $4) r

-- name: dependency_gate
-- $1 room: the effective setting, the room's own and the hub-wide one
SELECT mycelium.dependency_gate_on($1) AS dependency_gate,
       (SELECT value FROM mycelium.config WHERE name = 'board.dependency_gate' AND room = $1) AS room_setting,
       (SELECT value FROM mycelium.config WHERE name = 'board.dependency_gate' AND room = '') AS hub_setting

-- name: set_dependency_gate
-- $1 on (NULL clears), $2 room ('' for the hub), $3 by
SELECT mycelium.set_dependency_gate($1, $2, $3)

-- name: sweep_expired_leases
SELECT * FROM mycelium.sweep_expired_leases($1)

-- name: next_lease_expiry
SELECT mycelium.next_lease_expiry()
