-- Engines: room citizens played by the hub's workers (a conductor walking flows, a persona played by
-- a model), the summons that wake them, and every run as a durable episode.
--
--   * engines: one row per (room, handle), with its kind; create_engine also writes the upstream
--     manifest memory agents/<handle> (frontmatter adapter: engine, kind), in the same transaction.
--     Only the engine itself (an actor declared as that engine) may write as its handle (403).
--   * engine_summons: an @-mention of a registered engine in a message (or, for a persona, a message
--     whose recipients name it) is recorded by a trigger on the insert of that message, so a summon
--     exists iff its message committed: never lost, never fired twice (unique per message and
--     engine). Engines' own text never summons (a conductor's turn addressed to a persona does).
--   * engine_runs: one run per thread at a time (a unique index on the open runs); a run is worked
--     by whichever worker holds its lease (claimed with FOR UPDATE SKIP LOCKED, renewed by its
--     worker, taken over by another after it expires). The run row says which step is current and
--     whether its question was posted; engine_step() is the one transaction that closes a step
--     (its trace entry), posts the next question and moves the floor, compared-and-swapped on the
--     run's seq: a worker that lost its lease, or computed from a stale state, changes nothing.
--   * engine_trace: one row per step taken (turn 1, 2, …: no gaps, no repeats), append-only.
--   * engine_posts: every message a run posted, in order (the run's slice of the thread).
--   * persona_turns: what a persona said and heard, per (room, handle), so it remembers across
--     turns and across workers.

-- What an engine may be: contracts/vocabulary.json's engine_kinds (the Python side reads the same
-- file); the engines table's CHECK names it, so a new kind is a change to the contract alone.
CREATE OR REPLACE FUNCTION mycelium.engine_kinds() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT array_agg(k ORDER BY n) FROM jsonb_array_elements_text({{contract vocabulary.json engine_kinds}}::jsonb)
    WITH ORDINALITY AS v (k, n)
$$;

CREATE TABLE mycelium.engines (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL CONSTRAINT engine_handle_normalised CHECK (mycelium.handle_is_normalised(handle)),
  kind text NOT NULL CONSTRAINT engine_kind_known CHECK (kind = ANY (mycelium.engine_kinds())),
  description text NOT NULL DEFAULT '',
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle)
);

CREATE TABLE mycelium.engine_summons (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  id bigint GENERATED ALWAYS AS IDENTITY,
  engine text NOT NULL,
  kind text NOT NULL,
  message_id uuid NOT NULL,
  position bigint NOT NULL,
  episode text NOT NULL,
  sender text NOT NULL,
  content text NOT NULL,
  how text NOT NULL CONSTRAINT summon_how CHECK (how IN ('mention', 'addressed')),
  state text NOT NULL DEFAULT 'pending' CONSTRAINT summon_state CHECK (state IN ('pending', 'done')),
  taken_by text,
  taken_until timestamptz,
  attempts integer NOT NULL DEFAULT 0,
  outcome text CONSTRAINT summon_outcome CHECK (outcome IN ('answered', 'started', 'refused', 'failed',
                                                              'not_admitted')),
  answer_id uuid,
  run_id bigint,
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  done_at timestamptz,
  PRIMARY KEY (room, id),
  CONSTRAINT one_summon_per_message UNIQUE (room, message_id, engine)
);
CREATE INDEX engine_summons_pending ON mycelium.engine_summons (id) WHERE state = 'pending';

CREATE TABLE mycelium.engine_runs (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  id bigint GENERATED ALWAYS AS IDENTITY,
  short_id text NOT NULL DEFAULT substr(md5(gen_random_uuid()::text), 1, 12),
  engine text NOT NULL,
  kind text NOT NULL DEFAULT 'conductor',
  episode text NOT NULL,
  task_key text,
  summon_id bigint NOT NULL,
  protocol text NOT NULL,
  flow jsonb NOT NULL,
  state text NOT NULL DEFAULT 'open'
    CONSTRAINT run_state CHECK (state IN ('open', 'resolved', 'rejected', 'converged', 'failed')),
  seq integer NOT NULL DEFAULT 0,
  turn integer NOT NULL DEFAULT 0,
  step text,
  asked_position bigint,
  waiting text[] NOT NULL DEFAULT '{}',
  deadline timestamptz,
  pending jsonb NOT NULL DEFAULT '{}',
  lease_owner text,
  lease_until timestamptz,
  reason text,
  outcome_text text,
  metrics jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  closed_at timestamptz,
  assignments jsonb CONSTRAINT run_assignments_object CHECK (jsonb_typeof(assignments) = 'object'),
  PRIMARY KEY (room, id),
  CONSTRAINT run_short_id_unique UNIQUE (room, short_id),
  CONSTRAINT one_run_per_summon UNIQUE (room, summon_id)
);
CREATE UNIQUE INDEX engine_runs_one_per_thread ON mycelium.engine_runs (room, episode) WHERE state = 'open';
CREATE INDEX engine_runs_open ON mycelium.engine_runs (lease_until) WHERE state = 'open';
COMMENT ON COLUMN mycelium.engine_runs.assignments IS
  'The agreement a converged run carries ({issue: value}); NULL when there is none.';

CREATE TABLE mycelium.engine_trace (
  room text NOT NULL,
  run_id bigint NOT NULL,
  turn integer NOT NULL CONSTRAINT trace_turn_positive CHECK (turn >= 1),
  step text NOT NULL,
  entry jsonb NOT NULL,
  worker text,
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, run_id, turn),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.engine_runs (room, id) ON DELETE CASCADE
);

CREATE TABLE mycelium.engine_posts (
  room text NOT NULL,
  run_id bigint NOT NULL,
  seq integer NOT NULL,
  message_id uuid NOT NULL,
  event text NOT NULL,
  turn integer NOT NULL,
  worker text,
  PRIMARY KEY (room, run_id, seq),
  CONSTRAINT one_post_per_message UNIQUE (message_id),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.engine_runs (room, id) ON DELETE CASCADE
);

CREATE TABLE mycelium.persona_turns (
  room text NOT NULL,
  handle text NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  role text NOT NULL CONSTRAINT persona_turn_role CHECK (role IN ('user', 'assistant')),
  content text NOT NULL,
  summon_id bigint,
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle, seq),
  FOREIGN KEY (room, handle) REFERENCES mycelium.engines (room, handle) ON DELETE CASCADE
);

-- ---------------------------------------------------------------------------------------------
-- Rules on the timeline.

