-- Schema, refusals and hub-wide facts.
--
-- Every verb refuses with SQLSTATE 'MYnnn' where nnn is the HTTP status the refusal means
-- (MY404 not found, MY409 conflict, MY422 unprocessable, ...). MESSAGE is the sentence a person
-- reads; DETAIL is a JSON object {"error": <stable code>, ...extra fields}. psql shows both; the hub
-- turns them into {"error", "message", ...} bodies with that status.
--
-- A verb is public where it is defined: COMMENT ON FUNCTION … IS 'public write|read|inlined[: …]'
-- right after its CREATE (mycelium.public_verbs() lists them; grants.sql grants from that list).
--
-- Triggers of one table, timing and level fire in name order, so each is named tNN_<what> and the
-- number states its place (tests/foundation/test_triggers.py holds every trigger to its band):
--   t01-t09  BEFORE … FOR EACH STATEMENT (TRUNCATE refusals, hand writes to derived tables)
--   t10-t49  BEFORE … FOR EACH ROW, ahead of the token gate (checks of the row itself)
--   t50      t50_guard_room_write, the token gate's room check (privacy.sql), on every room table
--   t51-t69  BEFORE … FOR EACH ROW, after the gate (admission, derived columns, positions)
--   t70-t89  AFTER … FOR EACH ROW (consequences in the same transaction: notices, links, audit)
--   t90-t99  AFTER … FOR EACH STATEMENT (consequences of the whole statement)

CREATE SCHEMA IF NOT EXISTS mycelium;

CREATE OR REPLACE FUNCTION mycelium.refuse(status integer, error text, message text, extra jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = 'MY' || lpad(status::text, 3, '0'),
    MESSAGE = message,
    DETAIL = (coalesce(extra, '{}'::jsonb) || jsonb_build_object('error', error))::text;
END
$$;
COMMENT ON FUNCTION mycelium.refuse(integer,text,text,jsonb) IS 'Raise a refusal: SQLSTATE MY<status>, a sentence, and a JSON detail.';

-- One row: this store's identity (reported by /health, stamped into exports).
CREATE TABLE mycelium.store (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO mycelium.store DEFAULT VALUES;

-- Hub settings that every replica must agree on live here, not in a replica's environment.
-- room = '' is the hub-wide value; a room's own row overrides it.
CREATE TABLE mycelium.config (
  room text NOT NULL DEFAULT '',
  name text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_.]{0,63}$'),
  value jsonb NOT NULL,
  updated_by text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, name)
);

CREATE OR REPLACE FUNCTION mycelium.config_value(p_name text, p_room text DEFAULT '') RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT value FROM mycelium.config
  WHERE name = p_name AND room IN (coalesce(p_room, ''), '')
  ORDER BY room DESC LIMIT 1
