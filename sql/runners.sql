-- Runners: the hub starts an agent when a message is a turn for it and nothing of it is awaiting
-- (service/mycelium/workers/runners.py runs the processes; this file decides everything else).
--
--   * runners: one per (room, handle): the command line to start (argv, with {room} {handle}
--     {task} {episode} placeholders, substituted here), the working folder (absolute, or relative
--     to the hub's data folder and never outside it), the names of the environment variables to
--     pass (their values come from the worker's process, never from here), and the limits.
--   * runner_jobs: one row per start, kept as the record: when it was woken and by what, who
--     approved it, which worker ran it, the command it ran, its exit code, the tails of its output,
--     how long it took. A wake is a job row written by the same transaction as the message that is a
--     turn for the handle (t86 on messages), so a wake exists iff its message committed. There is at
--     most one pending job per handle (a partial unique index): messages that arrive before it
--     starts share it, so one wake never starts two processes, however many workers claim.
--   * A worker claims a queued job with SKIP LOCKED, under the runner's row lock. At that moment the
--     database decides whether it is still needed: if the handle's inbox holds nothing undelivered,
--     a process of the handle that was awaiting took the message, and the job is skipped. A wake
--     of a handle whose presence lease runs (something of it may be awaiting) waits
--     runners.wake_grace_seconds (config, default 1) before it may start; an idle handle's starts
--     at once.
--   * A job that fails (a non-zero exit, its timeout, its worker gone) is retried by a new job row
--     after 2, 4, 8 … s, up to the runner's max_attempts; runners.pause_after (default 5) failures
--     in a row pause the runner until an operator resumes it. A job that exits without reading its
--     message is not started again for that message. Nothing retries in a loop.

CREATE TABLE mycelium.runners (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL CONSTRAINT runner_handle_normalised CHECK (mycelium.handle_is_normalised(handle)),
  command text[] NOT NULL CONSTRAINT runner_has_command CHECK (cardinality(command) >= 1),
  cwd text NOT NULL DEFAULT '',
  env text[] NOT NULL DEFAULT '{}',
  max_concurrent integer NOT NULL DEFAULT 1 CONSTRAINT runner_max_concurrent CHECK (max_concurrent BETWEEN 1 AND 64),
  timeout_s double precision NOT NULL DEFAULT 600 CONSTRAINT runner_timeout CHECK (timeout_s > 0 AND timeout_s <= 86400),
  max_turns_per_room integer NOT NULL DEFAULT 100 CONSTRAINT runner_max_turns CHECK (max_turns_per_room >= 1),
  max_attempts integer NOT NULL DEFAULT 3 CONSTRAINT runner_max_attempts CHECK (max_attempts BETWEEN 1 AND 10),
  approval text NOT NULL DEFAULT 'none' CONSTRAINT runner_approval CHECK (approval IN ('none', 'required')),
  turns integer NOT NULL DEFAULT 0,
  failures integer NOT NULL DEFAULT 0,
  paused_reason text,
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle)
);

CREATE TABLE mycelium.runner_jobs (
  room text NOT NULL,
  id bigint GENERATED ALWAYS AS IDENTITY,
  handle text NOT NULL,
  kind text NOT NULL DEFAULT 'wake' CONSTRAINT runner_job_kind CHECK (kind IN ('wake', 'test')),
  state text NOT NULL CONSTRAINT runner_job_state
    CHECK (state IN ('waiting', 'queued', 'running', 'done', 'failed', 'skipped', 'denied')),
  reason text,
  attempt integer NOT NULL DEFAULT 1,
  retry_of bigint,
  wake_position bigint,
  wake_message uuid,
  episode text,
  task text,
  not_before timestamptz NOT NULL DEFAULT now(),
  approved_by text,
  approved_at timestamptz,
  worker text,
  taken_until timestamptz,
  command text[],
  cwd text,
  pid integer,
  inbox_mark bigint,
  started_at timestamptz,
  ended_at timestamptz,
  exit_code integer,
  stdout_tail text,
  stderr_tail text,
  duration_ms double precision,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, id),
  FOREIGN KEY (room, handle) REFERENCES mycelium.runners (room, handle) ON DELETE CASCADE
);
CREATE UNIQUE INDEX runner_jobs_one_pending ON mycelium.runner_jobs (room, handle)
  WHERE state IN ('waiting', 'queued');
