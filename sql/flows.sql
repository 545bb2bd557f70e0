-- Flows: the steps a conductor walks, held in a room's protocols/<name> memories (runs.sql runs
-- them). Every write of such a memory is checked here, whoever writes it.

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

-- A step's count (rounds, max_rounds): absent, or a whole number, 1 or more.
CREATE OR REPLACE FUNCTION mycelium.flow_count_ok(p_step jsonb, p_field text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT nullif(p_step -> p_field, 'null') IS NULL
      OR (jsonb_typeof(p_step -> p_field) = 'number' AND (p_step ->> p_field) ~ '^\d+$'
          AND (p_step ->> p_field)::numeric >= 1)
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
    IF NOT mycelium.flow_count_ok(st, 'max_rounds') THEN
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
    IF NOT mycelium.flow_count_ok(st, 'rounds') THEN
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
CREATE OR REPLACE TRIGGER t65_memories_protocol_valid BEFORE INSERT OR UPDATE OF value ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_protocol_valid();
