-- name: write_memory
SELECT * FROM mycelium.write_memory($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)

-- name: delete_memory
SELECT * FROM mycelium.delete_memory($1, $2, $3)

-- name: get_memory
SELECT * FROM mycelium.memories WHERE room = $1 AND key = $2

-- name: list_memories
-- $1 room, $2 key prefix ('' for all), $3 offset, $4 limit
SELECT *, count(*) OVER () AS total
FROM mycelium.memories
WHERE room = $1 AND starts_with(key, $2)
ORDER BY updated_at DESC, key
OFFSET $3 LIMIT $4

-- name: memory_history
-- every version of a key, across deletes and re-creations, oldest first
SELECT * FROM mycelium.memory_versions WHERE room = $1 AND key = $2 ORDER BY id

-- name: search_memories
SELECT s.similarity, s.score, m.*
FROM mycelium.search_memories($1, $2, $3, $4, $5, $6) s
JOIN mycelium.memories m ON m.room = $1 AND m.key = s.key
ORDER BY s.score DESC, s.key

-- name: memories_missing_vectors
SELECT room, key, version, coalesce(content_text, value ->> 'text', value::text) AS text
FROM mycelium.memories
WHERE embedding IS NULL
LIMIT $1

-- name: set_embedding
SELECT mycelium.set_embedding($1, $2, $3, $4)
