-- Background work: every process that runs background loops (a `mycelium worker`, or a hub that
-- runs them beside its HTTP API) reports each loop here, and the vector indexers' claims.
--
-- A process writes its rows through beat_worker (every few seconds, and at once when a loop changes
-- state) and marks them stopped with stop_worker when it shuts down. A process that dies without
-- stopping simply stops beating: worker_report calls it not alive once its heartbeat is older than
-- the caller's window, and forget_stale_workers removes rows nobody has beaten for a while.

CREATE TABLE mycelium.worker_loops (
  worker_id uuid NOT NULL,
  loop text NOT NULL CHECK (loop ~ '^[a-z][a-z0-9_-]{0,63}$'),
  kind text NOT NULL CHECK (kind IN ('worker', 'hub')),
  host text NOT NULL,
  pid integer NOT NULL,
  started_at timestamptz NOT NULL,
  state text NOT NULL CHECK (state IN ('starting', 'running', 'waiting', 'failing', 'done', 'stopped')),
  leader boolean NOT NULL DEFAULT false,
  backend_pid integer,
  interval_seconds double precision NOT NULL CHECK (interval_seconds > 0),
  last_success_at timestamptz,
  last_error text,
  last_error_at timestamptz,
  warning text,
  failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
  stuck boolean NOT NULL DEFAULT false,
  heartbeat_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (worker_id, loop),
  clock_skew_seconds double precision
);
COMMENT ON TABLE mycelium.worker_loops IS
  'One row per background loop of each process that runs them, beaten every few seconds (beat_worker).';
CREATE INDEX worker_loops_heartbeat ON mycelium.worker_loops (heartbeat_at);

-- ---------------------------------------------------------------------------------------------
-- Heartbeats, the report, forgetting.

