-- Usage events (sql/usage.sql): the model seam records each call; the summary groups them.

-- name: record_usage
-- returns: row
SELECT * FROM mycelium.record_usage(:kind, :engine, :engine_kind, :model, :outcome, :duration_ms, :tokens_in,
                                    :tokens_out, :attrs)

-- name: usage_summary
SELECT * FROM mycelium.usage(:group_by, :since, :until)

-- name: usage_after
-- the events after id :after, oldest first (the OpenTelemetry exporter's read)
SELECT * FROM mycelium.usage_events WHERE id > :after ORDER BY id LIMIT :limit

-- name: usage_export_mark
-- returns: value
SELECT mycelium.usage_export_mark(:exporter)

-- name: mark_usage_exported
-- returns: value
SELECT mycelium.mark_usage_exported(:exporter, :last_id)
