-- Hub and room settings ('' = hub-wide).

-- name: settings_of
-- 404 for a room that does not exist
SELECT * FROM mycelium.settings_of(:room) WHERE :room = '' OR mycelium.room_known(:room)

-- name: write_setting
-- returns: row
-- a value (jsonb; NULL clears) for a room ('' = hub-wide); the setting as it now applies there
SELECT * FROM mycelium.write_setting(:name, :value, mycelium.acting(:room, :actor, :actor_kind), :handle)

-- name: private_rooms_closed
-- returns: value
-- whether the hub-wide auth.gate is on (row-level security closes private rooms; sql/privacy.sql)
SELECT mycelium.private_rooms_closed()
