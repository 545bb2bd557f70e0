-- Board: tasks, assignments (leases), fields, board verbs and the dependency gate setting.
-- Every write is one SQL function of sql/board.sql or sql/assignments.sql; refusals come from there.

-- name: create_task
-- $1 room, $2 title, $3 by, $4 key, $5 assignee, $6 parent
SELECT * FROM mycelium.create_task($1, $2, $3, $4, $5, $6)

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
SELECT * FROM mycelium.claim_task($1, $2, $3, $4, $5)

-- name: release
SELECT * FROM mycelium.release_task($1, $2, $3, $4)

-- name: resolve
SELECT * FROM mycelium.resolve_task($1, $2, $3)

-- name: renew
SELECT * FROM mycelium.renew_tasks($1, $2) ORDER BY key

-- name: write_fields
-- $1 room, $2 key, $3 by, $4 fields (jsonb)
SELECT * FROM mycelium.write_fields($1, $2, $3, $4)

-- name: read_fields
SELECT mycelium.read_fields($1, $2) AS fields,
       (SELECT version FROM mycelium.memories WHERE room = $1 AND key = $2) AS version

-- name: block_row
SELECT * FROM mycelium.block_row($1, $2, $3, $4)

-- name: unblock_row
SELECT * FROM mycelium.unblock_row($1, $2, $3)

-- name: dismiss_row
SELECT * FROM mycelium.dismiss_row($1, $2, $3)

-- name: promote_row
SELECT * FROM mycelium.promote_row($1, $2, $3, $4)

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
