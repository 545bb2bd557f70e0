-- Background loops: leadership, heartbeats and the indexers' claims (sql/workers.sql).

-- name: try_lead
-- $1 the loop's lock name; a session lock, held by the leader's own connection until it closes
SELECT pg_try_advisory_lock(hashtext($1))

-- name: beat_worker
-- $1 worker id, $2 kind, $3 host, $4 pid, $5 started_at, $6 loops (jsonb array)
SELECT mycelium.beat_worker($1, $2, $3, $4, $5, $6)

-- name: stop_worker
SELECT mycelium.stop_worker($1)

-- name: forget_stale_workers
SELECT mycelium.forget_stale_workers(make_interval(secs => $1))

-- name: worker_report
-- $1 seconds within which a process must have beaten to count as alive
SELECT * FROM mycelium.worker_report(make_interval(secs => $1))

-- name: claim_missing_vectors
SELECT * FROM mycelium.claim_missing_vectors($1)

-- name: release_vector_claims
SELECT mycelium.release_vector_claims($1, $2)
