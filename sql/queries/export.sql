-- The compliance export of one room (mycelium.export): everything it holds, the hub-wide ledger and
-- the audit trail, for an operator. since (NULL: everything) bounds the room's messages, the
-- transitions and the receipts; memories come with every version, the audit trail whole.

-- name: export_room
-- needs: operator
-- returns: row
SELECT * FROM mycelium.rooms WHERE name = :room AND mycelium.room_known(:room)

-- name: export_messages
-- needs: operator
SELECT * FROM mycelium.messages
WHERE room = :room AND (:since::timestamptz IS NULL OR created_at >= :since)
ORDER BY position

-- name: export_memories
-- needs: operator
SELECT room, key, value, meta, tags, content_text, episode, version, created_by, updated_by, created_at,
       updated_at
FROM mycelium.memories WHERE room = :room ORDER BY key

-- name: export_memory_versions
-- needs: operator
SELECT * FROM mycelium.memory_versions WHERE room = :room ORDER BY id

-- name: export_leases
-- needs: operator
SELECT * FROM mycelium.assignments WHERE room = :room ORDER BY key

-- name: export_transitions
-- needs: operator
SELECT * FROM mycelium.transitions
WHERE :since::timestamptz IS NULL OR created_at >= :since
ORDER BY created_at, request_id

-- name: export_audit
-- needs: operator
-- the whole chain, each entry with the exact text its hash covers (at as audit_preimage renders it,
-- detail as jsonb renders it)
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at, action, actor, actor_kind,
       principal, principal_role, room, target, detail::text AS detail, encode(prev_hash, 'hex') AS prev_hash,
       encode(hash, 'hex') AS hash
FROM mycelium.audit_log ORDER BY id

-- name: export_public_keys
-- needs: operator
SELECT 'receipts' AS purpose, key_id, algorithm, encode(public_key, 'hex') AS public_key, NULL::jsonb AS jwk,
       created_at, retired_at
FROM mycelium.receipt_keys
UNION ALL
SELECT 'member_tokens', kid, 'ES256', NULL, public_jwk, created_at, retired_at FROM mycelium.hub_keys
ORDER BY 1, 6