CREATE INDEX runner_jobs_queued ON mycelium.runner_jobs (not_before) WHERE state = 'queued';
CREATE INDEX runner_jobs_running ON mycelium.runner_jobs (taken_until) WHERE state = 'running';

-- ---------------------------------------------------------------------------------------------
-- What a runner may be.

-- The placeholders a command line may hold.
CREATE OR REPLACE FUNCTION mycelium.runner_placeholders() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['room', 'handle', 'task', 'episode']
$$;
COMMENT ON FUNCTION mycelium.runner_placeholders IS 'public read';

-- Refuse a runner definition that cannot run (422, naming the problem); else true.
CREATE OR REPLACE FUNCTION mycelium.check_runner(p_command text[], p_cwd text, p_env text[])
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  arg text;
  token text;
  part text;
  depth integer := 0;
  name text;
BEGIN
  IF p_command IS NULL OR cardinality(p_command) = 0 OR btrim(coalesce(p_command[1], '')) = ''
     OR array_position(p_command, NULL) IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'missing_command',
      'command: a runner needs a command to start (the program and its arguments, none of them null)',
      '{"field": "command"}'::jsonb);
  END IF;
  FOREACH arg IN ARRAY p_command LOOP
    FOR token IN SELECT (regexp_matches(arg, '\{([^{}]*)\}', 'g'))[1] LOOP
      IF NOT token = ANY (mycelium.runner_placeholders()) THEN
        PERFORM mycelium.refuse(422, 'unknown_placeholder',
          format('command: {%s} is not a placeholder (a command may name {%s})', token,
                 array_to_string(mycelium.runner_placeholders(), '} {')),
          jsonb_build_object('field', 'command', 'placeholder', token,
                             'placeholders', to_jsonb(mycelium.runner_placeholders())));
      END IF;
    END LOOP;
  END LOOP;
  IF p_cwd ~ '[\x01-\x1f]' THEN
    PERFORM mycelium.refuse(422, 'bad_cwd', 'cwd: a folder name holds no control characters', '{"field": "cwd"}'::jsonb);
  END IF;
  IF p_cwd IS NOT NULL AND p_cwd <> '' AND left(p_cwd, 1) <> '/' THEN
    FOREACH part IN ARRAY string_to_array(p_cwd, '/') LOOP
      IF part = '..' THEN
        depth := depth - 1;
      ELSIF part NOT IN ('', '.') THEN
        depth := depth + 1;
      END IF;
      IF depth < 0 THEN
        PERFORM mycelium.refuse(422, 'cwd_outside_data',
          format('cwd: %L leads outside the data folder (a relative folder is inside it; give an absolute one otherwise)', p_cwd),
          jsonb_build_object('field', 'cwd', 'cwd', p_cwd));
      END IF;
    END LOOP;
  END IF;
  FOREACH name IN ARRAY coalesce(p_env, '{}') LOOP
    IF name IS NULL OR name !~ '^[A-Za-z_][A-Za-z0-9_]*$' THEN
      PERFORM mycelium.refuse(422, 'bad_env_name',
        format('env: %L is not a variable name (name the variables to pass; their values come from the worker''s environment, never from the hub)',
               coalesce(name, '')),
        jsonb_build_object('field', 'env', 'name', name));
    END IF;
  END LOOP;
  RETURN true;
END
$$;
COMMENT ON FUNCTION mycelium.check_runner IS 'public read: refuse a runner definition that cannot run (422), else true';

-- Register (or redefine) the runner of p_handle in p_room. An operator's verb behind the token gate:
-- a runner is a command the hub's workers run.
CREATE OR REPLACE FUNCTION mycelium.add_runner(
  p_room text, p_handle text, p_command text[], p_cwd text DEFAULT '', p_env text[] DEFAULT '{}',
  p_max_concurrent integer DEFAULT 1, p_timeout_s double precision DEFAULT 600,
  p_max_turns_per_room integer DEFAULT 100, p_approval text DEFAULT 'none', p_max_attempts integer DEFAULT 3,
  p_by text DEFAULT NULL
) RETURNS mycelium.runners LANGUAGE plpgsql AS $$
DECLARE
  h text := mycelium.require_handle(p_handle, 'handle');
  by_handle text := mycelium.author(p_by, 'created_by');
  r mycelium.runners;
