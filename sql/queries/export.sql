-- The compliance export of one room (mycelium.export): everything it holds, the hub-wide ledger and
-- the audit trail, for an operator (every read here refuses anyone else: base.sql operator_only).
-- since (NULL: everything) bounds the room's messages, the transitions and the receipts; memories
-- come with every version, the audit trail whole.

-- name: export_room
-- returns: row
SELECT * FROM mycelium.rooms WHERE (SELECT mycelium.operator_only('export')) AND name = :room AND mycelium.room_known(:room)

-- name: export_messages
SELECT * FROM mycelium.messages
WHERE (SELECT mycelium.operator_only('export')) AND room = :room AND (:since::timestamptz IS NULL OR created_at >= :since)
ORDER BY position

-- name: export_memories
SELECT room, key, value, meta, tags, content_text, episode, version, created_by, updated_by, created_at,
       updated_at
FROM mycelium.memories WHERE (SELECT mycelium.operator_only('export')) AND room = :room ORDER BY key

-- name: export_memory_versions
SELECT * FROM mycelium.memory_versions WHERE (SELECT mycelium.operator_only('export')) AND room = :room ORDER BY id

-- name: export_leases
SELECT * FROM mycelium.assignments WHERE (SELECT mycelium.operator_only('export')) AND room = :room ORDER BY key

-- name: export_transitions
SELECT * FROM mycelium.transitions
WHERE (SELECT mycelium.operator_only('export')) AND (:since::timestamptz IS NULL OR created_at >= :since)
ORDER BY created_at, request_id

-- name: export_audit
-- the whole chain, each entry with the exact text its hash covers (at as audit_preimage renders it,
-- detail as jsonb renders it)
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at, action, actor, actor_kind,
       principal, principal_role, room, target, detail::text AS detail, encode(prev_hash, 'hex') AS prev_hash,
       encode(hash, 'hex') AS hash
FROM mycelium.audit_log WHERE (SELECT mycelium.operator_only('export')) ORDER BY id

-- name: export_public_keys
SELECT 'receipts' AS purpose, key_id, algorithm, encode(public_key, 'hex') AS public_key, NULL::jsonb AS jwk,
       created_at, retired_at
FROM mycelium.receipt_keys WHERE (SELECT mycelium.operator_only('export'))
UNION ALL
SELECT 'member_tokens', kid, 'ES256', NULL, public_jwk, created_at, retired_at FROM mycelium.hub_keys WHERE (SELECT mycelium.operator_only('export'))
ORDER BY 1, 6