-- Is p_handle (normalised) an engine of p_room: registered there, or one of the reserved handles?
CREATE OR REPLACE FUNCTION mycelium.is_engine(p_room text, p_handle text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT p_handle = ANY (mycelium.engine_handles())
      OR EXISTS (SELECT 1 FROM mycelium.engines e WHERE e.room = p_room AND e.handle = p_handle)
$$;

-- Only a registered engine writes as its handle (base.sql reserves the built-in handles; this
-- extends the rule to every engine a room registers). Named to fire after messages_admit and
-- before messages_before_insert takes the room's position.
CREATE OR REPLACE FUNCTION mycelium.messages_admit_engine() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
  IF NEW.sender = 'system' THEN
    RETURN NEW;
  END IF;
  h := mycelium.normalize_handle(NEW.sender);
  IF EXISTS (SELECT 1 FROM mycelium.engines e WHERE e.room = NEW.room AND e.handle = h)
     AND NOT mycelium.acting_as_engine(h) THEN
    PERFORM mycelium.refuse(403, 'reserved_handle',
      format('sender: @%s is the handle of an engine; only that engine writes as it', h),
      jsonb_build_object('field', 'sender', 'handle', h));
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER messages_admit_engine BEFORE INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_admit_engine();

-- Record the summons a message makes, in its own transaction. A text @-mention of a registered
-- engine summons it (unless an engine wrote the text); a persona is also summoned by a message
-- addressed to it (its recipients), as a conductor's turn is. The engine workers wait on
-- mycelium_engines alone: a summon hints the room's name there; a message from a member an open run
-- of the thread waits for, after its question, hints '<room>\t<run id>' (the worker holding the run
-- reads whether it is due: run_replies and due_engine_runs). Other messages wake no engine worker.
CREATE OR REPLACE FUNCTION mycelium.messages_summon_engines() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  from_engine boolean;
  me text;
  hinted text;
  waited bigint;
BEGIN
  IF NEW.kind <> 'exchange' OR coalesce(NEW.subkind, '') = 'amend'
     OR NEW.payload_type IN ('ping', 'notice', 'presence', 'keepalive') THEN
    RETURN NULL;
  END IF;
  IF NEW.payload_type IN ('message', 'reply') THEN
    SELECT r.id INTO waited FROM mycelium.engine_runs r
    WHERE r.room = NEW.room AND r.episode = NEW.episode AND r.state = 'open'
      AND NEW.position > r.asked_position AND mycelium.normalize_handle(NEW.sender) = ANY (r.waiting);
    IF waited IS NOT NULL THEN
      hinted := mycelium.wake_hint('mycelium_engines', NEW.room || E'\t' || waited);
    END IF;
  END IF;
  IF cardinality(NEW.mentions) = 0 AND cardinality(NEW.recipients) = 0 THEN
    RETURN NULL;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM mycelium.engines e WHERE e.room = NEW.room) THEN
    RETURN NULL;
  END IF;
  me := mycelium.normalize_handle(NEW.sender);
  from_engine := mycelium.is_engine(NEW.room, me);
  INSERT INTO mycelium.engine_summons (room, engine, kind, message_id, position, episode, sender, content, how)
  SELECT NEW.room, e.handle, e.kind, NEW.id, NEW.position, NEW.episode, me, NEW.content,
         CASE WHEN e.handle = ANY (NEW.mentions) AND NOT from_engine THEN 'mention' ELSE 'addressed' END
  FROM mycelium.engines e
  WHERE e.room = NEW.room AND e.handle <> me
    AND ((e.handle = ANY (NEW.mentions) AND NOT from_engine)
         OR (e.kind = 'persona' AND e.handle = ANY (NEW.recipients)))
  ON CONFLICT DO NOTHING;
  IF FOUND THEN
    hinted := mycelium.wake_hint('mycelium_engines', NEW.room);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER messages_summon_engines AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_summon_engines();

CREATE OR REPLACE FUNCTION mycelium.engine_trace_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM mycelium.engine_runs r
                                      WHERE r.room = OLD.room AND r.id = OLD.run_id) THEN
    RETURN OLD;  -- the run (its room) is going
  END IF;
  PERFORM mycelium.refuse(409, 'append_only', 'an episode''s trace is append-only');
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER engine_trace_append_only BEFORE UPDATE OR DELETE ON mycelium.engine_trace
  FOR EACH ROW EXECUTE FUNCTION mycelium.engine_trace_append_only();

-- ---------------------------------------------------------------------------------------------
-- Registering engines.

CREATE OR REPLACE FUNCTION mycelium.create_engine(
  p_room text, p_handle text, p_kind text, p_description text DEFAULT '', p_by text DEFAULT NULL
) RETURNS mycelium.engines LANGUAGE plpgsql AS $$
DECLARE
  h text := mycelium.require_handle(p_handle, 'handle');
  by_handle text := mycelium.author(p_by, 'created_by');
  r mycelium.engines;
  written mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_kind IS NULL OR NOT (p_kind = ANY (mycelium.engine_kinds())) THEN
    PERFORM mycelium.refuse(422, 'unknown_engine_kind',
      format('an engine is a %s, not %L', array_to_string(mycelium.engine_kinds(), ' or a '), coalesce(p_kind, '')),
      jsonb_build_object('kind', p_kind, 'kinds', to_jsonb(mycelium.engine_kinds())));
  END IF;
  IF h = 'system' THEN
    PERFORM mycelium.refuse(422, 'reserved_handle', '@system is the hub itself, not an engine');
  END IF;
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'registering an engine names who does it (created_by)');
  END IF;
  INSERT INTO mycelium.engines (room, handle, kind, description, created_by)
  VALUES (p_room, h, p_kind, coalesce(p_description, ''), mycelium.normalize_handle(by_handle))
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;
  IF r.handle IS NULL THEN
    PERFORM mycelium.refuse(409, 'engine_exists', format('@%s is already an engine of room %L', h, p_room),
                            jsonb_build_object('room', p_room, 'handle', h));
  END IF;
  written := mycelium.write_memory(p_room, 'agents/' || h,
    jsonb_build_object('text', coalesce(nullif(p_description, ''), format('# @%s', h))), by_handle, NULL,
    jsonb_build_object('adapter', 'engine', 'kind', p_kind, 'handle', h));
  RETURN r;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Summons.

-- How many times a summon is taken before it is given up: a summon that makes every attempt fail
-- (its worker raised, or died with it) is closed as failed, with the error said in its thread.
CREATE OR REPLACE FUNCTION mycelium.summon_attempts() RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT 5
$$;

-- Take up to p_limit pending summons of the given kinds (NULL: every kind) for p_worker, for
-- p_lease_seconds; a summon whose taker stopped (its lease ran out) is taken again. One taken as
-- often as mycelium.summon_attempts() allows comes back marked outcome 'failed' (still pending): the
-- worker closes it with summon_failed, which says so in the thread, instead of trying it again.
CREATE OR REPLACE FUNCTION mycelium.claim_engine_summons(
  p_worker text, p_limit integer, p_lease_seconds double precision, p_kinds text[] DEFAULT NULL
) RETURNS SETOF mycelium.engine_summons LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY
  UPDATE mycelium.engine_summons s
  SET taken_by = p_worker, taken_until = now() + make_interval(secs => p_lease_seconds),
      attempts = s.attempts + 1,
      outcome = CASE WHEN s.attempts >= mycelium.summon_attempts() THEN 'failed' END
  FROM (SELECT x.room, x.id FROM mycelium.engine_summons x
        WHERE x.state = 'pending' AND (x.taken_until IS NULL OR x.taken_until < now())
          AND (p_kinds IS NULL OR x.kind = ANY (p_kinds))
        ORDER BY x.id LIMIT p_limit FOR UPDATE SKIP LOCKED) pick
  WHERE s.room = pick.room AND s.id = pick.id
  RETURNING s.*;