BEGIN
  PERFORM mycelium.require_room(p_room);
  PERFORM mycelium.operator_only('add_runner');
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'registering a runner names who does it (created_by)');
  END IF;
  IF mycelium.is_engine(p_room, h) THEN
    PERFORM mycelium.refuse(422, 'runner_for_engine',
      format('@%s is an engine of room %L: the hub plays it, no runner starts it', h, p_room),
      jsonb_build_object('field', 'handle', 'handle', h));
  END IF;
  PERFORM mycelium.check_runner(p_command, p_cwd, p_env);
  IF p_max_concurrent IS NULL OR p_max_concurrent NOT BETWEEN 1 AND 64 THEN
    PERFORM mycelium.refuse(422, 'bad_runner_limit', 'max_concurrent: between 1 and 64 processes at once',
                            jsonb_build_object('field', 'max_concurrent'));
  ELSIF p_timeout_s IS NULL OR NOT (p_timeout_s > 0 AND p_timeout_s <= 86400) THEN
    PERFORM mycelium.refuse(422, 'bad_runner_limit', 'timeout_s: more than 0 and at most 86400 seconds',
                            jsonb_build_object('field', 'timeout_s'));
  ELSIF p_max_turns_per_room IS NULL OR p_max_turns_per_room < 1 THEN
    PERFORM mycelium.refuse(422, 'bad_runner_limit', 'max_turns_per_room: at least 1',
                            jsonb_build_object('field', 'max_turns_per_room'));
  ELSIF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 10 THEN
    PERFORM mycelium.refuse(422, 'bad_runner_limit', 'max_attempts: between 1 and 10',
                            jsonb_build_object('field', 'max_attempts'));
  ELSIF p_approval IS NULL OR p_approval NOT IN ('none', 'required') THEN
    PERFORM mycelium.refuse(422, 'bad_runner_limit',
      format('approval: none or required, not %L', coalesce(p_approval, '')), jsonb_build_object('field', 'approval'));
  END IF;
  INSERT INTO mycelium.runners AS x (room, handle, command, cwd, env, max_concurrent, timeout_s,
                                     max_turns_per_room, approval, max_attempts, created_by)
  VALUES (p_room, h, p_command, coalesce(p_cwd, ''), coalesce(p_env, '{}'), p_max_concurrent, p_timeout_s,
          p_max_turns_per_room, p_approval, p_max_attempts, mycelium.normalize_handle(by_handle))
  ON CONFLICT (room, handle) DO UPDATE
    SET command = excluded.command, cwd = excluded.cwd, env = excluded.env,
        max_concurrent = excluded.max_concurrent, timeout_s = excluded.timeout_s,
        max_turns_per_room = excluded.max_turns_per_room, approval = excluded.approval,
        max_attempts = excluded.max_attempts, updated_at = now()
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.add_runner IS 'public write: register or redefine the runner of a handle (an operator''s verb)';

CREATE OR REPLACE FUNCTION mycelium.require_runner(p_room text, p_handle text) RETURNS mycelium.runners
LANGUAGE plpgsql STABLE AS $$
DECLARE r mycelium.runners;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT * INTO r FROM mycelium.runners WHERE room = p_room AND handle = mycelium.normalize_handle(p_handle);
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'runner_not_found',
      format('No runner for @%s in room %L (mycelium runner add %s -- <command>)',
             mycelium.normalize_handle(p_handle), p_room, mycelium.normalize_handle(p_handle)),
      jsonb_build_object('room', p_room, 'handle', mycelium.normalize_handle(p_handle)));
  END IF;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.require_runner IS 'public read: a room''s runner of a handle (404 without one)';

