-- Rooms as SLIM group channels (sql/slim.sql). The publisher's calls run on its own connection,
-- the one holding the rooms' advisory locks.

-- name: slim_rooms
-- every room's name (the publishers try to take each one's channel)
SELECT name FROM mycelium.rooms ORDER BY name

-- name: slim_release_channel
-- returns: value
SELECT mycelium.slim_release_channel(:room)

-- name: slim_mark_published
-- returns: value
-- the channel's published position once it has published up to :position
SELECT mycelium.slim_mark_published(:room, :position)

-- name: slim_join
-- returns: row
SELECT * FROM mycelium.slim_join(mycelium.acting(:room, :actor, :actor_kind), :handle)

-- name: slim_leave
-- returns: value
SELECT mycelium.slim_leave(mycelium.acting(:room, :actor, :actor_kind), :handle)

-- name: slim_roster
-- who is on the room's channel; 404 without the room
SELECT * FROM mycelium.slim_roster(:room) WHERE mycelium.room_known(:room)

-- name: slim_take_channels
-- every room this session now publishes, of those it did not already (:held), with the position its
-- channel published last; the rooms another session publishes are left to it
SELECT t.room, t.published
FROM mycelium.rooms r, LATERAL mycelium.slim_take_channel(r.name, :publisher) t
WHERE NOT r.name = ANY (CAST(:held AS text[]))
ORDER BY t.room

-- name: slim_channel
-- returns: row
-- how far the room's channel has published, and by whom (no row: no process has published it yet)
SELECT c.room, c.published, c.publisher, c.published_at
FROM mycelium.slim_channels c WHERE c.room = :room AND mycelium.room_known(:room)
