-- name: take_next
-- $1 room, $2 handle, $3 episode (NULL: the whole room), $4 seconds the caller may keep waiting;
-- inbox_state: '<more pending> <seconds the presence lease still runs>' (see take_next)
SELECT t.*, current_setting('mycelium.inbox_state', true) AS inbox_state
FROM mycelium.take_next($1, $2, $3, $4) t

-- name: reply
-- wake_hints: sent by the hub once the reply has committed
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.reply(mycelium.defer_wakes($1), $2, $3, $4, $5) r

-- name: room_members
SELECT * FROM mycelium.room_members($1)

-- name: room_floors
SELECT f.episode, f.holder, f.speakers, f.held_at, r.key, r.title
FROM mycelium.floors f
LEFT JOIN LATERAL mycelium.row_of_episode(f.room, f.episode) r ON true
WHERE f.room = $1
ORDER BY coalesce(r.key, f.episode)

-- name: hold_floor
SELECT * FROM mycelium.hold_floor($1, $2, $3, $4, $5)

-- name: release_floor
SELECT mycelium.release_floor($1, $2, $3)
