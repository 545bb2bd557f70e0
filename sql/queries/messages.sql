-- name: post_message
-- $1 room, $2 sender, $3 content, $4 episode (URN, short id or NULL), $5 recipients,
-- $6 kind, $7 subkind, $8 payload type, $9 payload, $10 parents, $11 sender role; wake_hints: what
-- the hub sends once this has committed (the write asked mycelium.defer_wakes to keep its hints)
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.post_message(mycelium.defer_wakes($1), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) r

-- name: amend_message
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints FROM mycelium.amend_message(mycelium.defer_wakes($1), $2, $3, $4) r

-- name: get_message
SELECT * FROM mycelium.timeline WHERE room = $1 AND id = $2

-- name: list_messages
-- newest first. $2 sender, $3 message type, $4 kind (event kind or subkind), $5 event status,
-- $6 since (inclusive), $7 before position, $8 before time, $9 episode URN; NULL = any.
-- Control payloads (pings, notices, presence) only when $3 names their type.
SELECT * FROM mycelium.timeline t
WHERE t.room = $1
  AND ($2::text IS NULL OR mycelium.normalize_handle(t.sender) = mycelium.normalize_handle($2))
  AND ($3::text IS NULL OR mycelium.message_type_of(t.payload_type, t.payload) = $3)
  AND ($3::text IS NOT NULL OR t.payload_type NOT IN ('ping', 'notice', 'presence', 'keepalive'))
  AND ($4::text IS NULL OR coalesce(t.payload -> 'metadata' ->> 'kind', t.subkind) = $4)
  AND ($5::text IS NULL OR t.payload -> 'metadata' ->> 'status' = $5)
  AND ($6::timestamptz IS NULL OR t.created_at >= $6)
  AND ($7::bigint IS NULL OR t.position < $7)
  AND ($8::timestamptz IS NULL OR t.created_at < $8)
  AND ($9::text IS NULL OR t.episode = $9)
ORDER BY t.position DESC
OFFSET $10 LIMIT $11

-- name: messages_after
-- the stream: what the room's timeline gained after position $2, oldest first
SELECT * FROM mycelium.timeline WHERE room = $1 AND position > $2 ORDER BY position LIMIT $3

-- name: timeline_head
SELECT coalesce((SELECT last FROM mycelium.message_positions WHERE room = $1), 0) AS head

-- name: episode_ref
SELECT mycelium.episode_ref($1, $2)

-- name: message_position
SELECT position FROM mycelium.messages WHERE room = $1 AND id = $2

-- name: message_neighbours
-- same-thread prose around each hit: $2 episodes, $3 positions (parallel arrays), $4 how many on
-- each side; side = 'before' (nearest first) or 'after'
SELECT h.position AS hit, n.side, n.*
FROM unnest($2::text[], $3::bigint[]) AS h (episode, position)
CROSS JOIN LATERAL (
  (SELECT 'before' AS side, t.* FROM mycelium.timeline t
   WHERE t.room = $1 AND t.episode = h.episode AND t.position < h.position
     AND mycelium.message_type_of(t.payload_type, t.payload) NOT IN ('ping', 'notice', 'presence', 'keepalive', 'event')
   ORDER BY t.position DESC LIMIT $4)
  UNION ALL
  (SELECT 'after' AS side, t.* FROM mycelium.timeline t
   WHERE t.room = $1 AND t.episode = h.episode AND t.position > h.position
     AND mycelium.message_type_of(t.payload_type, t.payload) NOT IN ('ping', 'notice', 'presence', 'keepalive', 'event')
   ORDER BY t.position LIMIT $4)
) n
ORDER BY h.position, n.position

-- name: timeline_rows
SELECT * FROM mycelium.timeline WHERE room = $1 AND position = ANY($2::bigint[])
