-- Receipts: the signer's batch, signing and keys (in the order the signer passes them), the export
-- and the chain check.

-- name: unsigned_receipts
SELECT * FROM mycelium.unsigned_receipt_batch(:batch)

-- name: sign_receipts
SELECT mycelium.sign_receipts(:key_id, :ids, :signatures)

-- name: register_receipt_key
-- returns: row
SELECT * FROM mycelium.register_receipt_key(:key_id, :public_key)

-- name: retire_receipt_keys
SELECT * FROM mycelium.retire_receipt_keys(:except_key_id)

-- name: may_rotate_receipt_key
-- returns: value
-- asked before a new key is made on disk (403 operator_only for anyone but an operator)
SELECT mycelium.operator_only('rotate_receipt_key')

-- name: receipt_keys
SELECT key_id, algorithm, public_key, created_at, retired_at FROM mycelium.receipt_keys ORDER BY created_at

-- name: export_receipts
-- recorded at or after since (NULL: all), of one agent (NULL: all), after this id, at most limit
SELECT * FROM mycelium.receipt_export
WHERE (:since::timestamptz IS NULL OR recorded_at_ts >= :since) AND (:agent::text IS NULL OR agent_id = :agent)
  AND id > :after
ORDER BY id
LIMIT :limit

-- name: verify_receipt_chain
SELECT * FROM mycelium.verify_receipt_chain(:agent)

-- name: rotate_receipt_key
-- register a new key and retire every other one (their signatures stay valid), in one statement
SELECT * FROM mycelium.retire_receipt_keys((mycelium.register_receipt_key(:key_id, :public_key)).key_id)
