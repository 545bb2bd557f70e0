-- Revision 0020_usage (frozen): usage events, with no names (sql/usage.sql), and how far each
-- process's clock is off the database's (worker_loops.clock_skew_seconds, sql/workers.sql). The CHECK's functions
-- are defined here as they stood, for a database migrated from scratch that has no code yet.
CREATE OR REPLACE FUNCTION mycelium.usage_prohibited_fields() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY['text', 'content', 'prompt', 'system', 'message', 'messages', 'reply', 'answer', 'body',
               'title', 'name', 'handle', 'handles', 'sender', 'recipient', 'recipients', 'member', 'members',
               'author', 'user', 'email', 'owner', 'assignee', 'participants', 'room', 'key', 'command',
               'stdout', 'stderr', 'error']
$$;

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

CREATE TABLE mycelium.usage_exports (
  exporter text PRIMARY KEY CONSTRAINT usage_exporter CHECK (exporter ~ '^[a-z][a-z0-9_-]{0,39}$'),
  last_id bigint NOT NULL DEFAULT 0,
  exported_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE mycelium.worker_loops ADD COLUMN clock_skew_seconds double precision;
