-- Rooms. The writes declare their actor (mycelium.acting around the verb's first argument: see
-- service/mycelium/verbs); the author of a write is taken from it.

-- name: create_room
-- returns: row
SELECT * FROM mycelium.create_room(mycelium.acting(:name, :actor, :actor_kind), :title, :description,
                                   :is_public, :owner, :members, :created_by)

-- name: update_room
-- returns: row
SELECT * FROM mycelium.update_room(mycelium.acting(:room, :actor, :actor_kind), :patch, :by)

-- name: delete_room
-- returns: row
-- (the room's own change hint comes back with it)
SELECT current_setting('mycelium.wake_hints', true) AS wake_hints
FROM (SELECT mycelium.delete_room(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes)) OFFSET 0) AS deleted

-- name: get_room
-- returns: row
-- by its name, else by another spelling of it (case, Unicode form)
SELECT * FROM mycelium.rooms
WHERE name = :room OR mycelium.room_fold(name) = mycelium.room_fold(:room)
ORDER BY name = :room DESC
LIMIT 1

-- name: list_rooms
-- the public rooms, and the private ones the actor owns or belongs to; a substring filter on names
SELECT * FROM mycelium.rooms
WHERE mycelium.room_admits(rooms, :actor::text)
  AND (:name::text IS NULL OR strpos(name, :name) > 0)
ORDER BY name
OFFSET :skip LIMIT :limit

-- name: room_known
-- returns: value
-- true, else 404 room_not_found
SELECT mycelium.room_known(:room)

-- name: mint_join_code
-- returns: row
SELECT * FROM mycelium.mint_join_code(mycelium.acting(:room, :actor, :actor_kind), :handle, :code_hash, :ttl_seconds)

-- name: redeem_join_code
-- returns: row
SELECT * FROM mycelium.redeem_join_code(:code_hash)

-- name: ensure_hub_key
-- returns: row
SELECT * FROM mycelium.ensure_hub_key(:kid, :public_jwk, :sealed)

-- name: rotate_hub_key
-- returns: row
SELECT * FROM mycelium.rotate_hub_key(:kid, :public_jwk, :sealed)

-- name: hub_keys
-- every key, the active one first (retired ones verify the tokens they signed)
SELECT kid, public_jwk, sealed_private, retired_at FROM mycelium.hub_keys ORDER BY retired_at NULLS FIRST, created_at DESC