-- Remove a runner (and its record of jobs). A process it started runs on until it ends.
CREATE OR REPLACE FUNCTION mycelium.remove_runner(p_room text, p_handle text) RETURNS mycelium.runners
LANGUAGE plpgsql AS $$
DECLARE r mycelium.runners := mycelium.require_runner(p_room, p_handle);
BEGIN
  PERFORM mycelium.operator_only('remove_runner');
  DELETE FROM mycelium.runners WHERE room = r.room AND handle = r.handle;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.remove_runner IS 'public write';

-- Resume a paused runner (its failures in a row are forgotten) or pause one (p_reason).
CREATE OR REPLACE FUNCTION mycelium.pause_runner(p_room text, p_handle text, p_reason text)
RETURNS mycelium.runners LANGUAGE plpgsql AS $$
DECLARE r mycelium.runners := mycelium.require_runner(p_room, p_handle);
BEGIN
  PERFORM mycelium.operator_only('pause_runner');
  UPDATE mycelium.runners
  SET paused_reason = nullif(btrim(p_reason), ''), failures = CASE WHEN nullif(btrim(p_reason), '') IS NULL
                                                                   THEN 0 ELSE failures END,
      updated_at = now()
  WHERE room = r.room AND handle = r.handle
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.pause_runner IS 'public write: pause a runner (a reason) or resume it (none)';

-- ---------------------------------------------------------------------------------------------
-- Wakes.

-- The first message addressed to p_handle in p_room that it has not been delivered (no row: none):
-- participation.sql's cursor and early deliveries; a handle never seen starts at its anchor.
CREATE OR REPLACE FUNCTION mycelium.inbox_first_pending(p_room text, p_handle text)
RETURNS TABLE (message uuid, at bigint, episode text) LANGUAGE sql STABLE AS $$
  SELECT m.id, m.position, m.episode FROM mycelium.messages m
  WHERE m.room = p_room AND m.wakes @> ARRAY[p_handle]
    AND m.position > coalesce((SELECT c.position FROM mycelium.delivery_cursors c
                               WHERE c.room = p_room AND c.handle = p_handle),
                              mycelium.inbox_anchor(p_room, p_handle))
    AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                    WHERE d.room = p_room AND d.handle = p_handle AND d.position = m.position)
  ORDER BY m.position LIMIT 1
$$;
COMMENT ON FUNCTION mycelium.inbox_first_pending IS 'public read: the first message addressed to a handle not yet delivered';

-- A number that grows whenever p_handle takes something from its inbox (its cursor, plus its early
-- deliveries): the same before and after a job means the job's process took nothing.
CREATE OR REPLACE FUNCTION mycelium.inbox_mark(p_room text, p_handle text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT c.position FROM mycelium.delivery_cursors c WHERE c.room = p_room AND c.handle = p_handle), -1)
       + (SELECT count(*) FROM mycelium.early_deliveries d WHERE d.room = p_room AND d.handle = p_handle)
$$;

-- A new job for a runner, unless one is pending already (then that one covers it): waiting for an
-- operator when the runner asks for approval (or the retry of an approved job: approved), else
-- queued, no sooner than p_not_before. Hints mycelium_runners with the room when it is queued.
CREATE OR REPLACE FUNCTION mycelium.queue_runner_job(
  r mycelium.runners, p_kind text, p_position bigint, p_message uuid, p_episode text, p_not_before timestamptz,
  p_attempt integer DEFAULT 1, p_retry_of bigint DEFAULT NULL, p_approved_by text DEFAULT NULL
) RETURNS mycelium.runner_jobs LANGUAGE plpgsql AS $$
DECLARE
  j mycelium.runner_jobs;
  hinted text;
  waits boolean := r.approval = 'required' AND p_approved_by IS NULL;
