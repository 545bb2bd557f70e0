-- name: settings_of
-- $1 room ('' = hub-wide)
SELECT * FROM mycelium.settings_of($1)

-- name: write_setting
-- $1 name, $2 value (jsonb; NULL clears), $3 room ('' = hub-wide), $4 by
SELECT * FROM mycelium.write_setting($1, $2, $3, $4)
