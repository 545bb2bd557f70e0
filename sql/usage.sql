-- Usage events: what the engines, their model calls and the runners' jobs cost, and nothing of
-- what was said or who said it.
--
--   * One row per model call (recorded by the hub's model seam), per engine turn (a summons done)
--     and per runner job ended (both by the triggers below, in the same transaction).
--   * Names stay out by construction: no column holds text; `engine` is the engine's own handle
--     (never a member's, and a runner job names nobody); `attrs` is a flat object of numbers,
--     booleans and short words whose keys are none of the prohibited fields (the CHECK calls
--     usage_attrs_problem). A row is never changed (t10); old ones may be deleted.
--   * An exporter (the OpenTelemetry one) keeps how far it sent in usage_exports, moved only up and
--     only after the collector took the batch: a restart resends from there, nothing is skipped.

-- The keys attrs may never hold: upstream's PROHIBITED_FIELDS (text, and whoever could be named).
CREATE OR REPLACE FUNCTION mycelium.usage_prohibited_fields() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY['text', 'content', 'prompt', 'system', 'message', 'messages', 'reply', 'answer', 'body',
               'title', 'name', 'handle', 'handles', 'sender', 'recipient', 'recipients', 'member', 'members',
               'author', 'user', 'email', 'owner', 'assignee', 'participants', 'room', 'key', 'command',
               'stdout', 'stderr', 'error']
$$;
COMMENT ON FUNCTION mycelium.usage_prohibited_fields IS 'public read';

-- Why attrs may not be stored (NULL: it may): an object of numbers, booleans and short words, under
-- lowercase keys none of which is prohibited.
CREATE OR REPLACE FUNCTION mycelium.usage_attrs_problem(p_attrs jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN jsonb_typeof(p_attrs) IS DISTINCT FROM 'object' THEN 'attrs is an object'
    ELSE (SELECT x.problem FROM (
            SELECT e.key, CASE
              WHEN lower(e.key) = ANY (mycelium.usage_prohibited_fields())
                THEN format('attrs.%s is a prohibited field (usage events name nobody and quote nothing)', e.key)
              WHEN e.key !~ '^[a-z][a-z0-9_]{0,39}$' THEN format('attrs key %L is not a lowercase word', left(e.key, 60))
              WHEN jsonb_typeof(e.value) NOT IN ('number', 'boolean', 'string', 'null')
                THEN format('attrs.%s is a number, a boolean or a short word', e.key)
              WHEN jsonb_typeof(e.value) = 'string' AND (e.value #>> '{}') !~ '^[A-Za-z0-9:._/@+-]{0,64}$'
                THEN format('attrs.%s is a short word (at most 64 of A-Z a-z 0-9 : . _ / @ + -)', e.key)
            END AS problem
            FROM jsonb_each(p_attrs) e) x
          WHERE x.problem IS NOT NULL ORDER BY x.key LIMIT 1)
  END
$$;
COMMENT ON FUNCTION mycelium.usage_attrs_problem IS 'public read';

CREATE TABLE mycelium.usage_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  kind text NOT NULL CONSTRAINT usage_kind CHECK (kind IN ('model_call', 'engine_turn', 'runner_job')),
  engine_kind text CONSTRAINT usage_engine_kind CHECK (engine_kind ~ '^[a-z][a-z0-9_-]{0,39}$'),
  engine text CONSTRAINT usage_engine CHECK (engine ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  model text CONSTRAINT usage_model CHECK (model ~ '^[A-Za-z0-9][A-Za-z0-9:._/@+-]{0,199}$'),
  outcome text NOT NULL CONSTRAINT usage_outcome CHECK (outcome ~ '^[a-z][a-z_]{0,39}$'),
  duration_ms double precision CONSTRAINT usage_duration CHECK (duration_ms >= 0),
  tokens_in integer CONSTRAINT usage_tokens_in CHECK (tokens_in >= 0),
  tokens_out integer CONSTRAINT usage_tokens_out CHECK (tokens_out >= 0),
  attrs jsonb NOT NULL DEFAULT '{}' CONSTRAINT usage_no_names CHECK (mycelium.usage_attrs_problem(attrs) IS NULL),
  CONSTRAINT usage_names_nobody CHECK (kind <> 'runner_job' OR engine IS NULL),
  CONSTRAINT usage_turn_engine CHECK (kind <> 'engine_turn' OR engine IS NOT NULL)
);
CREATE INDEX usage_events_at ON mycelium.usage_events (at);

-- A usage event is never changed (deleting old ones is how they are pruned).
CREATE OR REPLACE FUNCTION mycelium.usage_never_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'usage_immutable', 'a usage event is never changed (delete old ones to prune)');
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t10_usage_never_changed BEFORE UPDATE ON mycelium.usage_events
  FOR EACH ROW EXECUTE FUNCTION mycelium.usage_never_changed();

-- Record one model call (the hub's model seam calls this after each call, answered or failed); the
-- engine kind, when not given, is that of the engine of that handle.
CREATE OR REPLACE FUNCTION mycelium.record_usage(
  p_kind text, p_engine text, p_engine_kind text, p_model text, p_outcome text, p_duration_ms double precision,
  p_tokens_in integer DEFAULT NULL, p_tokens_out integer DEFAULT NULL, p_attrs jsonb DEFAULT '{}'
) RETURNS mycelium.usage_events LANGUAGE plpgsql AS $$
DECLARE
  why text := mycelium.usage_attrs_problem(coalesce(p_attrs, '{}'));
  engine text := nullif(mycelium.normalize_handle(p_engine), '');
  r mycelium.usage_events;
BEGIN
  IF why IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'bad_usage', why);
  END IF;
  INSERT INTO mycelium.usage_events (kind, engine, engine_kind, model, outcome, duration_ms, tokens_in, tokens_out, attrs)
  VALUES (p_kind, engine, coalesce(p_engine_kind, (SELECT e.kind FROM mycelium.engines e WHERE e.handle = engine LIMIT 1)),
          -- a model's name as the CHECK takes it (what it is not: '_')
          left(regexp_replace(p_model, '[^A-Za-z0-9:._/@+-]', '_', 'g'), 200), p_outcome,
          greatest(p_duration_ms, 0), p_tokens_in, p_tokens_out, coalesce(p_attrs, '{}'))
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.record_usage IS 'public write';

-- An engine's turn done (a summons closed): its engine, kind, outcome and how long it took.
CREATE OR REPLACE FUNCTION mycelium.usage_of_summons() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'done' AND OLD.state IS DISTINCT FROM 'done' THEN
    INSERT INTO mycelium.usage_events (kind, engine, engine_kind, outcome, duration_ms, attrs)
    VALUES ('engine_turn', NEW.engine, NEW.kind, coalesce(NEW.outcome, 'done'),
            greatest(0, extract(epoch FROM coalesce(NEW.done_at, now()) - NEW.created_at) * 1000),
            jsonb_build_object('attempts', NEW.attempts, 'how', NEW.how));
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t80_engine_summons_usage AFTER UPDATE OF state ON mycelium.engine_summons
  FOR EACH ROW EXECUTE FUNCTION mycelium.usage_of_summons();

-- A runner's job ended: its state, exit code and duration; nobody named (not even its handle).
CREATE OR REPLACE FUNCTION mycelium.usage_of_runner_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.ended_at IS NOT NULL AND OLD.ended_at IS NULL THEN
    INSERT INTO mycelium.usage_events (kind, outcome, duration_ms, attrs)
    VALUES ('runner_job', NEW.state, NEW.duration_ms,
            jsonb_strip_nulls(jsonb_build_object('exit_code', NEW.exit_code, 'attempt', NEW.attempt,
                                                 'job_kind', NEW.kind)));
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t80_runner_jobs_usage AFTER UPDATE OF ended_at ON mycelium.runner_jobs
  FOR EACH ROW EXECUTE FUNCTION mycelium.usage_of_runner_job();

-- Usage from p_since to p_until grouped by p_group: kind, engine_kind, engine, model, outcome, day or
-- hour (400 bad_group for anything else); each group's events, failures, tokens and durations.
CREATE OR REPLACE FUNCTION mycelium.usage(p_group text, p_since timestamptz, p_until timestamptz DEFAULT NULL)
RETURNS TABLE (grp text, events bigint, failures bigint, tokens_in bigint, tokens_out bigint,
               duration_ms double precision, p50_ms double precision, p95_ms double precision)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_group IS NULL OR p_group NOT IN ('kind', 'engine_kind', 'engine', 'model', 'outcome', 'day', 'hour') THEN
    PERFORM mycelium.refuse(422, 'bad_group',
      format('group_by is kind, engine_kind, engine, model, outcome, day or hour (got %L)', left(p_group, 40)),
      jsonb_build_object('field', 'group_by'));
  END IF;
  RETURN QUERY
  SELECT g.grp, count(*), count(*) FILTER (WHERE g.outcome IN ('failed', 'model_failed', 'refused', 'denied')),
         sum(g.tokens_in)::bigint, sum(g.tokens_out)::bigint, sum(g.duration_ms),
         percentile_cont(0.5) WITHIN GROUP (ORDER BY g.duration_ms),
         percentile_cont(0.95) WITHIN GROUP (ORDER BY g.duration_ms)
  FROM (SELECT u.*, CASE p_group
                      WHEN 'kind' THEN u.kind WHEN 'engine_kind' THEN u.engine_kind WHEN 'engine' THEN u.engine
                      WHEN 'model' THEN u.model WHEN 'outcome' THEN u.outcome
                      WHEN 'day' THEN to_char(date_trunc('day', u.at AT TIME ZONE 'UTC'), 'YYYY-MM-DD')
                      ELSE to_char(date_trunc('hour', u.at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24":00Z"')
                    END AS grp
        FROM mycelium.usage_events u
        WHERE u.at >= p_since AND (p_until IS NULL OR u.at < p_until)) g
  GROUP BY g.grp ORDER BY g.grp NULLS LAST;
END
$$;
COMMENT ON FUNCTION mycelium.usage IS 'public read';

CREATE TABLE mycelium.usage_exports (
  exporter text PRIMARY KEY CONSTRAINT usage_exporter CHECK (exporter ~ '^[a-z][a-z0-9_-]{0,39}$'),
  last_id bigint NOT NULL DEFAULT 0,
  exported_at timestamptz NOT NULL DEFAULT now()
);

-- How far p_exporter has sent (0: nothing yet).
CREATE OR REPLACE FUNCTION mycelium.usage_export_mark(p_exporter text) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT last_id FROM mycelium.usage_exports WHERE exporter = p_exporter), 0)
$$;
COMMENT ON FUNCTION mycelium.usage_export_mark IS 'public read';

-- p_exporter has sent the events up to p_last_id (the mark only moves up).
CREATE OR REPLACE FUNCTION mycelium.mark_usage_exported(p_exporter text, p_last_id bigint) RETURNS bigint
LANGUAGE sql AS $$
  INSERT INTO mycelium.usage_exports AS x (exporter, last_id) VALUES (p_exporter, p_last_id)
  ON CONFLICT (exporter) DO UPDATE SET last_id = greatest(x.last_id, excluded.last_id), exported_at = now()
  RETURNING last_id
$$;
COMMENT ON FUNCTION mycelium.mark_usage_exported IS 'public write';
