-- Board: tasks, assignments (leases), fields, board verbs and the dependency gate setting.
-- Every write is one SQL function of sql/board.sql or sql/assignments.sql; refusals come from there.
-- The writes declare their actor and ask to keep their wake hints (mycelium.acting around the room)
-- and return the hints their triggers kept (column wake_hints): the gateway sends them once the
-- write has committed (service/mycelium/verbs).

-- name: create_task
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.create_task(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :title, :handle, :key,
                          :assignee, :parent, :depends_on::text[]) r

-- name: board_rows
-- a page of the board (attention and namespace NULL for all); 404 without the room
SELECT * FROM mycelium.board_rows
WHERE room = :room AND (:attention::text IS NULL OR attention = :attention)
  AND (:namespace::text IS NULL OR namespace = :namespace) AND mycelium.room_known(:room)
ORDER BY updated_at DESC, key
LIMIT :limit OFFSET :offset

-- name: board_row
-- returns: row
-- a row by key, thread URN or short thread id, else 404 room_not_found or row_not_found
SELECT b.* FROM (SELECT) AS one
LEFT JOIN LATERAL (
  SELECT * FROM mycelium.board_rows
  WHERE room = :room AND (key = :ref OR episode = :ref OR short_id = :ref)
  ORDER BY key = :ref DESC
  LIMIT 1
) b ON true
WHERE CASE WHEN b.key IS NOT NULL THEN true
           ELSE mycelium.refuse_missing(:room, 'row_not_found',
                                        format('no board row %L in room %L (by key or thread id)', :ref, :room),
                                        jsonb_build_object('room', :room, 'ref', :ref)) END

-- name: read_assignment
-- returns: row
SELECT *, extract(epoch FROM expires_at - now())::double precision AS seconds_left
FROM mycelium.read_assignment(:room, :key)

-- name: claim_task
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.claim_task(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle, :ttl_minutes,
                         :force) r

-- name: release_task
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.release_task(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle, :note,
                           :force) r

-- name: resolve_task
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.resolve_task(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle) r

-- name: renew_tasks
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.renew_tasks(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :handle) r
ORDER BY r.key

-- name: write_fields
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.write_fields(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle, :fields) r

-- name: read_fields
-- returns: row
SELECT mycelium.read_fields(:room, :key) AS fields,
       (SELECT version FROM mycelium.memories WHERE room = :room AND key = :key) AS version

-- name: block_row
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.block_row(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle, :on) r

-- name: unblock_row
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.unblock_row(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle) r

-- name: dismiss_row
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.dismiss_row(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle) r

-- name: promote_row
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.promote_row(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :handle, :url) r

-- name: dependency_gate
-- returns: row
-- the effective setting of a room ('' for the hub), the room's own and the hub-wide one; 404
-- without the room
SELECT mycelium.dependency_gate_on(:room) AS dependency_gate,
       (SELECT value FROM mycelium.config WHERE name = 'board.dependency_gate' AND room = :room) AS room_setting,
       (SELECT value FROM mycelium.config WHERE name = 'board.dependency_gate' AND room = '') AS hub_setting
WHERE :room = '' OR mycelium.room_known(:room)

-- name: write_dependency_gate
-- returns: value
-- on (NULL clears), for a room ('' for the hub)
SELECT mycelium.set_dependency_gate(:enabled, mycelium.acting(:room, :actor, :actor_kind), :handle)

-- name: sweep_expired_leases
SELECT * FROM mycelium.sweep_expired_leases(:batch)

-- name: next_lease_expiry
-- returns: value
SELECT mycelium.next_lease_expiry()
