-- The task compiler: an agreement a run converged on becomes rows on the board.
--
--   * compile_jobs: one job per run that closed 'converged' with an agreement (assignments, a
--     non-empty {issue: value} object), enqueued by a trigger on engine_runs in the transaction that
--     closes the run, so a job exists iff the agreement committed; never two for one run (the key).
--     Workers take jobs with FOR UPDATE SKIP LOCKED and a lease; a job whose worker stopped is
--     taken again when its lease runs out (five attempts at most, then it waits for a person).
--   * compiled_tasks: the rows a job filed, one per task line, in line order. A job is filed in
--     one transaction (file_compiled_tasks): every row through the board's own create_task (so
--     each raises its `filed` notice), the lines recorded, the job closed, the thread told and the
--     episode's record rewritten with its work: line. A second filing of the job is refused (it is
--     done, or held by another worker), so compiling twice files nothing twice.
--   * A compile never writes the parent task's status or lease: its rows are new rows, `part-of`
--     the run's task when that row still exists, loose when it is gone.

CREATE TABLE mycelium.compile_jobs (
  room text NOT NULL,
  run_id bigint NOT NULL,
  state text NOT NULL DEFAULT 'pending' CONSTRAINT compile_state CHECK (state IN ('pending', 'done')),
  taken_by text,
  taken_until timestamptz,
  attempts integer NOT NULL DEFAULT 0,
  source text CONSTRAINT compile_source CHECK (source IN ('model', 'raw')),
  note text,
  created_at timestamptz NOT NULL DEFAULT now(),
  done_at timestamptz,
  PRIMARY KEY (room, run_id),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.engine_runs (room, id) ON DELETE CASCADE,
  CONSTRAINT compile_done_has_source CHECK (state = 'pending' OR source IS NOT NULL)
);
CREATE INDEX compile_jobs_pending ON mycelium.compile_jobs (created_at) WHERE state = 'pending';
COMMENT ON TABLE mycelium.compile_jobs IS
  'One job per converged run with an agreement: its task lines filed as work/ rows once.';

CREATE TABLE mycelium.compiled_tasks (
  room text NOT NULL,
  run_id bigint NOT NULL,
  line integer NOT NULL CONSTRAINT compiled_line_positive CHECK (line >= 1),
  key text NOT NULL,
  text text NOT NULL,
  assignee text,
  parent text,
  filed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, run_id, line),
  CONSTRAINT one_compiled_line_per_row UNIQUE (room, key),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.compile_jobs (room, run_id) ON DELETE CASCADE
);
COMMENT ON TABLE mycelium.compiled_tasks IS
  'The work/ rows a compile job filed, one per task line (parent NULL: filed loose).';

-- ---------------------------------------------------------------------------------------------
-- Enqueueing: in the transaction that closes a run converged with an agreement (or inserts one so).

CREATE OR REPLACE FUNCTION mycelium.engine_runs_enqueue_compile() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE hinted text;
BEGIN
  INSERT INTO mycelium.compile_jobs (room, run_id) VALUES (NEW.room, NEW.id) ON CONFLICT DO NOTHING;
  IF FOUND THEN
    hinted := mycelium.wake_hint('mycelium_compile', NEW.room);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t75_engine_runs_compile_inserted AFTER INSERT ON mycelium.engine_runs
  FOR EACH ROW WHEN (NEW.state = 'converged' AND NEW.assignments IS NOT NULL AND NEW.assignments <> '{}')
  EXECUTE FUNCTION mycelium.engine_runs_enqueue_compile();
CREATE OR REPLACE TRIGGER t70_engine_runs_compile_converged AFTER UPDATE OF state, assignments ON mycelium.engine_runs
  FOR EACH ROW WHEN (NEW.state = 'converged' AND NEW.assignments IS NOT NULL AND NEW.assignments <> '{}'
                     AND (OLD.state IS DISTINCT FROM 'converged' OR OLD.assignments IS NULL
                          OR OLD.assignments = '{}'))
  EXECUTE FUNCTION mycelium.engine_runs_enqueue_compile();

-- ---------------------------------------------------------------------------------------------
-- Workers.

-- Take up to p_limit pending jobs for p_worker, for p_lease_seconds (a job whose lease ran out is
-- taken again; five attempts at most).
CREATE OR REPLACE FUNCTION mycelium.claim_compile_jobs(
  p_worker text, p_limit integer, p_lease_seconds double precision
) RETURNS SETOF mycelium.compile_jobs LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY
  UPDATE mycelium.compile_jobs j
  SET taken_by = p_worker, taken_until = now() + make_interval(secs => p_lease_seconds),
      attempts = j.attempts + 1
  FROM (SELECT x.room, x.run_id FROM mycelium.compile_jobs x
        WHERE x.state = 'pending' AND (x.taken_until IS NULL OR x.taken_until < now()) AND x.attempts < 5
        ORDER BY x.created_at, x.run_id LIMIT p_limit FOR UPDATE SKIP LOCKED) pick
  WHERE j.room = pick.room AND j.run_id = pick.run_id
  RETURNING j.*;
END
$$;
COMMENT ON FUNCTION mycelium.claim_compile_jobs IS 'public write';

