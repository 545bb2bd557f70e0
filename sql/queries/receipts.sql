-- name: unsigned_receipts
SELECT * FROM mycelium.unsigned_receipt_batch($1)

-- name: sign_receipts
SELECT mycelium.sign_receipts($1, $2, $3)

-- name: register_receipt_key
SELECT * FROM mycelium.register_receipt_key($1, $2)

-- name: retire_receipt_keys
SELECT * FROM mycelium.retire_receipt_keys($1)

-- name: receipt_keys
SELECT key_id, algorithm, public_key, created_at, retired_at FROM mycelium.receipt_keys ORDER BY created_at

-- name: export_receipts
-- $1 since (recorded at or after; NULL: all), $2 agent (NULL: all), $3 after this id, $4 limit
SELECT * FROM mycelium.receipt_export
WHERE ($1::timestamptz IS NULL OR recorded_at_ts >= $1) AND ($2::text IS NULL OR agent_id = $2) AND id > $3
ORDER BY id
LIMIT $4

-- name: verify_receipt_chain
SELECT * FROM mycelium.verify_receipt_chain($1)
