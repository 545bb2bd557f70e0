-- The wake digest beside an awaited message (sql/digest.sql).

-- name: wake_digest
-- returns: value
SELECT mycelium.wake_digest(:room, :handle, :message)
