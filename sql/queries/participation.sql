-- Participation: await (take_next), reply, who is present and who holds which floor.

-- name: take_next
-- returns: row
-- the next message for the handle (the actor), in the room or in one thread (NULL: the whole room),
-- the seconds the caller may keep waiting; inbox_state: '<more pending> <seconds the presence lease
-- still runs>' (see take_next)
SELECT t.*, current_setting('mycelium.inbox_state', true) AS inbox_state
FROM mycelium.take_next(mycelium.acting(:room, :actor, :actor_kind), :handle, :episode, :hold_seconds) t

-- name: reply
-- returns: row
-- wake_hints: sent by the hub once the reply has committed
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.reply(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :handle, :text, :data, :episode) r

-- name: room_members
-- every handle whose presence lease runs; 404 without the room
SELECT * FROM mycelium.room_members(:room) WHERE mycelium.room_known(:room)

-- name: room_floors
SELECT f.episode, f.holder, f.speakers, f.held_at, r.key, r.title
FROM mycelium.floors f
LEFT JOIN LATERAL mycelium.row_of_episode(f.room, f.episode) r ON true
WHERE f.room = :room
ORDER BY coalesce(r.key, f.episode)