END
$$;

-- An attempt at a summon p_worker holds failed with p_error (NULL: the summon was found given up).
-- While attempts are left, the summon goes back, taken again after a pause that doubles each time;
-- after the last (or when the claim marked it given up) it is closed as failed and the engine says
-- so in the thread (unless the floor does not admit it), with the error on the summon.
CREATE OR REPLACE FUNCTION mycelium.summon_failed(p_room text, p_id bigint, p_worker text, p_error text)
RETURNS mycelium.engine_summons LANGUAGE plpgsql AS $$
DECLARE
  s mycelium.engine_summons := mycelium.held_summon(p_room, p_id, p_worker);
  posted mycelium.messages;
  why text := coalesce(nullif(btrim(p_error), ''), s.error, 'its workers stopped while answering it');
BEGIN
  IF s.attempts < mycelium.summon_attempts() AND s.outcome IS NULL THEN
    UPDATE mycelium.engine_summons
    SET error = why, taken_until = now() + make_interval(secs => least(30, 0.1 * 2 ^ s.attempts))
    WHERE room = p_room AND id = p_id
    RETURNING * INTO s;
    RETURN s;
  END IF;
  BEGIN
    posted := mycelium.post_message(p_room, s.engine,
      format('✗ %s could not answer this after %s attempt(s) (%s); the summon is closed as failed.',
             s.engine, least(s.attempts, mycelium.summon_attempts()), left(why, 500)),
      s.episode, '{}', 'exchange', NULL, 'reply', jsonb_build_object('action', 'reply', 'summon_failed', true),
      ARRAY[s.message_id], 'agent');
  EXCEPTION WHEN SQLSTATE 'MY409' OR SQLSTATE 'MY403' THEN
    posted := NULL;
  END;
  UPDATE mycelium.engine_summons
  SET state = 'done', outcome = 'failed', error = why, answer_id = posted.id, done_at = now(), taken_until = NULL
  WHERE room = p_room AND id = p_id
  RETURNING * INTO s;
  RETURN s;
END
$$;

-- The summon p_worker holds, locked; 409 when another worker took it over (or it is done).
CREATE OR REPLACE FUNCTION mycelium.held_summon(p_room text, p_id bigint, p_worker text)
RETURNS mycelium.engine_summons LANGUAGE plpgsql AS $$
DECLARE s mycelium.engine_summons;
BEGIN
  SELECT * INTO s FROM mycelium.engine_summons WHERE room = p_room AND id = p_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'summon_not_found', format('no summon %s in room %L', p_id, p_room));
  END IF;
  IF s.state <> 'pending' OR s.taken_by IS DISTINCT FROM p_worker THEN
    PERFORM mycelium.refuse(409, 'summon_not_held',
      format('summon %s is %s, held by %s, not by %s', p_id, s.state, coalesce(s.taken_by, 'nobody'), p_worker),
      jsonb_build_object('state', s.state, 'taken_by', s.taken_by));
  END IF;
  IF NOT mycelium.acting_as_engine(s.engine) THEN
    PERFORM mycelium.refuse(403, 'not_the_engine', format('only @%s answers its summons', s.engine));
  END IF;
  RETURN s;
END
$$;

-- Answer a summon in place (the thread or room it came from), as the engine, and close it. A post
-- the thread's floor does not admit is not made: the summon closes as not_admitted. p_remember:
-- turns to keep in the persona's memory ([{role, content}]), in the same transaction.
CREATE OR REPLACE FUNCTION mycelium.answer_summon(
  p_room text, p_id bigint, p_worker text, p_content text, p_payload jsonb DEFAULT '{}',
  p_outcome text DEFAULT 'answered', p_error text DEFAULT NULL, p_remember jsonb DEFAULT NULL
) RETURNS mycelium.engine_summons LANGUAGE plpgsql AS $$
DECLARE
  s mycelium.engine_summons := mycelium.held_summon(p_room, p_id, p_worker);
  posted mycelium.messages;
  v_outcome text := coalesce(p_outcome, 'answered');
  t jsonb;
BEGIN
  IF p_content IS NOT NULL AND btrim(p_content) <> '' THEN
    BEGIN
      posted := mycelium.post_message(p_room, s.engine, p_content, s.episode, '{}', 'exchange', NULL,
                                      'reply', coalesce(p_payload, '{}'), ARRAY[s.message_id], 'agent');
    EXCEPTION WHEN SQLSTATE 'MY409' OR SQLSTATE 'MY403' THEN
      v_outcome := 'not_admitted';
    END;
  END IF;
  IF v_outcome <> 'not_admitted' AND p_remember IS NOT NULL AND s.kind = 'persona' THEN
    FOR t IN SELECT * FROM jsonb_array_elements(p_remember) LOOP
      INSERT INTO mycelium.persona_turns (room, handle, role, content, summon_id)
      VALUES (p_room, s.engine, t ->> 'role', t ->> 'content', s.id);
    END LOOP;
  END IF;
  UPDATE mycelium.engine_summons
  SET state = 'done', outcome = v_outcome, answer_id = posted.id, error = p_error, done_at = now(),
      taken_until = NULL
  WHERE room = p_room AND id = p_id
  RETURNING * INTO s;
  RETURN s;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Runs.

-- Start a run from a summon: the run row (one open run per thread: 409 run_in_progress), the
-- thread's floor held by the engine alone, the opening post, the summon closed; one transaction.
-- A run needs a task's thread (422 run_needs_task from the room's channel or a thread of no row).
CREATE OR REPLACE FUNCTION mycelium.start_engine_run(
  p_room text, p_summon bigint, p_worker text, p_protocol text, p_flow jsonb, p_open jsonb,
  p_lease_seconds double precision
) RETURNS mycelium.engine_runs LANGUAGE plpgsql AS $$
DECLARE
  s mycelium.engine_summons := mycelium.held_summon(p_room, p_summon, p_worker);
  row_key text;
  r mycelium.engine_runs;
  posted mycelium.messages;
