-- Messages: post, amend, read, list, the stream, and what message search reads besides its composed
-- query. The writes declare their actor and return the wake hints their triggers kept (column
-- wake_hints), sent once they have committed.

-- name: post_message
-- returns: row
-- episode: a URN, a short id or NULL (the room); kind, subkind, payload type and sender role as the
-- envelope has them
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.post_message(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :sender, :content, :episode,
                           :recipients, :kind, :subkind, :payload_type, :payload, :parents, :sender_role) r

-- name: amend_message
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.amend_message(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :id, :content, :sender) r

-- name: list_messages
-- newest first; NULL = any: sender, message type, kind (event kind or subkind), event status, since
-- (inclusive), before a position, before a time, thread (URN, short id or live; blank: any).
-- Control payloads (pings, notices, presence) only when the message type names theirs. 404 without
-- the room.
SELECT * FROM mycelium.timeline t
WHERE t.room = :room
  AND (:sender::text IS NULL OR mycelium.normalize_handle(t.sender) = mycelium.normalize_handle(:sender))
  AND (:message_type::text IS NULL OR mycelium.message_type_of(t.payload_type, t.payload) = :message_type)
  AND (:message_type::text IS NOT NULL OR t.payload_type NOT IN ('ping', 'notice', 'presence', 'keepalive'))
  AND (:kind::text IS NULL OR coalesce(t.payload -> 'metadata' ->> 'kind', t.subkind) = :kind)
  AND (:status::text IS NULL OR t.payload -> 'metadata' ->> 'status' = :status)
  AND (:since::timestamptz IS NULL OR t.created_at >= :since)
  AND (:before_position::bigint IS NULL OR t.position < :before_position)
  AND (:before_time::timestamptz IS NULL OR t.created_at < :before_time)
  AND (nullif(btrim(:episode::text), '') IS NULL OR t.episode = mycelium.episode_ref(:room, :episode))
  AND mycelium.room_known(:room)
ORDER BY t.position DESC
OFFSET :offset LIMIT :limit

-- name: messages_after
-- the stream: what the room's timeline gained after a position, oldest first
SELECT * FROM mycelium.timeline WHERE room = :room AND position > :after ORDER BY position LIMIT :limit

-- name: timeline_head
-- returns: value
-- the room's last position (0 for none yet); 404 without the room
SELECT coalesce((SELECT last FROM mycelium.message_positions WHERE room = :room), 0) AS head
WHERE mycelium.room_known(:room)

-- name: room_clock
-- returns: value
-- the transaction's time, for a read of the room that starts with it; 404 without the room
SELECT now() WHERE mycelium.room_known(:room)

-- name: message_position
-- returns: value
SELECT position FROM mycelium.messages WHERE room = :room AND id = :id

-- name: message_neighbours
-- same-thread prose around each hit: episodes and positions (parallel arrays), how many on each
-- side; side = 'before' (nearest first) or 'after'
SELECT h.position AS hit, n.side, n.*
FROM unnest(:episodes::text[], :positions::bigint[]) AS h (episode, position)
CROSS JOIN LATERAL (
  (SELECT 'before' AS side, t.* FROM mycelium.timeline t
   WHERE t.room = :room AND t.episode = h.episode AND t.position < h.position
     AND mycelium.message_type_of(t.payload_type, t.payload) NOT IN ('ping', 'notice', 'presence', 'keepalive', 'event')
   ORDER BY t.position DESC LIMIT :around)
  UNION ALL
  (SELECT 'after' AS side, t.* FROM mycelium.timeline t
   WHERE t.room = :room AND t.episode = h.episode AND t.position > h.position
     AND mycelium.message_type_of(t.payload_type, t.payload) NOT IN ('ping', 'notice', 'presence', 'keepalive', 'event')
   ORDER BY t.position LIMIT :around)
) n
ORDER BY h.position, n.position

-- name: timeline_rows
SELECT * FROM mycelium.timeline WHERE room = :room AND position = ANY(:positions::bigint[])
