-- Handles and @-mentions: the one normalisation, in the database.
--
-- Mirrors service/mycelium/core/handles.py and core/mentions.py exactly (contracts/mentions.json
-- holds the table of cases both sides assert). Every place the database compares handles (floors,
-- rosters, the await cursor, who a message wakes, search) goes through normalize_handle, so
-- '@Alice', 'alice' and 'alice#s1' are one member everywhere.
--
--   normalise: trim ASCII whitespace, drop every leading '@', drop everything from the first '#',
--              trim again, lowercase A-Z only (no locale can change the result);
--   valid:     ^[a-z0-9][a-z0-9_-]{0,63}$
--   mention:   '@handle' at the start of the text or after whitespace, '(' or '<'; '@~handle' is a
--              silent mention (named, never woken).

CREATE OR REPLACE FUNCTION mycelium.normalize_handle(p_raw text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT translate(
    btrim(split_part(ltrim(btrim(p_raw, E' \t\n\r\f\v'), '@'), '#', 1), E' \t\n\r\f\v'),
    'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
$$;
COMMENT ON FUNCTION mycelium.normalize_handle IS
  'public read: The one spelling of a handle: no @, no #session suffix, no surrounding whitespace, A-Z lowercased.';

-- Is p_handle already in its one spelling? (PL/pgSQL for the CHECKs of hot tables: a CHECK is
-- prepared again for every statement that writes the table, and a SQL function in it would have its
-- body parsed again each time to be inlined; this body is compiled once per session.)
CREATE OR REPLACE FUNCTION mycelium.handle_is_normalised(p_handle text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_handle = mycelium.normalize_handle(p_handle);
END
$$;

-- The code of what is wrong with a handle (after normalising), or NULL; same order as core/handles.
-- (PL/pgSQL: every verb checks its handles, and a valid one is answered by a single match.)
CREATE OR REPLACE FUNCTION mycelium.handle_problem(p_raw text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE h text := mycelium.normalize_handle(p_raw);
BEGIN
  IF h ~ '^[a-z0-9][a-z0-9_-]{0,63}$' THEN
    RETURN NULL;
  END IF;
  RETURN CASE
    WHEN h IS NULL OR h = '' THEN 'blank'
    WHEN length(h) > 64 THEN 'too_long'
    WHEN h !~ '^[a-z0-9]' THEN 'bad_start'
    WHEN h !~ '^[a-z0-9_-]*$' THEN 'bad_character'
  END;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.handle_problem_sentence(p_code text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE p_code
    WHEN 'blank' THEN 'a handle must not be blank'
    WHEN 'too_long' THEN 'a handle has at most 64 characters'
    WHEN 'bad_start' THEN 'a handle must start with a letter a-z or a digit'
    WHEN 'bad_character' THEN 'a handle may contain only a-z, 0-9, ''_'' and ''-'''
  END
$$;

-- p_raw normalised, or a 422 refusal naming what is wrong (p_what says which handle it is).
-- (A valid handle costs one normalisation and one match; only a bad one is examined further.)
CREATE OR REPLACE FUNCTION mycelium.require_handle(p_raw text, p_what text DEFAULT 'handle') RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  h text := mycelium.normalize_handle(p_raw);
  problem text;
BEGIN
  IF h ~ '^[a-z0-9][a-z0-9_-]{0,63}$' THEN
    RETURN h;
  END IF;
  problem := mycelium.handle_problem(p_raw);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_handle',
      format('%s: %s (got %L)', p_what, mycelium.handle_problem_sentence(problem), coalesce(p_raw, '')),
      jsonb_build_object('field', p_what, 'problem', problem, 'handle', p_raw));
  END IF;
  RETURN h;
END
$$;

-- Every mention in a text, in the order first seen, each (handle, form) once.
CREATE OR REPLACE FUNCTION mycelium.mentions_in(p_text text)
RETURNS TABLE (handle text, silent boolean, first_seen bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT mycelium.normalize_handle(m[2]), m[1] = '~', min(ord)
  FROM regexp_matches(coalesce(p_text, ''), '(?:^|(?<=[\s(<]))@(~?)([A-Za-z0-9][A-Za-z0-9_-]*)', 'g')
       WITH ORDINALITY AS t (m, ord)
  WHERE strpos(p_text, '@') > 0  -- most texts name nobody: skip the pattern
  GROUP BY 1, 2
$$;
COMMENT ON FUNCTION mycelium.mentions_in IS 'public inlined';

-- The handles a text wakes (its @handle mentions), first-seen order.
-- (PL/pgSQL, not SQL: the timeline's generated columns call these two, and a PL/pgSQL function is
-- compiled once per session where a SQL one would be parsed again for every INSERT statement.)
CREATE OR REPLACE FUNCTION mycelium.loud_mentions(p_text text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF strpos(p_text, '@') = 0 THEN
    RETURN '{}';
  END IF;
  RETURN (SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}')
          FROM mycelium.mentions_in(p_text) WHERE NOT silent);
END
$$;

-- The handles a text names silently (its @~handle mentions), first-seen order.
CREATE OR REPLACE FUNCTION mycelium.silent_mentions(p_text text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF strpos(p_text, '@~') = 0 THEN
    RETURN '{}';
  END IF;
  RETURN (SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}')
          FROM mycelium.mentions_in(p_text) WHERE silent);
END
$$;

-- The await loop's text test: does p_text wake p_handle with an @handle in it?
CREATE OR REPLACE FUNCTION mycelium.mentions_handle(p_text text, p_handle text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT mycelium.normalize_handle(p_handle) = ANY (mycelium.loud_mentions(p_text))
$$;