BEGIN
  IF s.episode = mycelium.live_episode(p_room) THEN
    PERFORM mycelium.refuse(422, 'run_needs_task',
      format('A run needs a task: summon @%s in the task''s thread, or use `mycelium board coordinate <row> %s "…"`',
             s.engine, s.engine), jsonb_build_object('engine', s.engine));
  END IF;
  SELECT b.key INTO row_key FROM mycelium.row_of_episode(p_room, s.episode) b WHERE b.board;
  IF row_key IS NULL THEN
    PERFORM mycelium.refuse(422, 'run_needs_task',
      format('A run needs a task: thread %L is not a board row''s; use `mycelium board coordinate <row> %s "…"`',
             mycelium.episode_short_id(s.episode), s.engine), jsonb_build_object('engine', s.engine));
  END IF;
  BEGIN
    INSERT INTO mycelium.engine_runs (room, engine, episode, task_key, summon_id, protocol, flow,
                                      lease_owner, lease_until)
    VALUES (p_room, s.engine, s.episode, row_key, s.id, p_protocol, p_flow, p_worker,
            now() + make_interval(secs => p_lease_seconds))
    RETURNING * INTO r;
  EXCEPTION WHEN unique_violation THEN
    PERFORM mycelium.refuse(409, 'run_in_progress',
      format('A run is already going in this thread (%s); wait for it to close', row_key),
      jsonb_build_object('episode', s.episode, 'key', row_key));
  END;
  PERFORM mycelium.hold_floor(p_room, s.episode, s.engine, '{}', s.engine);
  IF p_open IS NOT NULL THEN
    posted := mycelium.post_message(p_room, s.engine, p_open ->> 'content', s.episode, '{}', 'intent',
                                    'mission', 'message', coalesce(p_open -> 'payload', '{}'),
                                    ARRAY[s.message_id], 'coordinator');
    INSERT INTO mycelium.engine_posts (room, run_id, seq, message_id, event, turn, worker)
    VALUES (p_room, r.id, 1, posted.id, 'open', 0, p_worker);
  END IF;
  UPDATE mycelium.engine_summons
  SET state = 'done', outcome = 'started', run_id = r.id, answer_id = posted.id, done_at = now(),
      taken_until = NULL
  WHERE room = p_room AND id = p_summon;
  RETURN r;
END
$$;

-- Take up to p_limit open runs of the given kinds (NULL: every kind) whose lease is free or ran
-- out, for p_worker.
CREATE OR REPLACE FUNCTION mycelium.claim_engine_runs(
  p_worker text, p_limit integer, p_lease_seconds double precision, p_kinds text[] DEFAULT NULL
) RETURNS SETOF mycelium.engine_runs LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY
  UPDATE mycelium.engine_runs r
  SET lease_owner = p_worker, lease_until = now() + make_interval(secs => p_lease_seconds)
  FROM (SELECT x.room, x.id FROM mycelium.engine_runs x
        WHERE x.state = 'open' AND (x.lease_until IS NULL OR x.lease_until < now())
          AND (p_kinds IS NULL OR x.kind = ANY (p_kinds))
        ORDER BY x.id LIMIT p_limit FOR UPDATE SKIP LOCKED) pick
  WHERE r.room = pick.room AND r.id = pick.id
  RETURNING r.*;
END
$$;

-- Renew the leases p_worker still holds; the runs it holds (a run another worker took over is not
-- among them).
CREATE OR REPLACE FUNCTION mycelium.renew_engine_runs(p_worker text, p_lease_seconds double precision)
RETURNS TABLE (room text, id bigint) LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY
  UPDATE mycelium.engine_runs r SET lease_until = now() + make_interval(secs => p_lease_seconds)
  WHERE r.lease_owner = p_worker AND r.state = 'open'
  RETURNING r.room, r.id;
END
$$;

