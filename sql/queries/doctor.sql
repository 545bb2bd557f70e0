-- `mycelium doctor`'s look at a database: the server's version, its clock, and pgvector (available
-- on the server, installed in this database).

-- name: doctor_probe
-- returns: row
SELECT current_setting('server_version_num')::int AS num, current_setting('server_version') AS v,
       extract(epoch FROM clock_timestamp())::float8 AS now,
       (SELECT default_version FROM pg_available_extensions WHERE name = 'vector') AS available,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS installed

-- name: replica_clocks
-- each live process's clock against the database's (as its last heartbeat measured it)
SELECT host, pid, kind, avg(clock_skew_seconds) AS skew FROM mycelium.worker_loops
WHERE state <> 'stopped' AND heartbeat_at >= now() - interval '15 seconds' AND clock_skew_seconds IS NOT NULL
GROUP BY worker_id, host, pid, kind ORDER BY host, pid
