-- Engines: room citizens played by the hub's workers (a conductor walking flows, a persona played by
-- a model, an aligner brokering a negotiation, a synthesizer distilling a room), and the summons that
-- wake them. Their runs are in runs.sql, the flows a conductor walks in flows.sql.
--
--   * engines: one row per (room, handle), with its kind; create_engine also writes the upstream
--     manifest memory agents/<handle> (frontmatter adapter: engine, kind), in the same transaction.
--     Only the engine itself (an actor declared as that engine) may write as its handle (403).
--   * engine_summons: an @-mention of a registered engine in a message (or, for a persona, a message
--     whose recipients name it) is recorded by a trigger on the insert of that message, so a summon
--     exists iff its message committed: never lost, never fired twice (unique per message and
--     engine). Engines' own text never summons (a conductor's turn addressed to a persona does).
--   * persona_turns: what a persona said and heard, per (room, handle), so it remembers across
--     turns and across workers.

-- What an engine may be: contracts/vocabulary.json's engine_kinds (the Python side reads the same
-- file); the engines table's CHECK names it, so a new kind is a change to the contract alone.
CREATE OR REPLACE FUNCTION mycelium.engine_kinds() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT array_agg(k ORDER BY n) FROM jsonb_array_elements_text({{contract vocabulary.json engine_kinds}}::jsonb)
    WITH ORDINALITY AS v (k, n)
$$;
COMMENT ON FUNCTION mycelium.engine_kinds IS 'public read';

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
  how text NOT NULL CONSTRAINT summon_how CHECK (how IN ('mention', 'addressed', 'filed', 'completed')),
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
  row_key text,
  PRIMARY KEY (room, id),
  CONSTRAINT one_summon_per_message UNIQUE (room, message_id, engine)
);
CREATE INDEX engine_summons_pending ON mycelium.engine_summons (id) WHERE state = 'pending';
-- a parent whose parts are all settled is given to its combiner once (worker_engine.sql)
CREATE UNIQUE INDEX engine_summons_one_completion ON mycelium.engine_summons (room, row_key)
  WHERE how = 'completed';

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
-- extends the rule to every engine a room registers). t60: after the thread gate (t55) and before
-- t65_messages_before_insert takes the room's position.
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
CREATE OR REPLACE TRIGGER t60_messages_admit_engine BEFORE INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_admit_engine();

-- Record the summons a message makes, in its own transaction. A text @-mention of a registered
-- engine summons it (unless an engine wrote the text); a persona or a worker is also summoned by a
-- message addressed to it (its recipients), as a conductor's turn is; a board notice may summon a
-- worker (summon_workers_by_notice). The engine workers wait on
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
  IF NEW.kind = 'exchange' AND NEW.payload_type = 'notice' THEN
    PERFORM mycelium.summon_workers_by_notice(NEW.room, NEW.id, NEW.position, NEW.payload);  -- worker_engine.sql
    RETURN NULL;
  END IF;
  IF NEW.kind <> 'exchange' OR coalesce(NEW.subkind, '') = 'amend'
     OR NEW.payload_type IN ('ping', 'presence', 'keepalive') THEN
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
    -- a worker named in a conductor's directive ("@conductor swarm @ann @bob: …") is its cast:
    -- the run addresses it in turn, the directive itself is no turn of the worker's
    AND NOT (e.kind = 'worker' AND e.handle <> ALL (NEW.recipients) AND EXISTS (
      SELECT 1 FROM mycelium.engines c WHERE c.room = NEW.room AND c.kind = 'conductor' AND c.handle = ANY (NEW.mentions)))
    AND ((e.handle = ANY (NEW.mentions) AND NOT from_engine)
         OR (e.kind IN ('persona', 'worker') AND e.handle = ANY (NEW.recipients)))
  ON CONFLICT DO NOTHING;
  IF FOUND THEN
    hinted := mycelium.wake_hint('mycelium_engines', NEW.room);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t85_messages_summon_engines AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_summon_engines();

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
COMMENT ON FUNCTION mycelium.create_engine IS 'public write';

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
COMMENT ON FUNCTION mycelium.claim_engine_summons IS 'public write';

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
COMMENT ON FUNCTION mycelium.summon_failed IS 'public write';

-- Keep the summons p_worker is still answering (p_ids) for another p_lease_seconds: a turn that
-- takes longer than a lease (a worker's agent command, a slow model) is not taken by another worker
-- while its own is alive. Returns the ids still held (one missing was taken over or closed).
CREATE OR REPLACE FUNCTION mycelium.renew_engine_summons(p_worker text, p_ids bigint[], p_lease_seconds double precision)
RETURNS SETOF bigint LANGUAGE sql AS $$
  UPDATE mycelium.engine_summons s SET taken_until = now() + make_interval(secs => p_lease_seconds)
  WHERE s.id = ANY (p_ids) AND s.state = 'pending' AND s.taken_by = p_worker
  RETURNING s.id
$$;
COMMENT ON FUNCTION mycelium.renew_engine_summons IS 'public write';

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
COMMENT ON FUNCTION mycelium.answer_summon IS 'public write';

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
COMMENT ON FUNCTION mycelium.invoke_engine IS 'public write';

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
COMMENT ON FUNCTION mycelium.coordinate IS 'public write';