$$;
COMMENT ON FUNCTION mycelium.config_value IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.set_config(p_name text, p_value jsonb, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS mycelium.config LANGUAGE plpgsql AS $$
DECLARE r mycelium.config;
BEGIN
  IF p_value IS NULL THEN
    DELETE FROM mycelium.config WHERE room = coalesce(p_room, '') AND name = p_name RETURNING * INTO r;
    RETURN r;
  END IF;
  INSERT INTO mycelium.config (room, name, value, updated_by)
  VALUES (coalesce(p_room, ''), p_name, p_value, p_by)
  ON CONFLICT (room, name) DO UPDATE SET value = excluded.value, updated_by = excluded.updated_by,
                                         updated_at = now()
  RETURNING * INTO r;
  RETURN r;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Who is acting.
--
-- The hub's gateway (service/mycelium/verbs) declares, inside the verb's own statement, who asks:
-- mycelium.actor (a handle) and mycelium.actor_kind (person, agent, engine or operator), both
-- transaction-local. A verb takes the author of its write (sender, creator, claimant, releaser…)
-- from that declared actor; the positional field it has always taken (p_by, p_handle, p_sender…)
-- is the fallback, for callers that declare nothing: a hub of the previous release during a
-- rolling upgrade, psql. When both are given and differ, the write is refused (403
-- actor_mismatch). A verb that falls back sets mycelium.actor alone (for its triggers, as it
-- always has), which declares nothing: the next verb in the same transaction falls back too.
-- In psql: BEGIN; SELECT mycelium.acting(NULL, 'alice', 'operator'); … the verbs …; COMMIT;

CREATE OR REPLACE FUNCTION mycelium.actor_kinds() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['person', 'agent', 'engine', 'operator']
$$;
COMMENT ON FUNCTION mycelium.actor_kinds IS 'public read';

-- Declare the actor (a NULL or blank handle declares nobody) and, with p_defer_wakes, keep the wake
-- hints for the caller (mycelium.defer_wakes). Returns p_passthrough unchanged, so a call can wrap
-- a verb's first argument: arguments are evaluated before the verb runs, so the settings are in
-- place before its body and its triggers, and no statement of its own is needed. (STABLE: it
-- changes no table, only the transaction's settings, so it runs as its caller and its expressions
-- take no snapshot each, as a VOLATILE function's do: it runs before every verb the hub calls.)
CREATE OR REPLACE FUNCTION mycelium.acting(
  p_passthrough text, p_actor text, p_kind text, p_defer_wakes boolean DEFAULT false
) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
  nobody boolean := p_actor IS NULL OR btrim(p_actor) = '';
  done text;
BEGIN
  IF NOT nobody AND p_kind IS DISTINCT FROM 'person' AND p_kind IS DISTINCT FROM 'agent'
     AND p_kind IS DISTINCT FROM 'engine' AND p_kind IS DISTINCT FROM 'operator' THEN  -- actor_kinds()
    -- (mycelium.refuse's shape, raised here: refuse is internal, and this runs as its caller)
    RAISE EXCEPTION USING ERRCODE = 'MY422',
      MESSAGE = format('an actor is a person, an agent, an engine or an operator, not %L', coalesce(p_kind, 'nothing')),
      DETAIL = jsonb_build_object('error', 'invalid_actor_kind', 'kind', p_kind,
                                  'kinds', to_jsonb(mycelium.actor_kinds()))::text;
  END IF;
  done := set_config('mycelium.actor', CASE WHEN nobody THEN '' ELSE p_actor END, true);
  done := set_config('mycelium.actor_kind', CASE WHEN nobody THEN '' ELSE p_kind END, true);
  IF p_defer_wakes THEN
    done := set_config('mycelium.defer_wake', 'on', true);
    done := set_config('mycelium.wake_hints', '', true);
  END IF;
  RETURN p_passthrough;
END
$$;
COMMENT ON FUNCTION mycelium.acting IS 'public write';

-- The declared actor's handle, or NULL when nobody is declared.
CREATE OR REPLACE FUNCTION mycelium.declared_actor() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN coalesce(current_setting('mycelium.actor_kind', true), '') <> ''
              THEN nullif(current_setting('mycelium.actor', true), '') END
$$;
COMMENT ON FUNCTION mycelium.declared_actor IS 'public read';

-- The declared actor, when p_given (an author field spelled otherwise) is the same handle; else 403
-- actor_mismatch naming both. (PL/pgSQL, called only when the two strings differ.)
CREATE OR REPLACE FUNCTION mycelium.same_author(p_given text, p_field text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE actor text := current_setting('mycelium.actor', true);
BEGIN
  IF mycelium.normalize_handle(p_given) <> mycelium.normalize_handle(actor) THEN
    PERFORM mycelium.refuse(403, 'actor_mismatch',
      format('%s names @%s, but @%s is asking: a write is authored by whoever makes it', p_field,
             mycelium.normalize_handle(p_given), mycelium.normalize_handle(actor)),
      jsonb_build_object('field', p_field, 'given', p_given, 'actor', actor));
  END IF;
  RETURN actor;
END
$$;

-- The author of a write: the declared actor, else p_given (the verb's positional field, named
-- p_field in a refusal). Both present and not the same handle -> 403 actor_mismatch naming both.
-- (One SQL expression: every write verb names it, and it is inlined there, no call of its own.)
CREATE OR REPLACE FUNCTION mycelium.author(p_given text, p_field text DEFAULT 'handle') RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN coalesce(current_setting('mycelium.actor_kind', true), '') = ''
      OR coalesce(current_setting('mycelium.actor', true), '') = '' THEN p_given
    WHEN p_given IS NULL OR btrim(p_given) = '' OR p_given = current_setting('mycelium.actor', true)
      THEN current_setting('mycelium.actor', true)
    ELSE mycelium.same_author(p_given, p_field)
  END
$$;

-- The handles engines answer to. Until engines are registered (the engine registry extends this
-- rule), an engine's handle is reserved for an actor declared as that engine (kind 'engine').
CREATE OR REPLACE FUNCTION mycelium.engine_handles() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['aligner', 'conductor', 'hello', 'synthesizer']
$$;

-- Is the declared actor the engine whose handle is p_handle (normalised)?
CREATE OR REPLACE FUNCTION mycelium.acting_as_engine(p_handle text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce(current_setting('mycelium.actor_kind', true), '') = 'engine'
     AND mycelium.normalize_handle(current_setting('mycelium.actor', true)) = p_handle;
END
$$;

-- Why p_handle (normalised) may not be the sender of a message, or NULL when it may. @system is the
-- hub itself: its notices and pings are written by the database (post_notice and the timeline's
-- triggers insert them directly), never through a verb that writes a message. (One SQL
-- expression, inlined where it is named.)
CREATE OR REPLACE FUNCTION mycelium.reserved_sender(p_handle text) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_handle = 'system' THEN '@system is the hub itself; write as yourself'
    WHEN p_handle = ANY (mycelium.engine_handles()) AND NOT mycelium.acting_as_engine(p_handle)
      THEN format('@%s is the handle of an engine; only that engine writes as it', p_handle)
  END
$$;

-- p_raw as a sender: normalised and valid (422 otherwise, as require_handle), and not reserved
-- (403 reserved_handle).
CREATE OR REPLACE FUNCTION mycelium.require_sender(p_raw text, p_field text DEFAULT 'sender') RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
  h text := mycelium.require_handle(p_raw, p_field);
  reason text := mycelium.reserved_sender(h);
BEGIN
  IF reason IS NOT NULL THEN
    PERFORM mycelium.refuse(403, 'reserved_handle', format('%s: %s', p_field, reason),
                            jsonb_build_object('field', p_field, 'handle', h));
  END IF;
  RETURN h;
END
$$;

-- The administrative verbs' rule (settings, the dependency gate, deleting a room, forced releases,
-- presuming a worker dead, the hub's keys, receipt signatures, compliance exports): the principal
-- declared for the transaction is an operator (the hub's own loops declare themselves as one); with
-- none declared, the gate is open (every caller of an ungated hub is trusted as its operator) or
-- this is an administrator's own session (psql as the owner). Anyone else is refused, 403
-- operator_only. Returns true, so a read can name it once: WHERE (SELECT mycelium.operator_only(…)).
CREATE OR REPLACE FUNCTION mycelium.is_operator() RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce(current_setting('mycelium.principal_role', true), '') = 'operator'
      OR (mycelium.principal() IS NULL
          AND (NOT mycelium.private_rooms_closed() OR mycelium.administrator_session()));
END
$$;

CREATE OR REPLACE FUNCTION mycelium.operator_only(p_verb text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
  who text := mycelium.principal();
  role text := nullif(current_setting('mycelium.principal_role', true), '');
BEGIN
  IF mycelium.is_operator() THEN
    RETURN true;
  END IF;
  PERFORM mycelium.refuse(403, 'operator_only',
    CASE WHEN who IS NULL THEN format('%s is an operator''s verb, and no principal is declared', p_verb)
         ELSE format('%s is an operator''s verb; @%s is %s', p_verb, who,
                     CASE WHEN role = 'viewer' THEN 'a viewer' ELSE 'an agent' END) END,
    jsonb_build_object('verb', p_verb, 'role', role));
  RETURN false;
END
$$;
COMMENT ON FUNCTION mycelium.operator_only IS 'public read';

-- For a read that found nothing: 404 room_not_found when p_room does not exist, else the refusal
-- given (404 memory_not_found, …). Never returns; typed boolean so a query can name it in a CASE.
CREATE OR REPLACE FUNCTION mycelium.refuse_missing(p_room text, p_error text, p_message text, p_extra jsonb)
RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  PERFORM mycelium.refuse(404, p_error, p_message, p_extra);
  RETURN false;
END
$$;
COMMENT ON FUNCTION mycelium.refuse_missing IS 'public read';

-- ---------------------------------------------------------------------------------------------
-- The public API: the functions mycelium_app may call. Each is marked beside its definition by a
-- comment that starts `public <kind>` (`\df+ mycelium.*` shows it; one function per name, no
-- overloads); sql/grants.sql grants EXECUTE on these and revokes it on every other function in the
-- schema (post_notice, set_config, wake_hint, the triggers and every other helper are internal).
--   write    a verb that changes state; it runs with its owner's rights (SECURITY DEFINER);
--   read     a read a caller names; a PL/pgSQL one runs with its owner's rights too, so what it
--            calls stays internal;
--   inlined  a pure or read-only helper that a public SQL read or a view (board_rows, timeline,
--            message_documents, receipt_export, …) names: the planner expands those into the
--            caller's own query, which therefore needs it (tests/gateway checks that nothing a
--            public read or a view names is internal).
-- Operators act as mycelium_admin, the owner, and may call everything.
CREATE OR REPLACE FUNCTION mycelium.public_verbs() RETURNS TABLE (name text, kind text)
LANGUAGE sql STABLE AS $$
  SELECT p.proname::text, substring(d.description FROM '^public (write|read|inlined)(?::|$)')
  FROM pg_proc p
  JOIN pg_description d ON d.objoid = p.oid AND d.classoid = 'pg_proc'::regclass AND d.objsubid = 0
  WHERE p.pronamespace = 'mycelium'::regnamespace AND d.description ~ '^public (write|read|inlined)(:|$)'
  ORDER BY 1
$$;
COMMENT ON FUNCTION mycelium.public_verbs IS 'public read';
