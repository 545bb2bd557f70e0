-- name: create_room
SELECT * FROM mycelium.create_room($1, $2, $3, $4, $5, $6, $7)

-- name: update_room
SELECT * FROM mycelium.update_room($1, $2, $3)

-- name: delete_room
SELECT mycelium.delete_room($1)

-- name: get_room
SELECT * FROM mycelium.rooms WHERE name = $1

-- name: list_rooms
-- $1 viewer (NULL: anonymous), $2 name filter (substring), $3 offset, $4 limit
SELECT * FROM mycelium.rooms
WHERE (is_public OR ($1::text IS NOT NULL AND (owner = $1 OR $1 = ANY (members))))
  AND ($2::text IS NULL OR strpos(name, $2) > 0)
ORDER BY name
OFFSET $3 LIMIT $4

-- name: room_exists
SELECT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = $1)
