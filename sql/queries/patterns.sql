-- Patterns (sql/patterns.sql): a load is the room's writes, then record_pattern, in one transaction;
-- a start is start_pattern.

-- name: record_pattern
-- returns: row
SELECT * FROM mycelium.record_pattern(mycelium.acting(:room, :actor, :actor_kind), :pattern, :digest, :task,
                                      :summons, :by)

-- name: start_pattern
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.start_pattern(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :by) r

-- name: room_pattern
-- returns: row
SELECT * FROM mycelium.require_room_pattern(:room)

-- name: pattern_rooms
-- the rooms loaded from pattern :pattern, newest first
SELECT * FROM mycelium.room_patterns WHERE pattern = :pattern ORDER BY loaded_at DESC

-- name: room_pattern_of
-- returns: row
-- the room's pattern, or nothing (the room page's banner)
SELECT * FROM mycelium.room_patterns WHERE room = :room
