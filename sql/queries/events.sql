-- A handle's events (sql/events.sql): memory subscriptions, and what GET /api/events streams.

-- name: subscribe_memory
-- returns: row
SELECT * FROM mycelium.subscribe_memory(mycelium.acting(:room, :actor, :actor_kind), :handle, :prefix)

-- name: unsubscribe_memory
-- returns: row
SELECT * FROM mycelium.unsubscribe_memory(mycelium.acting(:room, :actor, :actor_kind), :handle, :prefix)

-- name: memory_subscriptions
-- a room's subscriptions (one handle's, when given); 404 without the room
SELECT * FROM mycelium.memory_subscriptions
WHERE room = :room AND (CAST(:handle AS text) IS NULL OR handle = mycelium.normalize_handle(:handle))
  AND mycelium.room_known(:room)
ORDER BY handle, prefix

-- name: handle_events_after
-- a handle's events after id :after, oldest first, a message event with its message as the timeline has it
SELECT e.*, CASE WHEN e.kind = 'message' THEN (
         SELECT to_jsonb(t) FROM mycelium.timeline t WHERE t.room = e.room AND t.position = e.position) END AS message
FROM mycelium.handle_events e
WHERE e.handle = mycelium.normalize_handle(:handle) AND e.id > :after
ORDER BY e.id LIMIT :limit

-- name: handle_events_head
-- returns: value
-- the id of a handle's newest event (0: none)
SELECT coalesce(max(id), 0) AS head FROM mycelium.handle_events WHERE handle = mycelium.normalize_handle(:handle)

-- name: prune_handle_events
-- returns: none
SELECT mycelium.prune_handle_events(make_interval(secs => :seconds))
