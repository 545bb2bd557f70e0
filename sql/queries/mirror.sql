-- name: follower_position
SELECT tx::text AS tx, seq FROM mycelium.register_follower($1)

-- name: pending_changes
-- changes after the follower's position that can no longer be preceded by a late commit
SELECT tx::text AS tx, seq, room, key, op
FROM mycelium.changes
WHERE (tx, seq) > ($1::xid8, $2::bigint)
  AND tx < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY tx, seq
LIMIT $3

-- name: advance_follower
SELECT mycelium.advance_follower($1, $2::xid8, $3)

-- name: memories_for_export
SELECT * FROM mycelium.memories WHERE room = $1 AND key = ANY ($2::text[])

-- name: all_memory_keys
SELECT room, key FROM mycelium.memories ORDER BY room, key

-- name: all_rooms
SELECT name FROM mycelium.rooms ORDER BY name
