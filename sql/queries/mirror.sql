-- The markdown mirror's follower: its stored position, the changes after it, the rows to export.

-- name: follower_position
-- returns: row
SELECT tx::text AS tx, seq FROM mycelium.register_follower(:name)

-- name: pending_changes
-- changes after the follower's position that can no longer be preceded by a late commit
SELECT tx::text AS tx, seq, room, key, op
FROM mycelium.changes
WHERE (tx, seq) > (:tx::xid8, :seq::bigint)
  AND tx < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY tx, seq
LIMIT :batch

-- name: advance_follower
-- returns: none
SELECT mycelium.advance_follower(:name, :tx::xid8, :seq)

-- name: memories_for_export
SELECT * FROM mycelium.memories WHERE room = :room AND key = ANY (:keys::text[])

-- name: all_memory_keys
SELECT room, key FROM mycelium.memories ORDER BY room, key

-- name: all_rooms
SELECT name FROM mycelium.rooms ORDER BY name
