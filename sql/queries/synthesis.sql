-- The synthesizer: the room's synthesis memory (its cursor in its frontmatter) and the transcript
-- after the cursor that it distils.

-- name: synthesis_state
-- returns: row
-- context/synthesis as it is (no row when there is none yet)
SELECT m.version, m.value ->> 'text' AS text, m.meta FROM mycelium.memories m
WHERE m.room = :room AND m.key = 'context/synthesis'

-- name: synthesis_transcript
-- the room's prose after position :after up to :upto (every thread and the room's channel), oldest
-- first: messages and replies, amendments folded in, without the synthesizer's own posts nor the
-- messages that summon it
SELECT t.position, mycelium.normalize_handle(t.sender) AS sender, t.text, t.episode, t.created_at
FROM mycelium.timeline t
WHERE t.room = :room AND t.position > :after AND t.position <= :upto
  AND t.kind IN ('intent', 'exchange', 'commit') AND t.payload_type IN ('message', 'reply')
  AND t.sender <> 'system' AND mycelium.normalize_handle(t.sender) <> :handle
  AND NOT (:handle = ANY (t.mentions))
ORDER BY t.position
LIMIT :limit