-- Give back p_worker's jobs (it stops): another worker may take them at once.
CREATE OR REPLACE FUNCTION mycelium.release_compile_jobs(p_worker text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  UPDATE mycelium.compile_jobs SET taken_until = NULL WHERE taken_by = p_worker AND state = 'pending';
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;
COMMENT ON FUNCTION mycelium.release_compile_jobs IS 'public write';

-- File a job's task lines (p_lines: [{text, assignee?}], in order) as work/ rows, as the run's
-- engine, in one transaction (the rows, the job closed, a word in the thread, the record); p_source
-- says whether the model wrote them ('model') or they are the agreement as it is ('raw', with
-- p_note saying why). Refused: 409 compile_not_held when the job is
-- done or another worker holds it (nothing is filed twice), 403 when the caller is not the engine,
-- 422 without lines.
CREATE OR REPLACE FUNCTION mycelium.file_compiled_tasks(
  p_room text, p_run bigint, p_worker text, p_lines jsonb, p_source text, p_note text DEFAULT NULL
) RETURNS mycelium.compile_jobs LANGUAGE plpgsql AS $$
DECLARE
  j mycelium.compile_jobs;
  r mycelium.engine_runs;
  parent text;
  task_title text;
  l jsonb;
  n integer := 0;
  filed mycelium.memories;
  listed text[] := '{}';
  keys text[] := '{}';
  said text;
  written mycelium.memories;
BEGIN
  SELECT * INTO j FROM mycelium.compile_jobs WHERE room = p_room AND run_id = p_run FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'compile_not_found', format('no compile job for run %s in room %L', p_run, p_room));
  END IF;
  IF j.state <> 'pending' OR j.taken_by IS DISTINCT FROM p_worker THEN
    PERFORM mycelium.refuse(409, 'compile_not_held',
      format('the compile job of run %s is %s, held by %s, not by %s', p_run, j.state,
             coalesce(j.taken_by, 'nobody'), p_worker),
      jsonb_build_object('state', j.state, 'taken_by', j.taken_by));
  END IF;
  SELECT * INTO r FROM mycelium.engine_runs WHERE room = p_room AND id = p_run;
  IF NOT mycelium.acting_as_engine(r.engine) THEN
    PERFORM mycelium.refuse(403, 'not_the_engine', format('only @%s files the rows of its runs', r.engine));
  END IF;
  IF p_source IS NULL OR p_source NOT IN ('model', 'raw') THEN
    PERFORM mycelium.refuse(422, 'invalid_source', 'the lines come from the model or are the raw agreement',
                            jsonb_build_object('source', p_source));
  END IF;
  IF jsonb_typeof(p_lines) IS DISTINCT FROM 'array' OR jsonb_array_length(p_lines) = 0
     OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_lines) e
                WHERE jsonb_typeof(e) <> 'object' OR nullif(btrim(e ->> 'text'), '') IS NULL) THEN
    PERFORM mycelium.refuse(422, 'no_task_lines', 'a compile files at least one line, each with its text');
  END IF;
  SELECT m.key, mycelium.memory_title(m.value, m.meta) INTO parent, task_title
  FROM mycelium.memories m WHERE m.room = p_room AND m.key = r.task_key;
  FOR l IN SELECT * FROM jsonb_array_elements(p_lines) LOOP
    n := n + 1;
    filed := mycelium.create_task(p_room, btrim(l ->> 'text'), r.engine, NULL, nullif(btrim(l ->> 'assignee'), ''),
                                  parent);
    INSERT INTO mycelium.compiled_tasks (room, run_id, line, key, text, assignee, parent)
    VALUES (p_room, p_run, n, filed.key, btrim(l ->> 'text'), filed.meta ->> 'assignee', parent);
    keys := keys || filed.key;
    listed := listed || (filed.key || coalesce(' for ' || (filed.meta ->> 'assignee'), ''));
  END LOOP;
  UPDATE mycelium.compile_jobs SET state = 'done', source = p_source, note = p_note, done_at = now(),
                                   taken_until = NULL
  WHERE room = p_room AND run_id = p_run
  RETURNING * INTO j;
  said := format('Filed %s task%s from the agreement%s: %s.', n, CASE WHEN n = 1 THEN '' ELSE 's' END,
                 CASE WHEN parent IS NOT NULL THEN format(', part of %s', parent)
                      ELSE format(' (the task %s is gone: the rows are loose)', coalesce(r.task_key, 'of this thread')) END,
                 array_to_string(listed, ', '))
          || CASE WHEN p_source = 'raw'
                  THEN format(' The model did not compile the agreement (%s), so each agreed term is a row as it was agreed.',
                              coalesce(p_note, 'no reason given'))
                  ELSE '' END;
  BEGIN  -- in the task's thread; in the room's channel when the task (and so its thread) is gone
    PERFORM mycelium.post_message(p_room, r.engine, said, CASE WHEN parent IS NOT NULL THEN r.episode END, '{}',
      'exchange', NULL, 'message',
      jsonb_build_object('compiled', jsonb_build_object('run', r.short_id, 'source', p_source, 'note', p_note,
                                                        'tasks', to_jsonb(keys), 'parent', parent)),
      '{}', 'coordinator');
  EXCEPTION WHEN SQLSTATE 'MY409' OR SQLSTATE 'MY403' THEN
    NULL;  -- the thread's floor or roster admits nobody else now: the record and the notices still say it
  END;
  written := mycelium.write_memory(p_room, 'log/episodes/' || r.short_id,
    jsonb_build_object('text', mycelium.run_record(p_room, r.id)), r.engine, NULL,
    jsonb_build_object('outcome', r.state, 'within', r.episode, 'work', to_jsonb(keys),
                       'compiled', p_source));
  RETURN j;
END
$$;
COMMENT ON FUNCTION mycelium.file_compiled_tasks IS 'public write';