-- Give back p_worker's leases (it stops): another worker may take the runs at once.
CREATE OR REPLACE FUNCTION mycelium.release_engine_runs(p_worker text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  UPDATE mycelium.engine_runs SET lease_owner = NULL, lease_until = NULL
  WHERE lease_owner = p_worker AND state = 'open';
  GET DIAGNOSTICS n = ROW_COUNT;
  UPDATE mycelium.engine_summons SET taken_until = NULL WHERE taken_by = p_worker AND state = 'pending';
  RETURN n;
END
$$;

-- An episode's quality (hub.md §11.3; mirrors mycelium.engines.metrics): over the members who stated
-- a confidence (first and last, {handle: 0..1}); NULL with fewer than two reporters or fewer than
-- all members but one. MPC = mean last confidence; GAR = share of reporters whose move agrees with
-- the group's side of 0.5 (at exactly 0.5: those who did not move); SCR = social-compliance
-- revisions over revisions (a flow records no deference, so a move over 0.05 is a grounded
-- argument); provenance weight = (1 - SCR) x GAR; rounded to 4 places.
CREATE OR REPLACE FUNCTION mycelium.episode_quality(p_first jsonb, p_last jsonb, p_cast jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  WITH reporters AS (
    SELECT h, (p_last ->> h)::numeric AS last, coalesce((p_first ->> h)::numeric, (p_last ->> h)::numeric) AS first
    FROM jsonb_array_elements_text(coalesce(p_cast, '[]')) AS c (h)
    WHERE jsonb_typeof(p_last -> h) = 'number'
  ), m AS (
    SELECT count(*) AS n, avg(last) AS mpc FROM reporters
  ), g AS (
    SELECT count(*) FILTER (WHERE CASE WHEN m.mpc = 0.5 THEN r.last = r.first
                                       ELSE (r.last - r.first) * (m.mpc - 0.5) >= 0 END) AS genuine,
           count(*) FILTER (WHERE abs(r.last - r.first) > 0.05) AS revised
    FROM reporters r, m
  )
  SELECT CASE WHEN m.n < 2 OR m.n < jsonb_array_length(coalesce(p_cast, '[]')) - 1 THEN NULL
              ELSE jsonb_build_object('mpc', round(m.mpc, 4), 'gar', round(g.genuine::numeric / m.n, 4), 'scr', 0,
                                      'provenance_weight', round(g.genuine::numeric / m.n, 4), 'participants', m.n)
         END
  FROM m, g
$$;

-- The work/ rows the task compiler filed from a run's agreement, in line order; none from a room
-- the principal may not see (sql/compiler.sql holds the table, sql/privacy.sql the rule; PL/pgSQL,
-- so this file may name them before they are defined).
CREATE OR REPLACE FUNCTION mycelium.compiled_work(p_room text, p_run bigint) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT mycelium.room_visible(p_room) THEN
    RETURN '{}';
  END IF;
  RETURN coalesce((SELECT array_agg(c.key ORDER BY c.line) FROM mycelium.compiled_tasks c
                   WHERE c.room = p_room AND c.run_id = p_run), '{}');
END
$$;

-- The record of a run as upstream writes log/episodes/<short_id>.md: the header, the flow (JSON,
-- which is YAML) and the trace (one JSON line per step).
CREATE OR REPLACE FUNCTION mycelium.episode_record(p_room text, p_run bigint) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT format(E'# Episode %s\n\n- topic: `urn:concept:mycelium:%s`\n- outcome: **%s**\n- participants: %s\n%s- within: `%s`\n%s\n## Flow\n\n```yaml\n%s\n```\n\n## Trace\n\n```jsonl\n%s\n```\n',
           mycelium.episode_urn(r.room, r.short_id), r.room, r.state,
           (SELECT string_agg(h, ', ') FROM jsonb_array_elements_text(r.flow -> 'cast') AS c (h)),
           coalesce((SELECT format(E'- quality: MPC %s · GAR %s · SCR %s · provenance weight %s\n',
                                   q ->> 'mpc', q ->> 'gar', q ->> 'scr', q ->> 'provenance_weight')
                     FROM mycelium.episode_quality(r.pending -> 'first_confidence', r.pending -> 'last_confidence',
                                                   r.flow -> 'cast') AS q WHERE q IS NOT NULL), '')
             || coalesce(format(E'- satisfaction: min %s\n', r.metrics ->> 'min_satisfaction'), '')
             || coalesce((SELECT format(E'- work: %s\n', string_agg(format('`%s`', k), ', '))
                          FROM unnest(mycelium.compiled_work(r.room, r.id)) AS w (k) HAVING count(*) > 0), ''),
           r.episode,
           CASE WHEN r.state = 'converged' AND r.task_key IS NOT NULL
                THEN format(E'- memory: `context/decision/%s`\n', regexp_replace(r.task_key, '^work/', '')) ELSE '' END,
           jsonb_pretty(jsonb_build_object('name', r.flow #> '{protocol,name}', 'description',
                          r.flow #> '{protocol,description}', 'roles', r.flow #> '{protocol,roles}',
                          'steps', r.flow #> '{protocol,steps}', 'bound', r.flow -> 'bound', 'cast', r.flow -> 'cast',
                          'ask', r.flow -> 'ask')),
           coalesce((SELECT string_agg(t.entry::text, E'\n' ORDER BY t.turn) FROM mycelium.engine_trace t
                     WHERE t.room = r.room AND t.run_id = r.id), ''))
  FROM mycelium.engine_runs r WHERE r.room = p_room AND r.id = p_run
$$;

-- One step of a run, in one transaction, compared and swapped on the run's seq (p_seq: the seq
-- the worker computed from; 409 step_moved otherwise) and its lease (409 lease_lost):
--   p_trace      the entries of the steps just taken (an array, or one object; turns run.turn + 1, …);
--   p_posts      messages to post as the engine, in order ([{event, content, kind, subkind,
--                payload_type, payload, recipients}]); the last 'turn' post is the question asked;
--   p_step       the current step after this one, p_waiting whom it waits for, p_wait_seconds
--                how long (the deadline, on the database clock), p_pending the conductor's state;
--   p_speakers   the floor: held by the engine for exactly these members (NULL: left as it is);
--   p_close      resolved, rejected, converged or failed to close the run (floor released);
--   p_memory     memories to write as the engine ([{key, text, meta}]): the saved decision, the summary;
--                or child tasks to file ([{task: {title, assignee, parent}}], through create_task).
--   p_assignments the agreement a converged close carries ({issue: value}; kept only with converged).
-- The first message a transaction inserts locks the room's position counter until the commit (every
-- other writer of the room waits: messages.sql), so the step does everything that posts nothing
-- first: the trace, the run row and, on a close, its record (log/episodes/<id>, not a board row: no
-- notice). Then the floor (its notice the first message), the posts with their engine_posts rows,
-- the question's position on the run row, and last the memories (a child task's `filed` notice
-- after the posts, as before).
CREATE OR REPLACE FUNCTION mycelium.engine_step(
  p_room text, p_run bigint, p_worker text, p_seq integer, p_trace jsonb, p_posts jsonb,
  p_step text, p_waiting text[], p_wait_seconds double precision, p_pending jsonb,
  p_speakers text[] DEFAULT NULL, p_close text DEFAULT NULL, p_reason text DEFAULT NULL,
  p_outcome_text text DEFAULT NULL, p_metrics jsonb DEFAULT NULL, p_memory jsonb DEFAULT NULL,
  p_assignments jsonb DEFAULT NULL
) RETURNS mycelium.engine_runs LANGUAGE plpgsql AS $$
DECLARE
  r mycelium.engine_runs;
  p jsonb;
  posted mycelium.messages;
  asked bigint;
  next_seq integer;
  written mycelium.memories;
  old_turn integer;
  old_step text;
  taken integer;