BEGIN
  INSERT INTO mycelium.runner_jobs (room, handle, kind, state, attempt, retry_of, wake_position, wake_message,
                                    episode, task, not_before, approved_by, approved_at)
  VALUES (r.room, r.handle, p_kind, CASE WHEN waits THEN 'waiting' ELSE 'queued' END, p_attempt, p_retry_of,
          p_position, p_message, p_episode,
          (SELECT b.key FROM mycelium.row_of_episode(r.room, p_episode) b WHERE b.board LIMIT 1),
          p_not_before, p_approved_by, CASE WHEN p_approved_by IS NOT NULL THEN now() END)
  ON CONFLICT (room, handle) WHERE state IN ('waiting', 'queued') DO UPDATE
    SET attempt = greatest(runner_jobs.attempt, excluded.attempt)
  RETURNING * INTO j;
  IF j.state = 'queued' THEN
    hinted := mycelium.wake_hint('mycelium_runners', r.room);
  END IF;
  RETURN j;
END
$$;

-- A message that is a turn for handles with runners wakes each (t86: after the engines' summons).
CREATE OR REPLACE FUNCTION mycelium.messages_wake_runners() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r mycelium.runners;
  grace double precision;
  j mycelium.runner_jobs;
BEGIN
  IF cardinality(NEW.wakes) = 0 THEN
    RETURN NULL;
  END IF;
  FOR r IN SELECT * FROM mycelium.runners x
           WHERE x.room = NEW.room AND x.handle = ANY (NEW.wakes) AND x.paused_reason IS NULL
             AND x.handle <> mycelium.normalize_handle(NEW.sender) LOOP
    IF EXISTS (SELECT 1 FROM mycelium.presence p
               WHERE p.room = NEW.room AND p.handle = r.handle AND p.expires_at > now()) THEN
      grace := coalesce((mycelium.config_value('runners.wake_grace_seconds', NEW.room) #>> '{}')::double precision, 1);
    ELSE
      grace := 0;
    END IF;
    j := mycelium.queue_runner_job(r, 'wake', NEW.position, NEW.id, NEW.episode,
                                   now() + make_interval(secs => grace));
  END LOOP;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t86_messages_wake_runners AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_wake_runners();

-- Start a runner now, whatever its inbox holds (`mycelium runner test`): a job of kind test.
CREATE OR REPLACE FUNCTION mycelium.test_runner(p_room text, p_handle text) RETURNS mycelium.runner_jobs
LANGUAGE plpgsql AS $$
DECLARE
  r mycelium.runners := mycelium.require_runner(p_room, p_handle);
  j mycelium.runner_jobs;
BEGIN
  PERFORM mycelium.operator_only('test_runner');
  IF EXISTS (SELECT 1 FROM mycelium.runner_jobs x
             WHERE x.room = r.room AND x.handle = r.handle AND x.state IN ('waiting', 'queued')) THEN
    PERFORM mycelium.refuse(409, 'job_pending',
      format('@%s already has a job waiting to start; it runs the runner as well as a test would', r.handle),
      jsonb_build_object('room', r.room, 'handle', r.handle));
  END IF;
  j := mycelium.queue_runner_job(r, 'test', NULL, NULL, mycelium.live_episode(r.room), now(),
                                 1, NULL, mycelium.declared_actor());
  RETURN j;
END
$$;
COMMENT ON FUNCTION mycelium.test_runner IS 'public write: start a runner once now (a job of kind test)';

CREATE OR REPLACE FUNCTION mycelium.require_job(p_room text, p_id bigint) RETURNS mycelium.runner_jobs
LANGUAGE plpgsql AS $$
DECLARE j mycelium.runner_jobs;
BEGIN
  SELECT * INTO j FROM mycelium.runner_jobs WHERE room = p_room AND id = p_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'job_not_found', format('No runner job %s in room %L', p_id, p_room),
                            jsonb_build_object('room', p_room, 'id', p_id));
  END IF;
  RETURN j;
END
$$;

-- An operator's word on a job waiting for approval: approve (it is queued) or deny (it is closed).
CREATE OR REPLACE FUNCTION mycelium.decide_runner_job(p_room text, p_id bigint, p_approve boolean, p_by text DEFAULT NULL)
RETURNS mycelium.runner_jobs LANGUAGE plpgsql AS $$
DECLARE
  j mycelium.runner_jobs := mycelium.require_job(p_room, p_id);
  by_handle text := mycelium.author(p_by, 'by');
  hinted text;
BEGIN
  PERFORM mycelium.operator_only(CASE WHEN p_approve THEN 'approve' ELSE 'deny' END || ' a runner job');
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'approving or denying a job names who does it (by)');
  END IF;
  IF j.state <> 'waiting' THEN
    PERFORM mycelium.refuse(409, 'job_not_waiting',
      format('job %s is %s: only a job waiting for approval is approved or denied', p_id, j.state),
      jsonb_build_object('room', p_room, 'id', p_id, 'state', j.state));
  END IF;
  UPDATE mycelium.runner_jobs
  SET state = CASE WHEN p_approve THEN 'queued' ELSE 'denied' END,
      approved_by = CASE WHEN p_approve THEN mycelium.normalize_handle(by_handle) END,
      approved_at = CASE WHEN p_approve THEN now() END,
      reason = CASE WHEN p_approve THEN reason ELSE format('denied by @%s', mycelium.normalize_handle(by_handle)) END,
      ended_at = CASE WHEN p_approve THEN NULL ELSE now() END,
      not_before = greatest(not_before, now())
  WHERE room = p_room AND id = p_id
  RETURNING * INTO j;
  IF p_approve THEN
    hinted := mycelium.wake_hint('mycelium_runners', p_room);
  END IF;
  RETURN j;
END
$$;
COMMENT ON FUNCTION mycelium.decide_runner_job IS 'public write: approve or deny a job waiting for approval (an operator''s verb)';

-- ---------------------------------------------------------------------------------------------
-- Running jobs (the workers' side).

-- The command line of a job: the runner's, its placeholders filled in.
CREATE OR REPLACE FUNCTION mycelium.job_command(p_command text[], p_room text, p_handle text, p_task text, p_episode text)
RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT array_agg(replace(replace(replace(replace(a, '{room}', p_room), '{handle}', p_handle),
                                   '{task}', coalesce(p_task, '')), '{episode}', coalesce(p_episode, ''))
                   ORDER BY n)
  FROM unnest(p_command) WITH ORDINALITY AS c (a, n)
$$;

-- A job whose attempt failed: a new job row tries again after 2^attempt s (or the pending one
-- covers it), while attempts are left; the runner's failures in a row count it, and at
-- runners.pause_after the runner pauses.
CREATE OR REPLACE FUNCTION mycelium.job_failed(j mycelium.runner_jobs) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  r mycelium.runners;
  again mycelium.runner_jobs;
  pause_after integer;
BEGIN
  UPDATE mycelium.runners SET failures = failures + 1 WHERE room = j.room AND handle = j.handle RETURNING * INTO r;
  pause_after := coalesce((mycelium.config_value('runners.pause_after', j.room) #>> '{}')::integer, 5);
  IF r.failures >= pause_after AND r.paused_reason IS NULL THEN
    UPDATE mycelium.runners
    SET paused_reason = format('paused after %s failed jobs in a row (the last: job %s, %s); mycelium runner resume %s',
                               r.failures, j.id, coalesce(j.reason, 'failed'), r.handle), updated_at = now()
    WHERE room = j.room AND handle = j.handle RETURNING * INTO r;
  END IF;
  IF j.kind = 'wake' AND j.attempt < r.max_attempts AND r.paused_reason IS NULL THEN
    again := mycelium.queue_runner_job(r, 'wake', j.wake_position, j.wake_message, j.episode,
                                       now() + make_interval(secs => least(60, 2 ^ j.attempt)),
                                       j.attempt + 1, j.id, j.approved_by);
  END IF;
END
$$;

-- Close the running jobs whose worker stopped renewing them (it died, with the process it ran):
-- failed, and retried by the rules.
CREATE OR REPLACE FUNCTION mycelium.reap_runner_jobs() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  j mycelium.runner_jobs;
  n integer := 0;
BEGIN
  FOR j IN
    UPDATE mycelium.runner_jobs x
    SET state = 'failed', ended_at = now(), taken_until = NULL,
        reason = format('its worker %s stopped while it ran', x.worker),
        duration_ms = extract(epoch FROM now() - x.started_at) * 1000
    FROM (SELECT y.room, y.id FROM mycelium.runner_jobs y
          WHERE y.state = 'running' AND y.taken_until < now() FOR UPDATE SKIP LOCKED) gone
    WHERE x.room = gone.room AND x.id = gone.id
    RETURNING x.*
  LOOP
    PERFORM mycelium.job_failed(j);
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;

-- Take up to p_limit queued jobs that are due, for p_worker, for p_lease_seconds: each under its
-- runner's row lock, so max_concurrent and max_turns_per_room hold however many workers claim.
-- A wake whose handle's inbox holds nothing undelivered any more (something of it awaiting took the
-- message), or whose runner is paused or used its turns, is closed as skipped instead; a job a full
-- runner cannot start stays queued. Returns the jobs started, with the command to run.
CREATE OR REPLACE FUNCTION mycelium.claim_runner_jobs(p_worker text, p_limit integer, p_lease_seconds double precision)
RETURNS SETOF mycelium.runner_jobs LANGUAGE plpgsql AS $$
DECLARE
  j mycelium.runner_jobs;
  r mycelium.runners;
  taken integer := 0;
  running integer;
  why text;
BEGIN
  PERFORM mycelium.reap_runner_jobs();
  FOR j IN SELECT * FROM mycelium.runner_jobs x
           WHERE x.state = 'queued' AND x.not_before <= now()
           ORDER BY x.not_before, x.id FOR UPDATE SKIP LOCKED LOOP
    EXIT WHEN taken >= p_limit;
    SELECT * INTO r FROM mycelium.runners WHERE room = j.room AND handle = j.handle FOR UPDATE;
    why := NULL;
    IF r.paused_reason IS NOT NULL THEN
      why := 'the runner is paused: ' || r.paused_reason;
    ELSIF j.kind = 'wake' AND r.turns >= r.max_turns_per_room THEN
      why := format('@%s used its %s turns in this room (max_turns_per_room)', r.handle, r.max_turns_per_room);
    ELSIF j.kind = 'wake' AND NOT EXISTS (SELECT 1 FROM mycelium.inbox_first_pending(j.room, j.handle)) THEN
      why := format('nothing left to deliver: a process of @%s took the message', r.handle);
    END IF;
    IF why IS NOT NULL THEN
      UPDATE mycelium.runner_jobs SET state = 'skipped', reason = why, ended_at = now()
      WHERE room = j.room AND id = j.id;
      CONTINUE;
    END IF;
    SELECT count(*) INTO running FROM mycelium.runner_jobs x
    WHERE x.room = j.room AND x.handle = j.handle AND x.state = 'running';
    CONTINUE WHEN running >= r.max_concurrent;
    UPDATE mycelium.runners SET turns = turns + 1 WHERE room = r.room AND handle = r.handle;
    UPDATE mycelium.runner_jobs
    SET state = 'running', worker = p_worker, started_at = now(),
        taken_until = now() + make_interval(secs => p_lease_seconds),
        command = mycelium.job_command(r.command, j.room, j.handle, j.task,
                                       mycelium.episode_short_id(j.episode)),
        cwd = r.cwd, inbox_mark = mycelium.inbox_mark(j.room, j.handle)
    WHERE room = j.room AND id = j.id
    RETURNING * INTO j;
    taken := taken + 1;
    RETURN NEXT j;
  END LOOP;
END
$$;
COMMENT ON FUNCTION mycelium.claim_runner_jobs IS 'public write';

-- The worker's process of a job it holds started (its pid) or is still running: the lease runs on.
-- Returns the ids of the jobs p_worker still holds (a job missing was taken from it: stop it).
CREATE OR REPLACE FUNCTION mycelium.renew_runner_jobs(p_worker text, p_lease_seconds double precision)
RETURNS bigint[] LANGUAGE sql AS $$
  WITH renewed AS (
    UPDATE mycelium.runner_jobs SET taken_until = now() + make_interval(secs => p_lease_seconds)
    WHERE state = 'running' AND worker = p_worker
    RETURNING id)
  SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM renewed
$$;
COMMENT ON FUNCTION mycelium.renew_runner_jobs IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.runner_job_started(p_room text, p_id bigint, p_worker text, p_pid integer)
RETURNS mycelium.runner_jobs LANGUAGE plpgsql AS $$
DECLARE j mycelium.runner_jobs := mycelium.require_job(p_room, p_id);
BEGIN
  IF j.state <> 'running' OR j.worker IS DISTINCT FROM p_worker THEN
    PERFORM mycelium.refuse(409, 'job_not_held',
      format('job %s is %s, held by %s, not by %s', p_id, j.state, coalesce(j.worker, 'nobody'), p_worker),
      jsonb_build_object('state', j.state, 'worker', j.worker));
  END IF;
  UPDATE mycelium.runner_jobs SET pid = p_pid WHERE room = p_room AND id = p_id RETURNING * INTO j;
  RETURN j;
END
$$;
COMMENT ON FUNCTION mycelium.runner_job_started IS 'public write';

-- A job's process ended (p_exit_code; NULL: it could not start or was killed, p_reason says why):
-- recorded, and a failure retried by the rules. The handle's presence ends with it, unless another
-- of its processes runs: what the process held is gone.
CREATE OR REPLACE FUNCTION mycelium.finish_runner_job(
  p_room text, p_id bigint, p_worker text, p_exit_code integer, p_reason text DEFAULT NULL,
  p_stdout_tail text DEFAULT '', p_stderr_tail text DEFAULT ''
) RETURNS mycelium.runner_jobs LANGUAGE plpgsql AS $$
DECLARE
  j mycelium.runner_jobs := mycelium.require_job(p_room, p_id);
  ok boolean := p_exit_code = 0 AND p_reason IS NULL;
  unread boolean;
  r mycelium.runners;
  next_up record;
  again mycelium.runner_jobs;
BEGIN
  IF j.state <> 'running' OR j.worker IS DISTINCT FROM p_worker THEN
    PERFORM mycelium.refuse(409, 'job_not_held',
      format('job %s is %s, held by %s, not by %s', p_id, j.state, coalesce(j.worker, 'nobody'), p_worker),
      jsonb_build_object('state', j.state, 'worker', j.worker));
  END IF;
  -- its process took nothing from the handle's inbox
  unread := ok AND j.kind = 'wake' AND mycelium.inbox_mark(j.room, j.handle) <= j.inbox_mark;
  UPDATE mycelium.runner_jobs
  SET state = CASE WHEN ok THEN 'done' ELSE 'failed' END,
      exit_code = p_exit_code, ended_at = now(), taken_until = NULL,
      reason = CASE WHEN NOT ok THEN coalesce(p_reason, format('exited with %s', p_exit_code))
                    WHEN unread THEN 'exited without taking a message from its inbox (not started again for what waits there)' END,
      stdout_tail = right(coalesce(p_stdout_tail, ''), 8000), stderr_tail = right(coalesce(p_stderr_tail, ''), 8000),
      duration_ms = extract(epoch FROM now() - started_at) * 1000
  WHERE room = p_room AND id = p_id
  RETURNING * INTO j;
  IF ok THEN
    UPDATE mycelium.runners SET failures = 0 WHERE room = j.room AND handle = j.handle AND failures > 0;
    -- it took its turn and more waits for the handle: the next start (one that took nothing is not
    -- started again for what it left)
    IF NOT unread AND j.kind = 'wake' THEN
      SELECT * INTO r FROM mycelium.runners WHERE room = j.room AND handle = j.handle;
      SELECT * INTO next_up FROM mycelium.inbox_first_pending(j.room, j.handle);
      IF next_up.message IS NOT NULL AND r.paused_reason IS NULL THEN
        again := mycelium.queue_runner_job(r, 'wake', next_up.at, next_up.message, next_up.episode, now());
      END IF;
    END IF;
  ELSE
    PERFORM mycelium.job_failed(j);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM mycelium.runner_jobs x
                 WHERE x.room = j.room AND x.handle = j.handle AND x.state = 'running') THEN
    UPDATE mycelium.presence SET expires_at = least(expires_at, now())
    WHERE room = j.room AND handle = j.handle;
  END IF;
  RETURN j;
END
$$;
COMMENT ON FUNCTION mycelium.finish_runner_job IS 'public write';
