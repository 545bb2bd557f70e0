-- Memories. The writes declare their actor (mycelium.acting around the verb's first argument) and
-- return the wake hints their triggers kept (column wake_hints), sent once they have committed.
-- A read that finds nothing says why in the same statement: no such room, or no such memory.

-- name: write_memory
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.write_memory(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :value, :created_by,
                           :tags, :meta, :content_text, :base_version, :embedding, :embed) r

-- name: delete_memory
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.delete_memory(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :key, :by) r

-- name: get_memory
-- returns: row
-- the memory, else 404 room_not_found or memory_not_found
SELECT m.* FROM (SELECT) AS one
LEFT JOIN mycelium.memories m ON m.room = :room AND m.key = :key
WHERE CASE WHEN m.key IS NOT NULL THEN true
           ELSE mycelium.refuse_missing(:room, 'memory_not_found', format('no memory %L in room %L', :key, :room),
                                        jsonb_build_object('room', :room, 'key', :key)) END

-- name: list_memories
-- a page of the room's memories under a key prefix ('' for all), newest first; 404 without the room
SELECT *, count(*) OVER () AS total
FROM mycelium.memories
WHERE room = :room AND starts_with(key, :prefix) AND mycelium.room_known(:room)
ORDER BY updated_at DESC, key
OFFSET :offset LIMIT :limit

-- name: memory_history
-- every version of a key, across deletes and re-creations, oldest first; 404 when it never existed
SELECT v.* FROM (SELECT) AS one
LEFT JOIN mycelium.memory_versions v ON v.room = :room AND v.key = :key
WHERE CASE WHEN v.id IS NOT NULL THEN true
           ELSE mycelium.refuse_missing(:room, 'memory_not_found',
                                        format('no memory %L in room %L has ever existed', :key, :room),
                                        jsonb_build_object('room', :room, 'key', :key)) END
ORDER BY v.id

-- name: search_memories
-- 404 without the room
SELECT s.similarity, s.score, m.*
FROM mycelium.search_memories(:room, :embedding, :query, :limit, :tags, :min_similarity) s
JOIN mycelium.memories m ON m.room = :room AND m.key = s.key
WHERE mycelium.room_known(:room)
ORDER BY s.score DESC, s.key

-- name: set_embedding
-- returns: value
SELECT mycelium.set_embedding(:room, :key, :version, :embedding)