BEGIN
  SELECT * INTO r FROM mycelium.engine_runs WHERE room = p_room AND id = p_run FOR UPDATE;
  old_turn := r.turn;
  old_step := r.step;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'run_not_found', format('no run %s in room %L', p_run, p_room));
  END IF;
  IF NOT mycelium.acting_as_engine(r.engine) THEN
    PERFORM mycelium.refuse(403, 'not_the_engine', format('only @%s steps its runs', r.engine));
  END IF;
  IF r.state <> 'open' THEN
    PERFORM mycelium.refuse(409, 'run_closed', format('run %s is %s', r.short_id, r.state));
  END IF;
  IF r.lease_owner IS DISTINCT FROM p_worker OR r.lease_until < now() THEN
    PERFORM mycelium.refuse(409, 'lease_lost',
      format('run %s is held by %s, not by %s', r.short_id, coalesce(r.lease_owner, 'nobody'), p_worker),
      jsonb_build_object('owner', r.lease_owner));
  END IF;
  IF r.seq <> p_seq THEN
    PERFORM mycelium.refuse(409, 'step_moved',
      format('run %s is at seq %s, not %s: read it again', r.short_id, r.seq, p_seq),
      jsonb_build_object('seq', r.seq));
  END IF;
  IF jsonb_typeof(p_trace) IN ('array', 'object') THEN  -- the steps taken, turns old_turn + 1, …
    INSERT INTO mycelium.engine_trace (room, run_id, turn, step, entry, worker)
    SELECT p_room, r.id, old_turn + t.n, coalesce(t.e ->> 'step', r.step, ''),
           t.e || jsonb_build_object('turn', old_turn + t.n), p_worker
    FROM jsonb_array_elements(CASE jsonb_typeof(p_trace) WHEN 'array' THEN p_trace
                                   ELSE jsonb_build_array(p_trace) END) WITH ORDINALITY AS t (e, n);
    GET DIAGNOSTICS taken = ROW_COUNT;
    r.turn := old_turn + taken;
  END IF;
  SELECT coalesce(max(seq), 0) INTO next_seq FROM mycelium.engine_posts WHERE room = p_room AND run_id = r.id;
  UPDATE mycelium.engine_runs SET
    seq = r.seq + 1, turn = r.turn, step = p_step,
    asked_position = CASE WHEN p_step IS DISTINCT FROM old_step OR r.turn <> old_turn THEN NULL
                          ELSE r.asked_position END,  -- the question's, when one is posted below
    waiting = coalesce(p_waiting, '{}'),
    deadline = CASE WHEN p_wait_seconds IS NULL THEN NULL ELSE now() + make_interval(secs => p_wait_seconds) END,
    pending = coalesce(p_pending, '{}'),
    state = coalesce(p_close, 'open'), reason = coalesce(p_reason, reason),
    outcome_text = coalesce(p_outcome_text, outcome_text), metrics = coalesce(p_metrics, metrics),
    assignments = CASE WHEN p_close = 'converged' THEN p_assignments END,
    closed_at = CASE WHEN p_close IS NOT NULL THEN now() END,
    lease_owner = CASE WHEN p_close IS NOT NULL THEN NULL ELSE lease_owner END,
    lease_until = CASE WHEN p_close IS NOT NULL THEN NULL ELSE lease_until END,
    updated_at = now()
  WHERE room = p_room AND id = r.id
  RETURNING * INTO r;
  IF p_close IS NOT NULL AND mycelium.run_leaves_episode(r.kind, r.pending) THEN
    written := mycelium.write_memory(p_room, 'log/episodes/' || r.short_id,
      jsonb_build_object('text', mycelium.run_record(p_room, r.id)), r.engine, NULL,
      jsonb_build_object('outcome', r.state, 'within', r.episode, 'flow', r.protocol));
  END IF;
  IF p_close IS NULL AND p_speakers IS NOT NULL THEN
    PERFORM mycelium.hold_floor(p_room, r.episode, r.engine, p_speakers, r.engine);
  ELSIF p_close IS NOT NULL THEN
    PERFORM mycelium.release_floor(p_room, r.episode, r.engine);
    IF r.kind = 'aligner' THEN  -- a negotiation's roster was frozen for it (negotiations.sql)
      PERFORM mycelium.thaw_roster(p_room, r.episode);
    END IF;
  END IF;
  FOR p IN SELECT * FROM jsonb_array_elements(coalesce(p_posts, '[]')) LOOP
    posted := mycelium.post_message(
      p_room, r.engine, p ->> 'content', r.episode,
      coalesce(ARRAY(SELECT jsonb_array_elements_text(p -> 'recipients')), '{}'),
      coalesce(p ->> 'kind', 'exchange'), p ->> 'subkind', coalesce(p ->> 'payload_type', 'message'),
      coalesce(p -> 'payload', '{}'), '{}', 'coordinator');
    next_seq := next_seq + 1;
    INSERT INTO mycelium.engine_posts (room, run_id, seq, message_id, event, turn, worker)
    VALUES (p_room, r.id, next_seq, posted.id, coalesce(p ->> 'event', 'turn'), r.turn, p_worker);
    IF p ->> 'event' = 'turn' THEN
      asked := posted.position;
    END IF;
  END LOOP;
  IF asked IS NOT NULL THEN
    UPDATE mycelium.engine_runs SET asked_position = asked WHERE room = p_room AND id = r.id;
    r.asked_position := asked;
  END IF;
  IF jsonb_typeof(p_memory) IS DISTINCT FROM 'array' AND jsonb_typeof(p_memory) IS DISTINCT FROM 'object' THEN
    RETURN r;  -- nothing to write (most steps)
  END IF;
  FOR p IN SELECT * FROM jsonb_array_elements(CASE jsonb_typeof(p_memory) WHEN 'array' THEN p_memory
                                                  ELSE jsonb_build_array(p_memory) END) LOOP
    IF p ? 'task' THEN  -- a child task, filed through the board's verb, part of the run's row
      written := mycelium.create_task(p_room, p #>> '{task,title}', r.engine, NULL, p #>> '{task,assignee}',
                                      coalesce(p #>> '{task,parent}', r.task_key));
    ELSE
      written := mycelium.write_memory(p_room, p ->> 'key', jsonb_build_object('text', p ->> 'text'),
                                       r.engine, NULL, p -> 'meta');
    END IF;
  END LOOP;
  RETURN r;
END
$$;

-- The replies a run's current question got: the first message of each member it waits for, in the
-- run's thread after the question (amendments folded), oldest first.
CREATE OR REPLACE FUNCTION mycelium.run_replies(p_room text, p_run bigint)
RETURNS TABLE (sender text, id uuid, "position" bigint, text text, payload jsonb, created_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (mycelium.normalize_handle(t.sender))
         mycelium.normalize_handle(t.sender), t.id, t.position, t.text, t.payload, t.created_at
  FROM mycelium.engine_runs r
  JOIN mycelium.timeline t ON t.room = r.room AND t.episode = r.episode AND t.position > r.asked_position
  WHERE r.room = p_room AND r.id = p_run AND r.asked_position IS NOT NULL
    AND t.kind = 'exchange' AND t.payload_type IN ('message', 'reply')
    AND mycelium.normalize_handle(t.sender) = ANY (r.waiting)
  ORDER BY mycelium.normalize_handle(t.sender), t.position
$$;

-- ---------------------------------------------------------------------------------------------
-- Episodes: a run as upstream's record shows it.

-- Whether a run leaves an episode (its record, log/episodes/<short_id>, and its line in
-- mycelium.episodes): every run does but a negotiation that found nothing to negotiate (its issues
-- recorded as none: sql/negotiations.sql), which ends with its explanation in the thread and no
-- episode. (Of the run's own columns, so the view's filter is planned inline.)
CREATE OR REPLACE FUNCTION mycelium.run_leaves_episode(p_kind text, p_pending jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN NOT coalesce(p_kind = 'aligner' AND p_pending ? 'issues' AND jsonb_typeof(p_pending -> 'issues') = 'null',
                    false);

CREATE OR REPLACE VIEW mycelium.episodes AS
SELECT r.room, r.id AS run_id, r.short_id,
       mycelium.episode_urn(r.room, r.short_id) AS episode,
       'urn:concept:mycelium:' || r.room AS topic,
       CASE WHEN r.state = 'failed' THEN 'rejected' ELSE r.state END AS outcome,
       CASE WHEN r.state IN ('resolved', 'rejected', 'converged') THEN r.state END AS subkind,
       r.engine, r.protocol, r.flow, r.episode AS within, r.task_key, r.step AS current_step, r.turn,
       r.reason, r.outcome_text, r.metrics, r.pending, r.created_at, r.updated_at, r.closed_at,
       mycelium.episode_quality(r.pending -> 'first_confidence', r.pending -> 'last_confidence', r.flow -> 'cast')
         AS quality,
       coalesce((SELECT jsonb_agg(t.entry ORDER BY t.turn) FROM mycelium.engine_trace t
                 WHERE t.room = r.room AND t.run_id = r.id), '[]') AS trace,
       (SELECT count(*) FROM mycelium.engine_posts p WHERE p.room = r.room AND p.run_id = r.id) AS post_count
FROM mycelium.engine_runs r
WHERE mycelium.run_leaves_episode(r.kind, r.pending);

-- ---------------------------------------------------------------------------------------------
-- Summoning by name: `board coordinate <row> <engine> "…"` and `engine invoke <engine> "…"` post a
-- message that @-mentions the engine (the summon is then recorded by the insert, as for any mention).

CREATE OR REPLACE FUNCTION mycelium.require_engine(p_room text, p_engine text) RETURNS mycelium.engines
LANGUAGE plpgsql STABLE AS $$
DECLARE e mycelium.engines;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT * INTO e FROM mycelium.engines WHERE room = p_room AND handle = mycelium.normalize_handle(p_engine);
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'engine_not_found',
      format('No engine @%s in room %L (mycelium engine create %s --kind conductor)',
             mycelium.normalize_handle(p_engine), p_room, mycelium.normalize_handle(p_engine)),
      jsonb_build_object('room', p_room, 'engine', p_engine));
  END IF;
  RETURN e;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.invoke_engine(
  p_room text, p_engine text, p_text text, p_episode text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS mycelium.messages LANGUAGE plpgsql AS $$
DECLARE e mycelium.engines := mycelium.require_engine(p_room, p_engine);
BEGIN
  RETURN mycelium.post_message(p_room, p_by, format('@%s %s', e.handle, coalesce(p_text, '')), p_episode);
END
$$;

CREATE OR REPLACE FUNCTION mycelium.coordinate(
  p_room text, p_key text, p_engine text, p_text text, p_by text DEFAULT NULL
) RETURNS mycelium.messages LANGUAGE plpgsql AS $$
DECLARE
  e mycelium.engines := mycelium.require_engine(p_room, p_engine);
  ep text;
BEGIN
  SELECT episode INTO ep FROM mycelium.memories WHERE room = p_room AND key = p_key;
  IF ep IS NULL THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('No row %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  IF NOT mycelium.is_board_key(p_key) THEN
    PERFORM mycelium.refuse(422, 'not_a_board_row', format('%L is not a board row (work/, decisions/, …)', p_key),
                            jsonb_build_object('key', p_key));
  END IF;
  RETURN mycelium.post_message(p_room, p_by, format('@%s %s', e.handle, coalesce(p_text, '')), ep);
END
$$;

-- ---------------------------------------------------------------------------------------------
-- A room's flows: a protocols/<name> memory holds a flow (mycelium.engines.flows has the model) as
-- its JSON text (which YAML reads as it is) or as its structured value. One that does not validate
-- is refused at write time (422 invalid_flow, listing every problem), whoever writes it.

-- The step vocabulary, contracts/vocabulary.json's flow (mycelium.engines.flows reads the same file):
-- the groups a step may address, the ends, the step kinds and the edges each kind branches on, what
-- a step may collect and require.
CREATE OR REPLACE FUNCTION mycelium.flow_vocabulary() RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT {{contract vocabulary.json flow}}::jsonb
$$;

CREATE OR REPLACE FUNCTION mycelium.flow_problems(p_spec jsonb, p_name text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  problems text[] := '{}';
  roles text[] := '{}';
  vocab jsonb := mycelium.flow_vocabulary();
  groups text[] := ARRAY(SELECT jsonb_array_elements_text(vocab -> 'groups'));
  kinds text[] := ARRAY(SELECT jsonb_array_elements_text(vocab -> 'kinds'));
  collects text[] := ARRAY(SELECT jsonb_array_elements_text(vocab -> 'collect'));
  requires text[] := ARRAY(SELECT jsonb_array_elements_text(vocab -> 'require'));
  word text := '^[a-z][a-z0-9_-]{0,31}$';
  st jsonb;
  nxt jsonb;
  i integer := 0;
  ids text[] := '{}';
  targets text[] := '{}';
  ends integer := 0;
  first_end boolean;
  place text;
  k text;
  step_kind text;
  allowed text[];
BEGIN
  IF p_spec IS NULL OR jsonb_typeof(p_spec) <> 'object' THEN
    RETURN ARRAY['a flow is a mapping with name, roles and steps'];
  END IF;
  FOR k IN SELECT jsonb_object_keys(p_spec) LOOP
    IF k NOT IN ('name', 'description', 'roles', 'steps', 'max_steps') THEN
      problems := problems || format('unknown field %L', k);
    END IF;
  END LOOP;
  IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9-]{0,39}$' THEN
    problems := problems || format('a flow''s name is a lowercase word (got %L)', p_name);
  END IF;
  IF nullif(p_spec -> 'roles', 'null') IS NOT NULL THEN
    IF jsonb_typeof(p_spec -> 'roles') <> 'array'
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_spec -> 'roles') e WHERE jsonb_typeof(e) <> 'string') THEN
      problems := problems || 'roles is a list of names'::text;
    ELSE
      roles := ARRAY(SELECT jsonb_array_elements_text(p_spec -> 'roles'));
    END IF;
  END IF;
  IF cardinality(roles) <> (SELECT count(DISTINCT r) FROM unnest(roles) r) THEN
    problems := problems || 'roles are distinct'::text;
  END IF;
  problems := problems || ARRAY(SELECT format('role %L is not a lowercase word', r) FROM unnest(roles) r WHERE r !~ word);
  problems := problems || ARRAY(SELECT format('role %L is the name of a group', r) FROM unnest(roles) r
                                WHERE r = ANY (groups));
  IF nullif(p_spec -> 'max_steps', 'null') IS NOT NULL AND NOT (jsonb_typeof(p_spec -> 'max_steps') = 'number'
       AND (p_spec ->> 'max_steps') ~ '^\d+$' AND (p_spec ->> 'max_steps')::numeric BETWEEN 1 AND 200) THEN
    problems := problems || 'max_steps is a whole number from 1 to 200'::text;
  END IF;
  IF jsonb_typeof(p_spec -> 'steps') IS DISTINCT FROM 'array' OR jsonb_array_length(p_spec -> 'steps') = 0 THEN
    RETURN problems || 'a flow has at least one step'::text;
  END IF;
  FOR st IN SELECT * FROM jsonb_array_elements(p_spec -> 'steps') LOOP
    i := i + 1;
    IF jsonb_typeof(st) <> 'object' THEN
      problems := problems || format('step %s is a mapping', i);
      CONTINUE;
    END IF;
    place := format('step %s (%s)', i, coalesce(st ->> 'id', '?'));
    FOR k IN SELECT jsonb_object_keys(st) LOOP
      IF k NOT IN ('id', 'to', 'prompt', 'wait', 'rounds', 'next', 'end', 'kind', 'collect', 'require', 'max_repairs',
                   'of', 'max_rounds') THEN
        problems := problems || format('%s: unknown field %L', place, k);
      END IF;
    END LOOP;
    IF jsonb_typeof(st -> 'id') IS DISTINCT FROM 'string' OR (st ->> 'id') !~ word THEN
      problems := problems || format('%s: an id is a lowercase word', place);
    ELSE
      ids := ids || (st ->> 'id');
    END IF;
    IF nullif(st -> 'end', 'null') IS NOT NULL THEN
      ends := ends + 1;
      first_end := coalesce(first_end, i = 1);
      IF NOT ((st ->> 'end') = ANY (ARRAY(SELECT jsonb_array_elements_text(vocab -> 'ends')))) THEN
        problems := problems || format('%s: end is one of resolved, rejected, converged, not %L', place, st ->> 'end');
      END IF;
      IF nullif(st -> 'to', 'null') IS NOT NULL OR nullif(st -> 'next', 'null') IS NOT NULL THEN
        problems := problems || format('%s: an end step neither addresses anyone nor continues', place);
      END IF;
      CONTINUE;
    END IF;
    step_kind := coalesce(st ->> 'kind', 'ask');
    IF NOT (step_kind = ANY (kinds)) THEN
      problems := problems || format('%s: kind is one of %s, not %L', place, array_to_string(kinds, ', '), step_kind);
    END IF;
    IF step_kind = 'ask' AND NOT (jsonb_typeof(st -> 'to') = 'string'
                                  AND ((st ->> 'to') = ANY (roles) OR (st ->> 'to') = ANY (groups))) THEN
      problems := problems || format('%s: to is a role (%s) or one of %s, not %L', place,
                                     coalesce(nullif(array_to_string(roles, ', '), ''), 'none declared'),
                                     array_to_string(groups, ', '), st ->> 'to');
    END IF;
    IF step_kind <> 'ask' AND step_kind = ANY (kinds)
       AND (nullif(st -> 'to', 'null') IS NOT NULL OR nullif(st -> 'prompt', 'null') IS NOT NULL
            OR nullif(st -> 'collect', 'null') IS NOT NULL OR nullif(st -> 'require', 'null') IS NOT NULL) THEN
      problems := problems || format('%s: a %s step asks nobody: it takes no to, prompt, collect or require',
                                     place, step_kind);
    END IF;
    IF step_kind = 'tally' AND coalesce(st ->> 'of', '') NOT IN ('points', 'terms') THEN
      problems := problems || format('%s: a tally step reads of: points or of: terms', place);
    END IF;
    IF step_kind <> 'tally' AND (nullif(st -> 'of', 'null') IS NOT NULL OR nullif(st -> 'max_rounds', 'null') IS NOT NULL) THEN
      problems := problems || format('%s: of and max_rounds belong to a tally step', place);
    END IF;
    IF nullif(st -> 'max_rounds', 'null') IS NOT NULL AND NOT (jsonb_typeof(st -> 'max_rounds') = 'number'
         AND (st ->> 'max_rounds') ~ '^\d+$' AND (st ->> 'max_rounds')::numeric >= 1) THEN
      problems := problems || format('%s: max_rounds is a whole number, 1 or more', place);
    END IF;
    nxt := nullif(st -> 'next', 'null');
    allowed := ARRAY(SELECT jsonb_array_elements_text(vocab #> ARRAY['edges', CASE step_kind
                     WHEN 'tally' THEN 'tally:' || coalesce(st ->> 'of', '') WHEN 'ask' THEN 'ask'
                     ELSE step_kind END]));
    IF nxt IS NULL THEN
      problems := problems || format('%s: a step that does not end needs next', place);
    ELSIF jsonb_typeof(nxt) = 'object' THEN
      IF nxt = '{}' OR EXISTS (SELECT 1 FROM jsonb_object_keys(nxt) b WHERE NOT (b = ANY (allowed))) THEN
        problems := problems || format('%s: next branches on %s only', place, array_to_string(allowed, ', '));
      END IF;
      targets := targets || ARRAY(SELECT v FROM jsonb_each_text(nxt) AS e (b, v));
    ELSIF step_kind <> 'ask' AND step_kind = ANY (kinds) THEN
      problems := problems || format('%s: a %s step branches on %s', place, step_kind,
                                     coalesce(nullif(array_to_string(allowed, ', '), ''), 'its edges'));
    ELSIF jsonb_typeof(nxt) = 'string' THEN
      targets := targets || (nxt #>> '{}');
    ELSE
      problems := problems || format('%s: next is a step id or a map of branches', place);
    END IF;
    IF coalesce(st ->> 'wait', 'reply') NOT IN ('reply', 'none') THEN
      problems := problems || format('%s: wait is reply or none', place);
    END IF;
    IF nullif(st -> 'rounds', 'null') IS NOT NULL AND NOT (jsonb_typeof(st -> 'rounds') = 'number'
         AND (st ->> 'rounds') ~ '^\d+$' AND (st ->> 'rounds')::numeric >= 1) THEN
      problems := problems || format('%s: rounds is a whole number, 1 or more', place);
    END IF;
    IF nullif(st -> 'collect', 'null') IS NOT NULL AND NOT (coalesce(st ->> 'collect', '') = ANY (collects)) THEN
      problems := problems || format('%s: collect is one of %s', place, array_to_string(collects, ', '));
    END IF;
    IF nullif(st -> 'require', 'null') IS NOT NULL AND NOT (coalesce(st ->> 'require', '') = ANY (requires)) THEN
      problems := problems || format('%s: require is one of %s', place, array_to_string(requires, ', '));
    ELSIF (st ->> 'require') IN ('pieces', 'tasks') AND (st ->> 'require') IS DISTINCT FROM (st ->> 'collect') THEN
      problems := problems || format('%s: a step that requires %s collects them', place, st ->> 'require');
    END IF;
    IF nullif(st -> 'prompt', 'null') IS NOT NULL AND jsonb_typeof(st -> 'prompt') <> 'string' THEN
      problems := problems || format('%s: prompt is text', place);
    END IF;
  END LOOP;
  problems := problems || ARRAY(SELECT format('step id %L is used twice', d) FROM unnest(ids) d GROUP BY d
                                HAVING count(*) > 1 ORDER BY d);
  problems := problems || ARRAY(SELECT DISTINCT format('next names no step %L', t) FROM unnest(targets) t
                                WHERE NOT (t = ANY (ids)));
  IF ends = 0 THEN
    problems := problems || 'a flow has at least one end step'::text;
  ELSIF first_end THEN
    problems := problems || 'the first step does something before the flow ends'::text;
  END IF;
  RETURN problems;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.memories_protocol_valid() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  spec jsonb;
  problems text[];
BEGIN
  IF NEW.key NOT LIKE 'protocols/%' THEN
    RETURN NEW;
  END IF;
  IF NEW.value ? 'steps' THEN
    spec := NEW.value;
  ELSE
    BEGIN
      spec := (NEW.value ->> 'text')::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
      spec := NULL;
    END;
  END IF;
  IF spec IS NULL THEN
    problems := ARRAY['a flow is written as JSON (YAML reads it as it is): `mycelium engine flows` and the '
                      'conductor''s `show <flow>` print one to start from'];
  ELSE
    problems := mycelium.flow_problems(spec, substr(NEW.key, 11));
  END IF;
  IF cardinality(problems) > 0 THEN
    PERFORM mycelium.refuse(422, 'invalid_flow',
      format('%s is not a flow: %s', NEW.key, array_to_string(problems, '; ')),
      jsonb_build_object('key', NEW.key, 'problems', to_jsonb(problems)));
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER memories_protocol_valid BEFORE INSERT OR UPDATE OF value ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_protocol_valid();