-- A process reports its loops: p_loops is a JSON array of objects with the loop's name ("loop"),
-- "state", "leader", "backend_pid", "interval_seconds", "last_success_at", "last_error",
-- "last_error_at", "warning" (a problem of a loop that still runs), "failures", "stuck" and "clock" (the
-- process's own time when it sent the beat: how far it is off the database's is kept, for `mycelium
-- doctor` to compare the replicas' clocks). A worker already marked stopped stays stopped.
CREATE OR REPLACE FUNCTION mycelium.beat_worker(
  p_worker uuid, p_kind text, p_host text, p_pid integer, p_started_at timestamptz, p_loops jsonb
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  IF jsonb_typeof(p_loops) IS DISTINCT FROM 'array' THEN
    PERFORM mycelium.refuse(422, 'invalid_loops', 'loops is a JSON array of loop reports');
  END IF;
  INSERT INTO mycelium.worker_loops AS w (
    worker_id, loop, kind, host, pid, started_at, state, leader, backend_pid, interval_seconds,
    last_success_at, last_error, last_error_at, warning, failures, stuck, heartbeat_at, clock_skew_seconds)
  SELECT p_worker, l.loop, p_kind, p_host, p_pid, p_started_at, l.state, coalesce(l.leader, false),
         l.backend_pid, l.interval_seconds, l.last_success_at, left(l.last_error, 2000), l.last_error_at,
         left(l.warning, 2000), coalesce(l.failures, 0), coalesce(l.stuck, false), now(),
         extract(epoch FROM l.clock - clock_timestamp())
  FROM jsonb_to_recordset(p_loops) AS l (
    loop text, state text, leader boolean, backend_pid integer, interval_seconds double precision,
    last_success_at timestamptz, last_error text, last_error_at timestamptz, warning text,
    failures integer, stuck boolean, clock timestamptz)
  ON CONFLICT (worker_id, loop) DO UPDATE
    SET state = excluded.state, leader = excluded.leader, backend_pid = excluded.backend_pid,
        interval_seconds = excluded.interval_seconds, last_success_at = excluded.last_success_at,
        last_error = excluded.last_error, last_error_at = excluded.last_error_at,
        warning = excluded.warning, failures = excluded.failures, stuck = excluded.stuck, heartbeat_at = excluded.heartbeat_at,
        clock_skew_seconds = excluded.clock_skew_seconds
    WHERE w.state <> 'stopped';
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;
COMMENT ON FUNCTION mycelium.beat_worker IS 'public write';

-- A process that shuts down marks its loops stopped (and leading nothing).
CREATE OR REPLACE FUNCTION mycelium.stop_worker(p_worker uuid) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  UPDATE mycelium.worker_loops
  SET state = 'stopped', leader = false, backend_pid = NULL, stuck = false, heartbeat_at = now()
  WHERE worker_id = p_worker;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;
COMMENT ON FUNCTION mycelium.stop_worker IS 'public write';

-- Every loop of every process the table knows, with whether its process is alive (not stopped, and
-- beaten within p_alive_within) and whether it leads: it says so, its process is alive and its
-- connection still holds an advisory lock (a killed leader's row stops counting at once).
CREATE OR REPLACE FUNCTION mycelium.worker_report(p_alive_within interval DEFAULT '15 seconds')
RETURNS TABLE (
  worker_id uuid, loop text, kind text, host text, pid integer, started_at timestamptz, state text,
  leader boolean, interval_seconds double precision, last_success_at timestamptz, last_error text,
  last_error_at timestamptz, warning text, failures integer, stuck boolean, heartbeat_at timestamptz,
  alive boolean
) LANGUAGE sql STABLE AS $$
  SELECT w.worker_id, w.loop, w.kind, w.host, w.pid, w.started_at, w.state,
         w.leader AND a.alive AND EXISTS (
           SELECT 1 FROM pg_locks l
           WHERE l.pid = w.backend_pid AND l.locktype = 'advisory' AND l.granted),
         w.interval_seconds, w.last_success_at, w.last_error, w.last_error_at, w.warning, w.failures,
         w.stuck AND a.alive, w.heartbeat_at, a.alive
  FROM mycelium.worker_loops w
  CROSS JOIN LATERAL (SELECT w.state <> 'stopped' AND w.heartbeat_at >= now() - p_alive_within AS alive) a
  ORDER BY w.started_at, w.worker_id, w.loop
$$;
COMMENT ON FUNCTION mycelium.worker_report IS 'public read';

-- Remove the rows of processes nobody has beaten for p_older_than (stopped or dead); how many went.
CREATE OR REPLACE FUNCTION mycelium.forget_stale_workers(p_older_than interval DEFAULT '10 minutes')
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  DELETE FROM mycelium.worker_loops WHERE heartbeat_at < now() - p_older_than;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;
COMMENT ON FUNCTION mycelium.forget_stale_workers IS 'public write';

-- The vector indexers share the memories without a vector: each claims a batch with a session
-- advisory lock per memory, which its connection holds while it embeds (no row lock and no open
-- transaction, so writers of those memories never wait on an embedder) and gives back once the
-- vectors are stored. A claim is re-read after its lock is taken: an indexer that stored a
-- vector and let go of it after this scan began has left nothing to do. An indexer that dies
-- loses its connection and with it its claims.
CREATE OR REPLACE FUNCTION mycelium.vector_claim_key(p_room text, p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
  SELECT hashtextextended('mycelium.vector/' || p_room || '/' || p_key, 0)
$$;

CREATE OR REPLACE FUNCTION mycelium.claim_missing_vectors(p_limit integer DEFAULT 32)
RETURNS TABLE (room text, key text, version integer, content text) LANGUAGE plpgsql AS $$
DECLARE
  m record;
  n integer := 0;
BEGIN
  FOR m IN
    SELECT x.room, x.key FROM mycelium.memories x WHERE x.embedding IS NULL ORDER BY x.room, x.key
  LOOP
    EXIT WHEN n >= p_limit;
    CONTINUE WHEN NOT pg_try_advisory_lock(mycelium.vector_claim_key(m.room, m.key));
    SELECT x.room, x.key, x.version, coalesce(x.content_text, x.value ->> 'text', x.value::text)
    INTO room, key, version, content
    FROM mycelium.memories x
    WHERE x.room = m.room AND x.key = m.key AND x.embedding IS NULL;
    IF FOUND THEN
      n := n + 1;
      RETURN NEXT;
    ELSE
      PERFORM pg_advisory_unlock(mycelium.vector_claim_key(m.room, m.key));
    END IF;
  END LOOP;
END
$$;
COMMENT ON FUNCTION mycelium.claim_missing_vectors IS 'public write';

-- Give back claims taken by claim_missing_vectors (on the same connection); how many were held.
CREATE OR REPLACE FUNCTION mycelium.release_vector_claims(p_rooms text[], p_keys text[])
RETURNS integer LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE pg_advisory_unlock(mycelium.vector_claim_key(c.room, c.key)))::integer
  FROM unnest(p_rooms, p_keys) AS c (room, key)
$$;
COMMENT ON FUNCTION mycelium.release_vector_claims IS 'public write';
