-- `mycelium doctor`'s look at a database: the server's version, its clock, and pgvector (available
-- on the server, installed in this database).

-- name: doctor_probe
-- returns: row
SELECT current_setting('server_version_num')::int AS num, current_setting('server_version') AS v,
       extract(epoch FROM clock_timestamp())::float8 AS now,
       (SELECT default_version FROM pg_available_extensions WHERE name = 'vector') AS available,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS installed
