-- Links and skills: the routes call the same SQL functions a person calls from psql.

-- name: memory_links_of
SELECT mycelium.memory_links_of($1, $2)

-- name: link_graph
-- as JSON text: the route sends the database's document as it is
SELECT mycelium.link_graph($1)::text

-- name: link_integrity
SELECT mycelium.link_integrity($1)::text

-- name: expand_memory
SELECT mycelium.expand_memory($1, $2)

-- name: list_skills
-- a room's skills (memories skills/<name> with a well-formed name), newest-updated first
SELECT * FROM mycelium.memories
WHERE room = $1 AND starts_with(key, 'skills/') AND key ~ '^skills/[a-z0-9][a-z0-9._-]*$'
ORDER BY updated_at DESC, key

-- name: delete_skill
-- $1 room, $2 key, $3 who; no row when there is no such skill
SELECT (mycelium.delete_memory(m.room, m.key, $3)).key
FROM mycelium.memories m WHERE m.room = $1 AND m.key = $2
