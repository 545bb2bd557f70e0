-- Links and skills: the routes call the same SQL functions a person calls from psql.

-- name: memory_links_of
-- returns: value
SELECT mycelium.memory_links_of(:room, :key)

-- name: link_graph
-- returns: value
-- as JSON text: the route sends the database's document as it is
SELECT mycelium.link_graph(:room)::text

-- name: link_integrity
-- returns: value
SELECT mycelium.link_integrity(:room)::text

-- name: expand_memory
-- returns: value
SELECT mycelium.expand_memory(:room, :key)

-- name: list_skills
-- a room's skills (memories skills/<name> with a well-formed name), newest-updated first; 404 without
-- the room
SELECT * FROM mycelium.memories
WHERE room = :room AND starts_with(key, 'skills/') AND key ~ '^skills/[a-z0-9][a-z0-9._-]*$'
  AND mycelium.room_known(:room)
ORDER BY updated_at DESC, key
