-- Background loops: leadership, heartbeats and the indexers' claims (sql/workers.sql).

-- name: try_lead
-- returns: value
-- the loop's lock name; a session lock, held by the leader's own connection until it closes
SELECT pg_try_advisory_lock(hashtext(:lock))

-- name: beat_worker
-- returns: none
-- loops: a jsonb array of the process's loop reports
SELECT mycelium.beat_worker(:worker_id, :kind, :host, :pid, :started_at, :loops)

-- name: stop_worker
-- returns: none
SELECT mycelium.stop_worker(:worker_id)

-- name: forget_stale_workers
-- returns: none
SELECT mycelium.forget_stale_workers(make_interval(secs => :seconds))

-- name: worker_report
-- alive_seconds: within which a process must have beaten to count as alive
SELECT * FROM mycelium.worker_report(make_interval(secs => :alive_seconds))

-- name: claim_missing_vectors
SELECT * FROM mycelium.claim_missing_vectors(:batch)

-- name: release_vector_claims
-- returns: none
SELECT mycelium.release_vector_claims(:rooms, :keys)

-- name: hub_health
-- returns: row
-- what /health says of the database
SELECT current_setting('server_version') AS postgres,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector,
       (SELECT id::text FROM mycelium.store) AS store_id,
       (SELECT version_num FROM alembic_version LIMIT 1) AS migration,
       mycelium.schema_fingerprint() AS schema_fingerprint
