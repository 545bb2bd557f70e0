-- Runs: every engine run as a durable episode (the engines that run them are in engines.sql).
--
--   * engine_runs: one run per thread at a time (a unique index on the open runs); a run is worked
--     by whichever worker holds its lease (claimed with FOR UPDATE SKIP LOCKED, renewed by its
--     worker, taken over by another after it expires). The run row says which step is current and
--     whether its question was posted; engine_step() is the one transaction that closes a step
--     (its trace entry), posts the next question and moves the floor, compared-and-swapped on the
--     run's seq: a worker that lost its lease, or computed from a stale state, changes nothing.
--   * engine_trace: one row per step taken (turn 1, 2, …: no gaps, no repeats), append-only.
--   * engine_posts: every message a run posted, in order (the run's slice of the thread).

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

-- ---------------------------------------------------------------------------------------------
-- The trace is append-only.

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
CREATE OR REPLACE TRIGGER t10_engine_trace_append_only BEFORE UPDATE OR DELETE ON mycelium.engine_trace
  FOR EACH ROW EXECUTE FUNCTION mycelium.engine_trace_append_only();

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
COMMENT ON FUNCTION mycelium.start_engine_run IS 'public write';

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
COMMENT ON FUNCTION mycelium.claim_engine_runs IS 'public write';

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
COMMENT ON FUNCTION mycelium.renew_engine_runs IS 'public write';

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
COMMENT ON FUNCTION mycelium.release_engine_runs IS 'public write';

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
COMMENT ON FUNCTION mycelium.episode_quality IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.compiled_work IS 'public read';

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
COMMENT ON FUNCTION mycelium.episode_record IS 'public read';

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
COMMENT ON FUNCTION mycelium.engine_step IS 'public write';

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
COMMENT ON FUNCTION mycelium.run_replies IS 'public read';

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
COMMENT ON FUNCTION mycelium.run_leaves_episode IS 'public inlined';

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
