-- The code of release 0.2.0 (commit 8710f9e, revision 0012_compiler),
-- written by `mycelium db freeze`, re-applied by a downgrade to that release.
-- Never edit it: a test compares it with the release's commit.


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


CREATE OR REPLACE FUNCTION mycelium.config_value(p_name text, p_room text DEFAULT '') RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT value FROM mycelium.config
  WHERE name = p_name AND room IN (coalesce(p_room, ''), '')
  ORDER BY room DESC LIMIT 1
$$;


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


-- The declared actor's handle, or NULL when nobody is declared.
CREATE OR REPLACE FUNCTION mycelium.declared_actor() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN coalesce(current_setting('mycelium.actor_kind', true), '') <> ''
              THEN nullif(current_setting('mycelium.actor', true), '') END
$$;


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


-- ---------------------------------------------------------------------------------------------
-- The public API: the functions mycelium_app may call (sql/grants.sql grants EXECUTE on these and
-- revokes it on every other function in the schema: post_notice, set_config, wake_hint, the
-- triggers and every other helper are internal). One row per function name (all its signatures):
--   write    a verb that changes state; it runs with its owner's rights (SECURITY DEFINER);
--   read     a read a caller names; a PL/pgSQL one runs with its owner's rights too, so what it
--            calls stays internal;
--   inlined  a pure or read-only helper that a public SQL read or a view (board_rows, timeline,
--            message_documents, receipt_export, …) names: the planner expands those into the
--            caller's own query, which therefore needs it (tests/gateway checks that nothing a
--            public read or a view names is internal).
-- Operators act as mycelium_admin, the owner, and may call everything.
CREATE OR REPLACE FUNCTION mycelium.public_verbs() RETURNS TABLE (name text, kind text)
LANGUAGE sql IMMUTABLE AS $$
  SELECT v.name, v.kind FROM (VALUES
    -- who acts, and the wake hints the caller sends itself
    ('acting', 'write'), ('defer_wakes', 'write'),
    -- rooms, memories, the markdown mirror, the embedder
    ('create_room', 'write'), ('update_room', 'write'), ('delete_room', 'write'),
    ('write_memory', 'write'), ('delete_memory', 'write'), ('set_embedding', 'write'),
    ('register_follower', 'write'), ('advance_follower', 'write'),
    ('derive_links', 'write'), ('rebuild_links', 'write'),  -- re-derived from the text: nothing to forge
    -- the board
    ('create_task', 'write'), ('claim_task', 'write'), ('release_task', 'write'), ('resolve_task', 'write'),
    ('renew_tasks', 'write'), ('write_fields', 'write'), ('block_row', 'write'), ('unblock_row', 'write'),
    ('dismiss_row', 'write'), ('promote_row', 'write'), ('set_dependency_gate', 'write'),
    ('sweep_expired_leases', 'write'), ('write_setting', 'write'),
    -- conversations
    ('post_message', 'write'), ('amend_message', 'write'), ('take_next', 'write'), ('reply', 'write'),
    ('hold_floor', 'write'), ('release_floor', 'write'), ('freeze_roster', 'write'), ('thaw_roster', 'write'),
    -- transitions and receipts
    ('claim_transition', 'write'), ('renew_lease', 'write'), ('advance_boundary', 'write'),
    ('record_external_operation', 'write'), ('complete', 'write'), ('complete_ack', 'write'), ('fail', 'write'),
    ('mark_unknown', 'write'), ('mark_blocked', 'write'), ('repair', 'write'),
    ('apply_reconcile_result', 'write'), ('release', 'write'), ('mark_worker_dead', 'write'),
    ('register_receipt_key', 'write'), ('retire_receipt_keys', 'write'), ('sign_receipts', 'write'),
    -- the background loops (sql/workers.sql)
    ('beat_worker', 'write'), ('stop_worker', 'write'), ('forget_stale_workers', 'write'),
    ('claim_missing_vectors', 'write'), ('release_vector_claims', 'write'), ('worker_report', 'read'),
    -- engines (sql/engines.sql)
    ('create_engine', 'write'), ('claim_engine_summons', 'write'), ('answer_summon', 'write'),
    ('start_engine_run', 'write'), ('claim_engine_runs', 'write'), ('renew_engine_runs', 'write'),
    ('release_engine_runs', 'write'), ('engine_step', 'write'), ('run_replies', 'read'),
    ('summon_failed', 'write'),
    ('invoke_engine', 'write'), ('coordinate', 'write'), ('engine_kinds', 'read'), ('episode_record', 'read'),
    ('episode_quality', 'inlined'),
    -- the task compiler (sql/compiler.sql)
    ('claim_compile_jobs', 'write'), ('release_compile_jobs', 'write'), ('file_compiled_tasks', 'write'),
    ('compiled_work', 'read'),
    -- the synthesizer (sql/synthesis.sql)
    ('synthesis_input', 'read'),
    -- negotiations (sql/negotiations.sql)
    ('start_negotiation', 'write'), ('negotiation_departure', 'read'),
    -- the wake digest beside an awaited message (sql/digest.sql)
    ('wake_digest', 'read'),
    -- the schema's own description (sql/catalogue.sql, /health)
    ('schema_catalogue', 'read'), ('schema_fingerprint', 'read'),
    -- reads a caller names
    ('actor', 'read'), ('declared_actor', 'read'), ('operator_only', 'read'), ('actor_kinds', 'read'), ('public_verbs', 'read'),
    ('room_known', 'read'), ('room_fold', 'read'), ('refuse_missing', 'read'), ('normalize_handle', 'read'),
    ('episode_ref', 'read'), ('row_of_episode', 'read'), ('memory_title', 'read'),
    ('search_memories', 'read'), ('memory_links_of', 'read'), ('link_graph', 'read'),
    ('link_integrity', 'read'), ('link_drift', 'read'), ('expand_memory', 'read'),
    ('read_assignment', 'read'), ('read_fields', 'read'), ('dependency_gate_on', 'read'),
    ('next_lease_expiry', 'read'), ('settings_of', 'read'), ('room_members', 'read'),
    ('message_type_of', 'read'), ('thread_matches', 'read'), ('unsigned_receipt_batch', 'read'),
    ('verify_receipt_chain', 'read'),
    -- private rooms (sql/privacy.sql): what the policies call as the app role
    ('principal', 'read'), ('rooms_open', 'read'), ('hidden_rooms', 'read'), ('room_visible', 'read'),
    ('administrator_session', 'read'), ('private_rooms_closed', 'read'), ('room_admits', 'inlined'),
    -- join codes and the hub's member-token keys (sql/joins.sql)
    ('mint_join_code', 'write'), ('redeem_join_code', 'write'), ('ensure_hub_key', 'write'),
    ('rotate_hub_key', 'write'),
    -- the audit trail (sql/audit.sql)
    ('verify_audit_chain', 'read'), ('audit_preimage', 'inlined'),
    -- named by the public SQL reads and the views above
    ('board_namespaces', 'inlined'), ('config_value', 'inlined'), ('episode_short_id', 'inlined'),
    ('episode_urn', 'inlined'), ('is_assignable_key', 'inlined'), ('is_board_key', 'inlined'),
    ('is_expandable', 'inlined'), ('lease_assignment', 'inlined'), ('lease_read', 'inlined'),
    ('link_code_mask', 'inlined'), ('link_key', 'inlined'), ('link_pattern', 'inlined'),
    ('link_ref', 'inlined'), ('link_relations', 'inlined'), ('link_slug', 'inlined'),
    ('live_episode', 'inlined'), ('masked_outline', 'inlined'), ('memory_body_title', 'inlined'),
    ('memory_outline', 'inlined'), ('mentions_in', 'inlined'), ('message_document', 'inlined'),
    ('message_has', 'inlined'), ('named_handles', 'inlined'), ('parse_links', 'inlined'),
    ('parse_masked_links', 'inlined'), ('receipt_hash', 'inlined'), ('receipt_preimage', 'inlined'),
    ('receipt_preimage_after_seq', 'inlined'), ('receipt_preimage_before_seq', 'inlined'),
    ('receipt_seq_field', 'inlined'), ('receipt_ts', 'inlined'), ('row_settled', 'inlined'), ('row_waits', 'inlined'),
    ('run_leaves_episode', 'inlined'),
    ('settled_statuses', 'inlined'), ('stance_of', 'inlined'), ('stored_without_document', 'inlined'),
    ('task_lease_end', 'inlined'), ('waiting_on', 'inlined')
  ) AS v (name, kind)
$$;
-- Rooms: the persistent namespace that holds memories, the board and the timeline.
-- Every room-scoped table keys on the room first and cascades from here, so deleting a room
-- removes everything of it in one statement.

CREATE OR REPLACE FUNCTION mycelium.room_name_problem(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_name IS NULL OR btrim(p_name) = '' THEN 'a room name must not be blank'
    WHEN length(p_name) > 100 THEN 'a room name has at most 100 characters'
    WHEN p_name IN ('.', '..') THEN 'a room name must not be "." or ".."'
    WHEN p_name ~ '[/\\]' THEN 'a room name must not contain a path separator'
    WHEN p_name ~ '[[:cntrl:]]' THEN 'a room name must not contain control characters'
    WHEN p_name LIKE '%:session:%' THEN 'a room name must not contain ":session:"'
  END
$$;


-- The characters of Unicode category Cf (format: zero-width spaces and joiners, bidirectional
-- controls and isolates, the soft hyphen, the BOM, tag characters …), as of Unicode 15.1: invisible,
-- so two names that look the same would be two rooms. A regular-expression bracket expression.
CREATE OR REPLACE FUNCTION mycelium.format_characters() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT '[\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u180E\u200B-\u200F\u202A-\u202E'
         '\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB\U000110BD\U000110CD\U00013430-\U0001343F'
         '\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001\U000E0020-\U000E007F]'
$$;


-- What a new room's name must also meet (the table's check keeps the older rules, so a room created
-- before these is still updated and deleted as it was): no format characters, NFC form.
CREATE OR REPLACE FUNCTION mycelium.room_name_form_problem(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_name ~ mycelium.format_characters() THEN
      format('a room name must not contain invisible or bidirectional-control characters (U+%s)',
             upper(lpad(to_hex(ascii(substring(p_name FROM mycelium.format_characters()))), 4, '0')))
    WHEN p_name IS NOT NFC NORMALIZED THEN 'a room name is written in Unicode NFC form'
  END
$$;


-- A room name as it is compared: NFC, lower case by Unicode's rules (with the first Unicode-aware
-- collation the server has, as link_slug; without one, ASCII letters only). `Atlas`, `ATLAS` and
-- an NFD `atlas` are one name; the spelling a room was created with is what it is stored and shown as.
-- (A unique index is built on it: migrations/versions/0008_room_names.py defines it the same way.)
DO $fold$
DECLARE
  coll text;
BEGIN
  SELECT format('COLLATE %I.%I', n.nspname, c.collname) INTO coll
  FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace
  WHERE c.collname IN ('pg_c_utf8', 'C.utf8', 'C.UTF-8')
    AND c.collencoding IN (-1, (SELECT encoding FROM pg_database WHERE datname = current_database()))
  ORDER BY array_position(ARRAY['pg_c_utf8', 'C.utf8', 'C.UTF-8'], c.collname::text)
  LIMIT 1;
  EXECUTE format($fn$
    CREATE OR REPLACE FUNCTION mycelium.room_fold(p_name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT lower(normalize(p_name, NFC) %s) $$ $fn$,
    coalesce(coll, ''));
END
$fold$;


-- A new room (psql's INSERT too): its name in NFC, meeting room_name_form_problem (the check
-- constraint the rest), and no other spelling of it taken (409 naming that room; two inserts racing
-- meet the unique index).
CREATE OR REPLACE FUNCTION mycelium.rooms_name_rules() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  problem text;
  existing text;
BEGIN
  NEW.name := normalize(NEW.name, NFC);
  problem := mycelium.room_name_form_problem(NEW.name);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_room_name', problem, jsonb_build_object('name', NEW.name));
  END IF;
  SELECT name INTO existing FROM mycelium.rooms WHERE mycelium.room_fold(name) = mycelium.room_fold(NEW.name);
  IF FOUND THEN
    PERFORM mycelium.room_exists(NEW.name, existing);
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER rooms_name_rules BEFORE INSERT ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_name_rules();


CREATE OR REPLACE FUNCTION mycelium.room_exists(p_name text, p_existing text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'room_exists',
    CASE WHEN p_existing = p_name THEN format('Room %L already exists', p_name)
         ELSE format('Room %L already exists, spelled %L (room names are one name whatever their case)',
                     p_name, p_existing) END,
    jsonb_build_object('name', p_name)
    || CASE WHEN p_existing = p_name THEN '{}' ELSE jsonb_build_object('existing', p_existing) END);
END
$$;


-- 404 unless the room exists by this exact name. When it exists under another spelling (case,
-- Unicode form), the refusal names it (detail `spelled`): the HTTP layer then retries with it, and
-- psql users learn how to write it.
CREATE OR REPLACE FUNCTION mycelium.require_room(p_room text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
  spelled text;
BEGIN
  -- a room the principal may not see is answered as one that does not exist (sql/privacy.sql)
  IF NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = p_room) OR NOT mycelium.room_visible(p_room) THEN
    SELECT name INTO spelled FROM mycelium.rooms
    WHERE mycelium.room_fold(name) = mycelium.room_fold(p_room) AND name <> p_room AND mycelium.room_visible(name);
    IF FOUND THEN
      PERFORM mycelium.refuse(404, 'room_not_found',
        format('Room %L not found: it is spelled %L (write it so here)', p_room, spelled),
        jsonb_build_object('room', p_room, 'spelled', spelled));
    END IF;
    PERFORM mycelium.refuse(404, 'room_not_found', format('Room %L not found', p_room),
                            jsonb_build_object('room', p_room));
  END IF;
END
$$;


-- For a read of a room's rows: true, or 404 room_not_found. A query names it in its WHERE clause
-- with nothing but the room's parameter, which makes it a one-time filter: checked once, in the
-- read's own statement, before any row is read.
CREATE OR REPLACE FUNCTION mycelium.room_known(p_room text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN true;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.create_room(
  p_name text, p_title text DEFAULT NULL, p_description text DEFAULT NULL,
  p_is_public boolean DEFAULT true, p_owner text DEFAULT NULL, p_members text[] DEFAULT '{}',
  p_created_by text DEFAULT NULL
) RETURNS mycelium.rooms LANGUAGE plpgsql AS $$
DECLARE
  v_name text := normalize(p_name, NFC);
  problem text := coalesce(mycelium.room_name_problem(v_name), mycelium.room_name_form_problem(v_name));
  creator text := mycelium.author(p_created_by, 'created_by');
  r mycelium.rooms;
BEGIN
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_room_name', problem, jsonb_build_object('name', p_name));
  END IF;
  IF NOT coalesce(p_is_public, true) AND coalesce(p_owner, creator) IS NULL THEN
    PERFORM mycelium.refuse(422, 'private_room_needs_owner', 'a private room needs an owner');
  END IF;
  INSERT INTO mycelium.rooms (name, title, description, is_public, owner, members, created_by)
  VALUES (v_name, p_title, p_description, coalesce(p_is_public, true),
          CASE WHEN coalesce(p_is_public, true) THEN p_owner ELSE coalesce(p_owner, creator) END,
          coalesce(p_members, '{}'), creator)
  ON CONFLICT DO NOTHING  -- this name or another spelling of it, created meanwhile
  RETURNING * INTO r;
  IF r.name IS NULL THEN
    PERFORM mycelium.room_exists(v_name, (SELECT name FROM mycelium.rooms
                                          WHERE mycelium.room_fold(name) = mycelium.room_fold(v_name)));
  END IF;
  RETURN r;
END
$$;


-- PATCH semantics: only the keys present in p_patch change (title, description, is_public,
-- members, owner). Making a room private without an owner makes its author (the actor, else p_by)
-- its owner.
CREATE OR REPLACE FUNCTION mycelium.update_room(p_name text, p_patch jsonb, p_by text DEFAULT NULL)
RETURNS mycelium.rooms LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.author(p_by, 'by');
  r mycelium.rooms;
  unknown text[];
BEGIN
  SELECT array_agg(k) INTO unknown FROM jsonb_object_keys(coalesce(p_patch, '{}')) k
  WHERE k NOT IN ('title', 'description', 'is_public', 'members', 'owner');
  IF unknown IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'unknown_fields', 'a room has no field ' || array_to_string(unknown, ', '),
                            jsonb_build_object('fields', unknown));
  END IF;
  SELECT * INTO r FROM mycelium.rooms WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN PERFORM mycelium.require_room(p_name); END IF;
  IF p_patch ? 'title' THEN r.title := p_patch->>'title'; END IF;
  IF p_patch ? 'description' THEN r.description := p_patch->>'description'; END IF;
  IF p_patch ? 'owner' THEN r.owner := p_patch->>'owner'; END IF;
  IF p_patch ? 'members' THEN
    r.members := coalesce(ARRAY(SELECT jsonb_array_elements_text(p_patch->'members')), '{}');
  END IF;
  IF p_patch ? 'is_public' AND jsonb_typeof(p_patch->'is_public') = 'boolean' THEN
    r.is_public := (p_patch->>'is_public')::boolean;
  END IF;
  IF NOT r.is_public AND r.owner IS NULL THEN
    IF by_handle IS NULL THEN
      PERFORM mycelium.refuse(422, 'private_room_needs_owner', 'a private room needs an owner');
    END IF;
    r.owner := by_handle;
  END IF;
  UPDATE mycelium.rooms SET title = r.title, description = r.description, is_public = r.is_public,
         owner = r.owner, members = r.members, updated_at = now()
  WHERE name = p_name RETURNING * INTO r;
  RETURN r;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.delete_room(p_name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('delete_room');
  DELETE FROM mycelium.rooms WHERE name = p_name;
  IF NOT FOUND THEN PERFORM mycelium.require_room(p_name); END IF;
  DELETE FROM mycelium.config WHERE room = p_name;
END
$$;


-- A room's name is its identity everywhere (keys, URNs, mirror folders): it never changes.
CREATE OR REPLACE FUNCTION mycelium.rooms_keep_name() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.name IS DISTINCT FROM OLD.name THEN
    PERFORM mycelium.refuse(409, 'immutable', 'a room is never renamed', jsonb_build_object('room', OLD.name));
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER rooms_keep_name BEFORE UPDATE OF name ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_keep_name();
-- Memories: markdown documents at keys inside a room, versioned, with a write-once thread binding.
--
-- Rules the database keeps, whoever writes (the hub, an engine, a person in psql):
--   * every memory gets a thread id (`episode`) minted here on insert; a caller cannot choose it,
--     and no UPDATE may change it, nor the room or key it belongs to;
--   * every content write bumps `version` by one and appends the new version to memory_versions;
--     writing only the vector (the embedder catching up) is not a content write;
--   * memory_versions is append-only: rows leave it only together with their room;
--   * every write and delete is recorded in `changes` (the outbox the markdown mirror follows).

-- Wake hints. NOTIFY only ever says "look again" (whoever wakes re-reads the tables), but a
-- transaction that sent one commits under a cluster-wide lock that PostgreSQL takes before commit
-- and holds past the WAL flush, so notifying transactions commit one at a time instead of sharing
-- a flush. A writer that sends its hints itself once it has committed (the hub does, batched on its
-- one listener connection) calls defer_wakes() first, in the same transaction: the triggers then
-- append their hints to the transaction-local setting mycelium.wake_hints, one '<channel>\t<payload>'
-- line each, which the caller reads back in the same statement. Every other writer (psql, scripts,
-- another client) gets the trigger's NOTIFY as before.

-- Returns p_passthrough unchanged, so a call can wrap a verb's first argument: arguments are
-- evaluated before the verb runs, so the setting is in place before any trigger fires.
-- (set_config assigned, not PERFORMed: an assignment is a simple expression, a PERFORM a query.)
CREATE OR REPLACE FUNCTION mycelium.defer_wakes(p_passthrough text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE done text;
BEGIN
  done := set_config('mycelium.defer_wake', 'on', true);
  done := set_config('mycelium.wake_hints', '', true);
  RETURN p_passthrough;
END
$$;


-- NOTIFY p_channel, or keep the hint for the caller when it asked to send its own.
CREATE OR REPLACE FUNCTION mycelium.wake_hint(p_channel text, p_payload text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE kept text;
BEGIN
  IF current_setting('mycelium.defer_wake', true) = 'on' THEN
    kept := current_setting('mycelium.wake_hints', true);
    kept := set_config('mycelium.wake_hints',
      CASE WHEN coalesce(kept, '') = '' THEN '' ELSE kept || E'\n' END || p_channel || E'\t' || p_payload, true);
  ELSE
    PERFORM pg_notify(p_channel, p_payload);
  END IF;
  RETURN p_payload;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.memory_key_problem(p_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_key IS NULL OR btrim(p_key) = '' THEN 'a memory key must not be blank'
    WHEN length(p_key) > 512 THEN 'a memory key has at most 512 characters'
    WHEN p_key ~ '[[:cntrl:]\\]' THEN 'a memory key must not contain control characters or backslashes'
    WHEN p_key ~ '^/' OR p_key ~ '/$' THEN 'a memory key must not start or end with "/"'
    WHEN p_key ~ '//' THEN 'a memory key must not contain an empty segment'
    WHEN p_key ~ '(^|/)\.{1,2}(/|$)' THEN 'a memory key must not contain "." or ".." segments'
  END
$$;


CREATE OR REPLACE FUNCTION mycelium.episode_urn(p_room text, p_short text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'urn:ioc:mycelium:episode:' || p_room || ':' || p_short $$;


CREATE OR REPLACE FUNCTION mycelium.episode_short_id(p_episode text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT regexp_replace(p_episode, '^.*:', '') $$;


-- Who is writing: the verbs set it for their transaction; a direct SQL write falls back to the
-- database user, so history always names somebody.
CREATE OR REPLACE FUNCTION mycelium.actor() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT coalesce(nullif(current_setting('mycelium.actor', true), ''), session_user::text)
$$;


-- ---------------------------------------------------------------------------------------------
-- Triggers: binding, versioning, history, outbox.

CREATE OR REPLACE FUNCTION mycelium.memories_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE candidate text;
BEGIN
  LOOP
    candidate := mycelium.episode_urn(NEW.room, substr(replace(gen_random_uuid()::text, '-', ''), 1, 12));
    EXIT WHEN NOT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = NEW.room AND episode = candidate);
  END LOOP;
  NEW.episode := candidate;
  NEW.version := 1;
  NEW.created_at := now();
  NEW.updated_at := NEW.created_at;
  NEW.updated_by := coalesce(NEW.updated_by, NEW.created_by);
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER memories_before_insert BEFORE INSERT ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_before_insert();


CREATE OR REPLACE FUNCTION mycelium.memories_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.episode IS DISTINCT FROM OLD.episode OR NEW.room IS DISTINCT FROM OLD.room
     OR NEW.key IS DISTINCT FROM OLD.key THEN
    PERFORM mycelium.refuse(409, 'binding_immutable',
      format('the thread binding of %L is write-once: its episode, room and key never change', OLD.key),
      jsonb_build_object('key', OLD.key, 'episode', OLD.episode));
  END IF;
  NEW.created_at := OLD.created_at;
  NEW.created_by := OLD.created_by;
  IF (NEW.value, NEW.meta, NEW.tags, NEW.content_text, NEW.updated_by)
       IS NOT DISTINCT FROM (OLD.value, OLD.meta, OLD.tags, OLD.content_text, OLD.updated_by)
     AND (NEW.embedding, NEW.embedded_hash) IS DISTINCT FROM (OLD.embedding, OLD.embedded_hash) THEN
    -- only the vector moved: not a content write
    NEW.version := OLD.version;
    NEW.updated_at := OLD.updated_at;
  ELSE
    NEW.version := OLD.version + 1;
    NEW.updated_at := greatest(now(), OLD.updated_at);
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER memories_before_update BEFORE UPDATE ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_before_update();


CREATE OR REPLACE FUNCTION mycelium.memories_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.version = OLD.version THEN
    RETURN NULL;
  END IF;
  INSERT INTO mycelium.memory_versions (room, key, episode, version, op, value, meta, tags, content_text,
                                        written_by, written_at)
  VALUES (NEW.room, NEW.key, NEW.episode, NEW.version, 'write', NEW.value, NEW.meta, NEW.tags,
          NEW.content_text, NEW.updated_by, NEW.updated_at);
  INSERT INTO mycelium.changes (room, key, op) VALUES (NEW.room, NEW.key, 'upsert');
  PERFORM mycelium.wake_hint('mycelium_changes', NEW.room);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memories_after_write AFTER INSERT OR UPDATE ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_after_write();


CREATE OR REPLACE FUNCTION mycelium.memories_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = OLD.room) THEN
    RETURN NULL;  -- the room is going: rooms_after_delete records that once
  END IF;
  INSERT INTO mycelium.memory_versions (room, key, episode, version, op, written_by)
  VALUES (OLD.room, OLD.key, OLD.episode, OLD.version, 'delete', mycelium.actor());
  INSERT INTO mycelium.changes (room, key, op) VALUES (OLD.room, OLD.key, 'delete');
  PERFORM mycelium.wake_hint('mycelium_changes', OLD.room);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memories_after_delete AFTER DELETE ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_after_delete();


CREATE OR REPLACE FUNCTION mycelium.rooms_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO mycelium.changes (room, key, op) VALUES (OLD.name, NULL, 'room_delete');
  PERFORM mycelium.wake_hint('mycelium_changes', OLD.name);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER rooms_after_delete AFTER DELETE ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_after_delete();


-- Append-only: history rows are never edited, and leave only with their room (the FK cascade runs
-- after the room row is gone, which is the one case this trigger lets through).
CREATE OR REPLACE FUNCTION mycelium.refuse_history_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = OLD.room) THEN
    RETURN OLD;
  END IF;
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: %s refused', TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memory_versions_append_only BEFORE UPDATE OR DELETE ON mycelium.memory_versions
  FOR EACH ROW EXECUTE FUNCTION mycelium.refuse_history_change();


CREATE OR REPLACE FUNCTION mycelium.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: TRUNCATE refused', TG_TABLE_NAME));
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memory_versions_no_truncate BEFORE TRUNCATE ON mycelium.memory_versions
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_truncate();


-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Keys the store owns: sent in meta, they are ignored.
CREATE OR REPLACE FUNCTION mycelium.managed_memory_keys() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['key', 'created_by', 'updated_by', 'version', 'tags', 'created_at', 'updated_at',
               'value', 'episode']
$$;


CREATE OR REPLACE FUNCTION mycelium.stale_base_detail(m mycelium.memories) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('key', m.key, 'current_version', m.version, 'current_content', m.value,
                            'updated_by', m.updated_by, 'updated_at', m.updated_at)
$$;


-- Upsert one memory. p_value is the content object ({"text": "..."} for prose). p_meta overlays the
-- existing unmanaged frontmatter (a JSON null removes a key); managed keys in it are ignored.
-- p_base_version: the version the writer read (0 = "I expect no memory here"); if the memory has
-- moved on, nothing is written and the refusal carries the current content (409 stale_base).
-- p_embedding: the vector of coalesce(p_content_text, text) when the caller has one; without it the
-- old vector is kept if the text is unchanged (or p_embed is false), else cleared for the embedder.
-- The author is the declared actor (mycelium.author), else p_by.
CREATE OR REPLACE FUNCTION mycelium.write_memory(
  p_room text, p_key text, p_value jsonb, p_by text,
  p_tags text[] DEFAULT NULL, p_meta jsonb DEFAULT NULL, p_content_text text DEFAULT NULL,
  p_base_version integer DEFAULT NULL, p_embedding vector DEFAULT NULL, p_embed boolean DEFAULT true
) RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  problem text := mycelium.memory_key_problem(p_key);
  by_handle text;
  v jsonb;
  new_meta jsonb;
  text_hash text;
  cur mycelium.memories;
  r mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_key', problem, jsonb_build_object('key', p_key));
  END IF;
  by_handle := mycelium.author(p_by, 'created_by');
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'a memory write names its author (created_by)');
  END IF;
  v := CASE jsonb_typeof(p_value) WHEN 'string' THEN jsonb_build_object('text', p_value #>> '{}')
                                  WHEN 'object' THEN p_value END;
  IF v IS NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_value', 'a memory value is a string or an object',
                            jsonb_build_object('key', p_key));
  END IF;
  IF p_meta IS NOT NULL AND jsonb_typeof(p_meta) <> 'object' THEN
    PERFORM mycelium.refuse(422, 'invalid_meta', 'meta is an object of frontmatter fields',
                            jsonb_build_object('key', p_key));
  END IF;
  IF p_base_version IS NOT NULL AND p_base_version < 0 THEN
    PERFORM mycelium.refuse(422, 'invalid_base_version', 'base_version is 0 or more',
                            jsonb_build_object('key', p_key));
  END IF;
  PERFORM set_config('mycelium.actor', by_handle, true);
  text_hash := md5(coalesce(p_content_text, v ->> 'text', v::text));

  LOOP
    SELECT * INTO cur FROM mycelium.memories WHERE room = p_room AND key = p_key FOR UPDATE;
    IF FOUND THEN
      IF p_base_version IS NOT NULL AND p_base_version <> cur.version THEN
        PERFORM mycelium.refuse(409, 'stale_base',
          format('%L is at version %s, not %s: re-read it and merge', p_key, cur.version, p_base_version),
          mycelium.stale_base_detail(cur));
      END IF;
      new_meta := jsonb_strip_nulls(cur.meta || (coalesce(p_meta, '{}') - mycelium.managed_memory_keys()));
      UPDATE mycelium.memories SET
        value = v, meta = new_meta, tags = coalesce(p_tags, cur.tags), content_text = p_content_text,
        updated_by = by_handle,
        embedding = CASE WHEN p_embedding IS NOT NULL THEN p_embedding
                         WHEN NOT p_embed OR cur.embedded_hash = text_hash THEN cur.embedding END,
        embedded_hash = CASE WHEN p_embedding IS NOT NULL THEN text_hash
                             WHEN NOT p_embed OR cur.embedded_hash = text_hash THEN cur.embedded_hash END
      WHERE room = p_room AND key = p_key
      RETURNING * INTO r;
      RETURN r;
    END IF;
    IF p_base_version IS NOT NULL AND p_base_version <> 0 THEN
      PERFORM mycelium.refuse(409, 'stale_base',
        format('%L does not exist, so it is not at version %s', p_key, p_base_version),
        jsonb_build_object('key', p_key, 'current_version', 0, 'current_content', NULL));
    END IF;
    INSERT INTO mycelium.memories (room, key, value, meta, tags, content_text, created_by, updated_by,
                                   embedding, embedded_hash)
    VALUES (p_room, p_key, v, jsonb_strip_nulls(coalesce(p_meta, '{}') - mycelium.managed_memory_keys()),
            coalesce(p_tags, '{}'), p_content_text, by_handle, by_handle, p_embedding,
            CASE WHEN p_embedding IS NOT NULL THEN text_hash END)
    ON CONFLICT (room, key) DO NOTHING
    RETURNING * INTO r;
    IF r.key IS NOT NULL THEN
      RETURN r;
    END IF;
    -- a concurrent writer created it first: go round and update it under its row lock
  END LOOP;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.delete_memory(p_room text, p_key text, p_by text DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.author(p_by, 'by');
  r mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF by_handle IS NOT NULL THEN PERFORM set_config('mycelium.actor', by_handle, true); END IF;
  DELETE FROM mycelium.memories WHERE room = p_room AND key = p_key RETURNING * INTO r;
  IF r.key IS NULL THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN r;
END
$$;


-- The embedder catching up: store a vector for the version it was computed from (no-op if the
-- memory has moved on since). Not a content write: no version bump, no history row.
CREATE OR REPLACE FUNCTION mycelium.set_embedding(p_room text, p_key text, p_version integer, p_embedding vector)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE mycelium.memories
  SET embedding = p_embedding, embedded_hash = md5(coalesce(content_text, value ->> 'text', value::text))
  WHERE room = p_room AND key = p_key AND version = p_version;
  RETURN FOUND;
END
$$;


-- Hybrid search: vector neighbours and full-text matches (all terms) fused by reciprocal rank; similarity is
-- the cosine similarity to the query (NULL for a memory without a vector). With a room filter the
-- HNSW index is scanned iteratively so the filter never under-fills the result.
CREATE OR REPLACE FUNCTION mycelium.search_memories(
  p_room text, p_query_embedding vector, p_query text, p_limit integer DEFAULT 10,
  p_tags text[] DEFAULT NULL, p_min_similarity double precision DEFAULT 0
) RETURNS TABLE (key text, similarity double precision, score double precision)
LANGUAGE plpgsql STABLE
SET hnsw.iterative_scan = 'relaxed_order' SET hnsw.ef_search = '100'
AS $$
DECLARE
  k integer := greatest(p_limit * 4, 40);
  -- every query term must match: full text boosts exact wording, it never drowns the vector ranking
  -- under one common word
  tsq tsquery := nullif(plainto_tsquery('english', coalesce(p_query, ''))::text, '')::tsquery;
BEGIN
  RETURN QUERY
  WITH vec AS MATERIALIZED (
    SELECT m.key, m.embedding <=> p_query_embedding AS dist
    FROM mycelium.memories m
    WHERE p_query_embedding IS NOT NULL AND m.room = p_room AND m.embedding IS NOT NULL
      AND (p_tags IS NULL OR m.tags @> p_tags)
    ORDER BY m.embedding <=> p_query_embedding
    LIMIT k
  ), vec_ranked AS (
    SELECT v.key, 1 - v.dist AS sim, row_number() OVER (ORDER BY v.dist) AS rank FROM vec v
  ), fts AS (
    SELECT m.key, row_number() OVER (ORDER BY ts_rank_cd(m.search_tsv, tsq) DESC) AS rank
    FROM mycelium.memories m
    WHERE tsq IS NOT NULL AND m.room = p_room AND m.search_tsv @@ tsq
      AND (p_tags IS NULL OR m.tags @> p_tags)
    ORDER BY ts_rank_cd(m.search_tsv, tsq) DESC
    LIMIT k
  ), fused AS (
    SELECT coalesce(v.key, f.key) AS key, v.sim,
           coalesce(1.0 / (60 + v.rank), 0) + coalesce(1.0 / (60 + f.rank), 0) AS score
    FROM vec_ranked v FULL JOIN fts f ON f.key = v.key
  )
  SELECT f.key,
         coalesce(f.sim, 1 - (m.embedding <=> p_query_embedding))::double precision,
         f.score::double precision
  FROM fused f JOIN mycelium.memories m ON m.room = p_room AND m.key = f.key
  WHERE coalesce(p_min_similarity, 0) <= 0
     OR coalesce(f.sim, 1 - (m.embedding <=> p_query_embedding)) >= p_min_similarity
  ORDER BY f.score DESC, f.key
  LIMIT p_limit;
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Followers of the change outbox (the markdown mirror): a stored position per follower, and
-- pruning of what every follower has passed.

CREATE OR REPLACE FUNCTION mycelium.register_follower(p_name text) RETURNS mycelium.followers
LANGUAGE plpgsql AS $$
DECLARE r mycelium.followers;
BEGIN
  INSERT INTO mycelium.followers (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
  SELECT * INTO r FROM mycelium.followers WHERE name = p_name;
  RETURN r;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.advance_follower(p_name text, p_tx xid8, p_seq bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE oldest record;
BEGIN
  UPDATE mycelium.followers SET tx = p_tx, seq = p_seq, updated_at = now()
  WHERE name = p_name AND (tx, seq) < (p_tx, p_seq);
  SELECT tx, seq INTO oldest FROM mycelium.followers ORDER BY tx, seq LIMIT 1;
  DELETE FROM mycelium.changes WHERE (tx, seq) <= (oldest.tx, oldest.seq);
END
$$;
-- Links between memories: myc:// URIs, [[wikilinks]], ![[transclusions]] and typed relations in
-- frontmatter, parsed by the database on every write (trigger), so a link index can never drift
-- from the memories it describes, whoever wrote them.
--
--   myc://decisions/db                a URI, bare in prose or as [label](myc://decisions/db)
--   [[decisions/db]]                  the same edge, shorter
--   [[decisions/db#trade-offs|why]]   a section anchor and a label
--   ![[glossary/vector-store]]        transclusion: the target's text pulled in on /links/expand
--   supersedes: decisions/db-v1       frontmatter relations (supersedes, superseded-by, depends-on,
--                                     part-of, relates-to): a key, a myc:// URI, or a list of them
--
-- What is stored is only what the text says (memory_links, memory_anchors). Whether a link resolves
-- is decided when it is read (view link_edges), so a target written later resolves the link with no
-- rewrite of the source. Errors: cross_room, not_found, no_anchor, not_expandable.
--
-- One parser, used for both the index and the expansion: the stored `pos` of a transclusion is where
-- /links/expand splices the target's text in, so what counts as a marker is defined once, here.

-- ---------------------------------------------------------------------------------------------
-- Derived tables (written only by derive_links; a direct write is refused).

-- The relation keys of frontmatter, in the order their edges are listed.
CREATE OR REPLACE FUNCTION mycelium.link_relations() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY['supersedes', 'superseded-by', 'depends-on', 'part-of', 'relates-to']
$$;


-- ---------------------------------------------------------------------------------------------
-- The parser (pure functions: callable from psql to see what a text would link to).

-- A heading or an anchor as a URL fragment, GitHub-style: lower case, punctuation dropped, runs of
-- spaces become one hyphen ("Trade Offs" -> "trade-offs", "Why? (v2)" -> "why-v2", "Über" -> "über").
-- ASCII text (the common case) takes string functions; other text takes regular expressions with
-- the first Unicode-aware collation the server has (builtin pg_c_utf8 from PostgreSQL 17, else libc
-- C.utf8), so letters are Unicode letters whatever the database's locale; without one, non-ASCII
-- letters are dropped like punctuation. Both ways give the same slug for ASCII text.
DO $slug$
DECLARE
  coll text;
BEGIN
  SELECT format('COLLATE %I.%I', n.nspname, c.collname) INTO coll
  FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace
  WHERE c.collname IN ('pg_c_utf8', 'C.utf8', 'C.UTF-8')
    AND c.collencoding IN (-1, (SELECT encoding FROM pg_database WHERE datname = current_database()))
  ORDER BY array_position(ARRAY['pg_c_utf8', 'C.utf8', 'C.UTF-8'], c.collname::text)
  LIMIT 1;
  EXECUTE format($fn$
    CREATE OR REPLACE FUNCTION mycelium.link_slug(p_text text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT CASE WHEN octet_length(p_text) = length(p_text) THEN
        -- whitespace becomes a space, other punctuation and control characters go, spaces join by "-"
        btrim(array_to_string(array_remove(string_to_array(translate(lower(p_text),
          E'\t\n\v\f\r!"#$%%&''()*+,./:;<=>?@[\\]^`{|}~' || %L, '     '), ' '), ''), '-'), '-')
      ELSE
        btrim(regexp_replace(regexp_replace(lower(btrim(p_text) %s), '[^[:alnum:][:space:]_-]', '', 'g'),
                             '[[:space:]]+', '-', 'g'), '-')
      END
    $$ $fn$,
    (SELECT string_agg(chr(c), '') FROM generate_series(1, 31) c WHERE c NOT BETWEEN 9 AND 13) || chr(127),
    coalesce(coll, ''));
END
$slug$;


-- A link target as a memory key: no myc:// scheme, no leading "/" or "./", no trailing ".md" or "/".
-- (String functions, not regular expressions: this runs for every link of every write.)
CREATE OR REPLACE FUNCTION mycelium.link_key(p_ref text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  k text := btrim(p_ref);
BEGIN
  IF starts_with(k, 'myc://') THEN
    k := substr(k, 7);
  END IF;
  WHILE starts_with(k, '/') OR starts_with(k, './') LOOP
    k := ltrim(substr(k, 2), '/');
  END LOOP;
  k := rtrim(k, '/');
  IF right(k, 3) = '.md' THEN
    k := rtrim(left(k, -3), '/');
  END IF;
  RETURN k;
END
$$;


-- The text with every code region blanked (same length, newlines kept) so that links and headings
-- inside code are not seen, and every position still points into the original text. The blank is
-- U+0001, a character no link can contain, so a link found in the blanked text reads the same in the
-- original. Fences: a line of ``` or ~~~ (3 or more, up to 3 spaces in) opens a block that a line of
-- at least as many of the same character closes (an unclosed fence runs to the end). Inline code: a
-- run of N backticks up to the next run of exactly N on the same line. Linear in the text's length:
-- each line is cut once into its backtick runs, and each run's partner is found by one backward scan.
-- String functions only: a regular expression per line would cost more than the rest together.
CREATE OR REPLACE FUNCTION mycelium.link_code_mask(p_body text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  blank constant text := chr(1);
  lines text[];
  line text;
  t text;
  fence_char text;
  fence_len integer;
  run integer;
  pieces text[];
  runs integer[];
  gaps text[];
  partner integer[];
  last_at integer[];
  parts text[];
  k integer;
  j integer;
  c integer;
  span integer;
BEGIN
  IF p_body IS NULL OR (strpos(p_body, '`') = 0 AND strpos(p_body, '~~~') = 0) THEN
    RETURN p_body;
  END IF;
  lines := string_to_array(p_body, E'\n');
  FOR i IN 1 .. coalesce(array_length(lines, 1), 0) LOOP
    line := lines[i];
    CONTINUE WHEN fence_char IS NULL AND strpos(line, '`') = 0 AND strpos(line, '~~~') = 0;
    t := ltrim(line, ' ');
    run := CASE WHEN length(line) - length(t) <= 3 AND left(t, 1) IN ('`', '~')
                THEN length(t) - length(ltrim(t, left(t, 1))) ELSE 0 END;
    IF fence_char IS NOT NULL THEN  -- inside a block: blank it; a long enough bare fence closes it
      lines[i] := repeat(blank, length(line));
      IF left(t, 1) = fence_char AND run >= fence_len AND btrim(substr(t, run + 1), E' \t\r') = '' THEN
        fence_char := NULL;
      END IF;
      CONTINUE;
    END IF;
    IF run >= 3 AND NOT (left(t, 1) = '`' AND strpos(substr(t, run + 1), '`') > 0) THEN
      fence_char := left(t, 1);  -- an opening fence (a backtick fence's info string has no backtick)
      fence_len := run;
      lines[i] := repeat(blank, length(line));
      CONTINUE;
    END IF;
    CONTINUE WHEN strpos(line, '`') = 0;
    -- the line as gaps and maximal backtick runs: gaps[1] runs[1] gaps[2] ... runs[k] gaps[k+1]
    pieces := string_to_array(line, '`');
    gaps := ARRAY[pieces[1]];
    runs := '{}';
    run := 0;
    FOR x IN 2 .. array_length(pieces, 1) LOOP
      run := run + 1;
      IF pieces[x] <> '' OR x = array_length(pieces, 1) THEN
        runs := array_append(runs, run);
        gaps := array_append(gaps, pieces[x]);
        run := 0;
      END IF;
    END LOOP;
    k := array_length(runs, 1);
    partner := array_fill(NULL::integer, ARRAY[k]);
    last_at := '{}';
    FOR x IN REVERSE k .. 1 LOOP  -- partner[x]: the next run as long as run x
      partner[x] := last_at[runs[x]];
      last_at[runs[x]] := x;
    END LOOP;
    parts := ARRAY[gaps[1]];
    j := 1;
    WHILE j <= k LOOP
      c := partner[j];
      IF c IS NULL THEN  -- no closing run: the backticks are literal
        parts := array_append(parts, repeat('`', runs[j]));
        parts := array_append(parts, gaps[j + 1]);
        j := j + 1;
      ELSE
        span := 0;
        FOR x IN j .. c LOOP
          span := span + runs[x] + CASE WHEN x > j THEN length(gaps[x]) ELSE 0 END;
        END LOOP;
        parts := array_append(parts, repeat(blank, span));
        parts := array_append(parts, gaps[c + 1]);
        j := c + 1;
      END IF;
    END LOOP;
    lines[i] := array_to_string(parts, '');
  END LOOP;
  RETURN array_to_string(lines, E'\n');
END
$$;


-- What a link body (the inside of [[...]], a URI, a relation value) points at, or NULL target when
-- it is not a link: blank, a directive ("[[word: ...]]" - a word, a colon and a space, as in
-- "[[mycelium: stance=accept]]"), or nothing left after normalising. "key#anchor|label".
-- myc://rooms/<room>/<key> names another room (cross_room); naming this room is a plain edge.
CREATE OR REPLACE FUNCTION mycelium.link_ref(
  p_room text, p_ref text,
  OUT target text, OUT anchor text, OUT label text, OUT cross_room text
) LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  inner_text text := btrim(coalesce(p_ref, ''), E' \t\r\n');
  bar integer;
  hash integer;
  m text[];
BEGIN
  IF inner_text = '' OR (strpos(inner_text, ':') > 0 AND (inner_text ~ '^[A-Za-z][A-Za-z0-9_-]*:[[:space:]]'
                                                           OR inner_text ~* '^mycelium[[:space:]]*:')) THEN
    RETURN;
  END IF;
  bar := strpos(inner_text, '|');
  IF bar > 0 THEN
    label := nullif(btrim(substr(inner_text, bar + 1)), '');
    inner_text := left(inner_text, bar - 1);
  END IF;
  hash := strpos(inner_text, '#');
  IF hash > 0 THEN
    anchor := nullif(mycelium.link_slug(substr(inner_text, hash + 1)), '');
    inner_text := left(inner_text, hash - 1);
  END IF;
  target := nullif(mycelium.link_key(inner_text), '');
  IF target IS NULL THEN
    anchor := NULL;
    label := NULL;
    RETURN;
  END IF;
  m := CASE WHEN starts_with(target, 'rooms/') THEN regexp_match(target, '^rooms/([^/]+)(/(.+))?$') END;
  IF m IS NOT NULL THEN
    IF m[1] = p_room AND m[3] IS NOT NULL THEN
      target := m[3];
    ELSE
      cross_room := m[1];
    END IF;
  END IF;
END
$$;


-- The one pattern for a link in text, tried left to right (leftmost match wins, so a URI inside a
-- wikilink or a markdown link is part of that one edge):
--   ![[...]] or [[...]]            (no brackets, newline or code inside)
--   [label](myc://...)
--   myc://...                      (a bare URI: runs to whitespace or a bracket or quote)
CREATE OR REPLACE FUNCTION mycelium.link_pattern() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $re$
  SELECT '!?\[\[[^][\n\u0001]*\]\]'
      || '|\[[^][\n\u0001]*\]\(myc://[^()[:space:]\u0001]*\)'
      || '|myc://[^][()<>"''`[:space:]\u0001]*'
$re$;


-- The links of a text whose code is already blanked (p_masked = link_code_mask(body)): body links
-- in text order, then frontmatter relations. One regex pass finds the matches; splitting on the same
-- pattern gives the text between them, and the running length of both is where each match starts.
-- A match holds no blanked character, so it is also the original text at that place.
CREATE OR REPLACE FUNCTION mycelium.parse_masked_links(p_room text, p_masked text, p_meta jsonb)
RETURNS TABLE (ord integer, target text, kind text, anchor text, label text, relation text,
               raw text, cross_room text, pos integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  WITH tokens AS (
    SELECT m[1] AS tok, n FROM regexp_matches(p_masked, mycelium.link_pattern(), 'g') WITH ORDINALITY AS t(m, n)
  ), gaps AS (
    SELECT g, n FROM regexp_split_to_table(p_masked, mycelium.link_pattern()) WITH ORDINALITY AS s(g, n)
  ), placed AS (
    SELECT t.n, t.tok,
           (sum(length(g.g) + length(t.tok)) OVER (ORDER BY t.n) - length(t.tok) + 1)::integer AS pos
    FROM tokens t JOIN gaps g ON g.n = t.n
  ), read AS (
    SELECT p.n, p.pos, c.kind, c.ref, c.md_label,
           CASE WHEN c.kind = 'uri' AND NOT starts_with(p.tok, '[') THEN c.ref ELSE p.tok END AS raw
    FROM placed p CROSS JOIN LATERAL (
      SELECT CASE WHEN starts_with(p.tok, '![[') THEN 'transclusion'
                  WHEN starts_with(p.tok, '[[') THEN 'wikilink' ELSE 'uri' END AS kind,
             CASE WHEN starts_with(p.tok, '![[') THEN substr(p.tok, 4, length(p.tok) - 5)
                  WHEN starts_with(p.tok, '[[') THEN substr(p.tok, 3, length(p.tok) - 4)
                  WHEN starts_with(p.tok, '[') THEN substring(p.tok FROM '\]\((.*)\)$')
                  ELSE rtrim(p.tok, '.,;:!?')  -- a sentence ends, and the URI with it
             END AS ref,
             CASE WHEN starts_with(p.tok, '[') AND NOT starts_with(p.tok, '[[')
                  THEN nullif(btrim(substring(p.tok FROM '^\[(.*)\]\(')), '') END AS md_label
    ) c
  ), links AS (
    SELECT 1 AS part, r.n AS n1, 0::bigint AS n2, r.kind, l.target, l.anchor,
           coalesce(l.label, r.md_label) AS label, NULL::text AS relation,
           r.raw, l.cross_room, r.pos
    FROM read r CROSS JOIN LATERAL mycelium.link_ref(p_room, r.ref) l
    WHERE l.target IS NOT NULL AND (r.kind <> 'uri' OR length(r.ref) > length('myc://'))
    UNION ALL
    SELECT 2, k.n, e.n, 'relation', l.target, l.anchor, l.label, k.rel, k.rel || ': ' || (e.v #>> '{}'),
           l.cross_room, NULL
    FROM unnest(mycelium.link_relations()) WITH ORDINALITY AS k(rel, n)
    CROSS JOIN LATERAL jsonb_array_elements(
      CASE jsonb_typeof(p_meta -> k.rel) WHEN 'array' THEN p_meta -> k.rel
                                         WHEN 'string' THEN jsonb_build_array(p_meta -> k.rel)
                                         ELSE '[]' END) WITH ORDINALITY AS e(v, n)
    CROSS JOIN LATERAL mycelium.link_ref(p_room, e.v #>> '{}') l
    WHERE jsonb_typeof(p_meta) = 'object' AND jsonb_typeof(e.v) = 'string' AND l.target IS NOT NULL
  )
  SELECT (row_number() OVER (ORDER BY part, n1, n2))::integer, target, kind, anchor, label, relation, raw,
         cross_room, pos
  FROM links
  ORDER BY part, n1, n2
$$;


-- Every link a memory makes, in text order: body links first (pos = where raw starts in the body),
-- then frontmatter relations. Code (fenced or inline) is never parsed.
CREATE OR REPLACE FUNCTION mycelium.parse_links(p_room text, p_body text, p_meta jsonb DEFAULT '{}')
RETURNS TABLE (ord integer, target text, kind text, anchor text, label text, relation text,
               raw text, cross_room text, pos integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT * FROM mycelium.parse_masked_links(p_room, mycelium.link_code_mask(p_body), p_meta)
$$;


-- The headings of a text whose code is blanked, in order: line number, level and anchor slug
-- (the heading's own text, closing #s dropped). A repeated slug gets "-1", "-2", ... as on GitHub;
-- an empty heading has slug '' (it has no anchor, but it still ends a section). Slugs are unique: a
-- heading whose slug an earlier one already took (literally "Foo 1" and a second "Foo") has none.
CREATE OR REPLACE FUNCTION mycelium.masked_outline(p_body text, p_masked text)
RETURNS TABLE (line integer, level integer, slug text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  WITH candidates AS (  -- lines starting with "#" after at most 3 spaces (string functions only)
    SELECT x.n::integer AS line, x.orig, length(x.masked) - length(ltrim(x.masked, ' ')) AS indent,
           ltrim(x.masked, ' ') AS t
    FROM unnest(string_to_array(p_body, E'\n'), string_to_array(p_masked, E'\n'))
         WITH ORDINALITY AS x(orig, masked, n)
    WHERE strpos(p_body, '#') > 0 AND starts_with(ltrim(x.masked, ' '), '#')
  ), heads AS (  -- 1 to 6 "#" then a space, a tab or the end: the text after them, trimmed
    SELECT c.line, c.level, btrim(substr(c.orig, c.indent + c.level + 1), E' \t\r') AS text
    FROM (SELECT candidates.*, length(t) - length(ltrim(t, '#')) AS level FROM candidates) c
    WHERE c.indent <= 3 AND c.level <= 6 AND substr(c.t, c.level + 1, 1) IN ('', ' ', E'\t', E'\r')
  ), titled AS (  -- without a closing run of "#" (one preceded by a space, or the whole text)
    SELECT h.line, h.level,
           mycelium.link_slug(CASE WHEN rtrim(h.text, '#') = '' THEN ''
                                   WHEN right(rtrim(h.text, '#'), 1) IN (' ', E'\t')
                                     THEN rtrim(rtrim(h.text, '#'), E' \t')
                                   ELSE h.text END) AS base
    FROM heads h
  ), numbered AS (
    SELECT t.line, t.level,
           CASE WHEN t.base = '' OR t.dup = 0 THEN t.base ELSE t.base || '-' || t.dup END AS slug
    FROM (SELECT titled.*, row_number() OVER (PARTITION BY base ORDER BY line) - 1 AS dup FROM titled) t
  )
  SELECT line, level, CASE WHEN row_number() OVER (PARTITION BY slug ORDER BY line) = 1 THEN slug ELSE '' END
  FROM numbered
  ORDER BY line
$$;


CREATE OR REPLACE FUNCTION mycelium.memory_outline(p_body text)
RETURNS TABLE (line integer, level integer, slug text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT * FROM mycelium.masked_outline(p_body, mycelium.link_code_mask(p_body))
$$;


-- The text under a heading: from the line after it up to the next heading of the same or a higher
-- level, trimmed. NULL anchor: the whole text, trimmed. NULL when there is no such anchor.
CREATE OR REPLACE FUNCTION mycelium.memory_section(p_body text, p_anchor text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  start integer;
  stop integer;
  lines text[];
BEGIN
  IF p_anchor IS NULL THEN
    RETURN btrim(p_body, E' \t\r\n');
  END IF;
  WITH o AS MATERIALIZED (SELECT * FROM mycelium.memory_outline(p_body))
  SELECT h.line, (SELECT min(o.line) FROM o WHERE o.line > h.line AND o.level <= h.level)
  INTO start, stop
  FROM o h WHERE h.slug = p_anchor;
  IF start IS NULL THEN
    RETURN NULL;
  END IF;
  lines := string_to_array(p_body, E'\n');
  RETURN btrim(array_to_string(lines[start + 1 : coalesce(stop - 1, array_length(lines, 1))], E'\n'),
               E' \t\r\n');
END
$$;


-- Transclusion is opt-in on the target: frontmatter expandable: true (the boolean, nothing else).
CREATE OR REPLACE FUNCTION mycelium.is_expandable(p_meta jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(p_meta -> 'expandable' = 'true'::jsonb, false)
$$;


-- ---------------------------------------------------------------------------------------------
-- Derivation: the trigger on memories, and a rebuild for when the parser itself changes.

-- Replace one memory's links and anchors with what its current text says. It reads the text itself,
-- so no caller (the hub's role may execute it) can make the index say anything else.
CREATE OR REPLACE FUNCTION mycelium.derive_links(p_room text, p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  m record;
  masked text;
BEGIN
  SELECT room, key, body, meta INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key;
  PERFORM set_config('mycelium.deriving_links', 'on', true);
  DELETE FROM mycelium.memory_links WHERE room = p_room AND source_key = p_key;
  DELETE FROM mycelium.memory_anchors WHERE room = p_room AND key = p_key;
  IF m.key IS NOT NULL THEN
    masked := mycelium.link_code_mask(m.body);
    INSERT INTO mycelium.memory_links (room, source_key, ord, target, kind, anchor, label, relation, raw,
                                       cross_room, pos)
    SELECT m.room, m.key, l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw, l.cross_room, l.pos
    FROM mycelium.parse_masked_links(m.room, masked, m.meta) l;
    INSERT INTO mycelium.memory_anchors (room, key, anchor, level, line)
    SELECT m.room, m.key, o.slug, o.level, o.line
    FROM mycelium.masked_outline(m.body, masked) o WHERE o.slug <> '';
  END IF;
  PERFORM set_config('mycelium.deriving_links', '', true);
END
$$;


-- Whether a text may hold a link or a heading at all: most writes are prose, and skip the parser.
CREATE OR REPLACE FUNCTION mycelium.may_link(p_body text, p_meta jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT strpos(p_body, '[[') > 0 OR strpos(p_body, 'myc://') > 0 OR strpos(p_body, '#') > 0
      OR coalesce(p_meta ?| mycelium.link_relations(), false)
$$;


-- Re-derive when what links are made of changed: the body, or a relation key of the frontmatter
-- (a status field written on a board row changes neither).
CREATE OR REPLACE FUNCTION mycelium.memories_derive_links() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NEW.body IS NOT DISTINCT FROM OLD.body
       AND NOT EXISTS (SELECT 1 FROM unnest(mycelium.link_relations()) r
                       WHERE NEW.meta -> r IS DISTINCT FROM OLD.meta -> r) THEN
      RETURN NULL;
    END IF;
    IF mycelium.may_link(NEW.body, NEW.meta) OR mycelium.may_link(OLD.body, OLD.meta) THEN
      PERFORM mycelium.derive_links(NEW.room, NEW.key);
    END IF;
  ELSIF mycelium.may_link(NEW.body, NEW.meta) THEN
    PERFORM mycelium.derive_links(NEW.room, NEW.key);
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memories_derive_links_on_insert AFTER INSERT ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_derive_links();

CREATE OR REPLACE TRIGGER memories_derive_links_on_update AFTER UPDATE ON mycelium.memories
  FOR EACH ROW WHEN (OLD.value IS DISTINCT FROM NEW.value OR OLD.meta IS DISTINCT FROM NEW.meta)
  EXECUTE FUNCTION mycelium.memories_derive_links();


-- The link tables say only what the memories say: rows arrive and leave through derive_links, or
-- leave with their memory (the foreign key's cascade, which runs inside the delete's own trigger).
-- Checked once per statement, so a write with many links pays for it once.
CREATE OR REPLACE FUNCTION mycelium.refuse_link_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('mycelium.deriving_links', true) = 'on'
     OR (TG_OP = 'DELETE' AND pg_trigger_depth() > 1) THEN
    RETURN NULL;
  END IF;
  PERFORM mycelium.refuse(409, 'derived_table',
    format('%s is derived from the memories'' text: write the memory instead (%s refused)',
           TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memory_links_derived BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON mycelium.memory_links
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_link_write();

CREATE OR REPLACE TRIGGER memory_anchors_derived BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON mycelium.memory_anchors
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_link_write();


-- Re-derive every memory's links (one room, or all): run it after a change to the parser.
CREATE OR REPLACE FUNCTION mycelium.rebuild_links(p_room text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  m record;
  n integer := 0;
BEGIN
  FOR m IN SELECT room, key FROM mycelium.memories WHERE p_room IS NULL OR room = p_room LOOP
    PERFORM mycelium.derive_links(m.room, m.key);
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;


-- The auditor's check that the index says what the memories say: every memory (of one room, or
-- all) whose stored links or anchors differ from a fresh parse of its text. Always empty, unless
-- someone went around the triggers.
CREATE OR REPLACE FUNCTION mycelium.link_drift(p_room text DEFAULT NULL) RETURNS TABLE (room text, key text)
LANGUAGE sql STABLE AS $$
  SELECT m.room, m.key
  FROM mycelium.memories m
  WHERE (p_room IS NULL OR m.room = p_room)
    AND (ARRAY(SELECT row(l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw, l.cross_room, l.pos)::text
               FROM mycelium.memory_links l WHERE l.room = m.room AND l.source_key = m.key ORDER BY l.ord)
         IS DISTINCT FROM
         ARRAY(SELECT row(p.ord, p.target, p.kind, p.anchor, p.label, p.relation, p.raw, p.cross_room, p.pos)::text
               FROM mycelium.parse_links(m.room, m.body, m.meta) p ORDER BY p.ord)
      OR ARRAY(SELECT row(a.anchor, a.level, a.line)::text
               FROM mycelium.memory_anchors a WHERE a.room = m.room AND a.key = m.key ORDER BY a.line)
         IS DISTINCT FROM
         ARRAY(SELECT row(o.slug, o.level, o.line)::text
               FROM mycelium.memory_outline(m.body) o WHERE o.slug <> '' ORDER BY o.line))
  ORDER BY m.room, m.key
$$;


-- ---------------------------------------------------------------------------------------------
-- Reading: links resolved against the room as it is now.

CREATE OR REPLACE VIEW mycelium.link_edges AS
SELECT l.room, l.source_key, l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw,
       l.cross_room, l.pos, e.error, e.error IS NULL AS resolved
FROM mycelium.memory_links l
LEFT JOIN mycelium.memories t ON t.room = l.room AND t.key = l.target AND l.cross_room IS NULL
CROSS JOIN LATERAL (
  SELECT CASE
    WHEN l.cross_room IS NOT NULL THEN 'cross_room'
    WHEN t.key IS NULL THEN 'not_found'
    WHEN l.anchor IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM mycelium.memory_anchors a
      WHERE a.room = l.room AND a.key = l.target AND a.anchor = l.anchor) THEN 'no_anchor'
    WHEN l.kind = 'transclusion' AND NOT mycelium.is_expandable(t.meta) THEN 'not_expandable'
  END AS error
) e;

COMMENT ON VIEW mycelium.link_edges IS
  'memory_links resolved now: error is cross_room, not_found, no_anchor, not_expandable or NULL (resolved).';


CREATE OR REPLACE FUNCTION mycelium.link_json(e mycelium.link_edges, p_with_source boolean DEFAULT true) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('target', e.target, 'kind', e.kind, 'anchor', e.anchor, 'label', e.label,
                            'relation', e.relation, 'raw', e.raw, 'cross_room', e.cross_room,
                            'resolved', e.resolved, 'error', e.error)
         || CASE WHEN p_with_source THEN jsonb_build_object('source', e.source_key) ELSE '{}' END
$$;


-- One memory's links both ways: what it points at (in text order) and what points at it from
-- other memories of the room (cross-room links never do).
CREATE OR REPLACE FUNCTION mycelium.memory_links_of(p_room text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN jsonb_build_object(
    'key', p_key,
    'found', EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = p_key),
    'outbound', coalesce((SELECT jsonb_agg(mycelium.link_json(e, false) ORDER BY e.ord)
                          FROM mycelium.link_edges e WHERE e.room = p_room AND e.source_key = p_key), '[]'),
    'backlinks', coalesce((SELECT jsonb_agg(mycelium.link_json(e) ORDER BY e.source_key, e.ord)
                           FROM mycelium.link_edges e
                           WHERE e.room = p_room AND e.target = p_key AND e.cross_room IS NULL
                             AND e.source_key <> p_key), '[]'));
END
$$;


-- The room's link graph: a node per memory (outbound = its links that stay in the room, inbound =
-- resolved links pointing at it), an edge per link. json, not jsonb: built once and sent as it is.
CREATE OR REPLACE FUNCTION mycelium.link_graph(p_room text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN (
    WITH edges AS MATERIALIZED (SELECT * FROM mycelium.link_edges WHERE room = p_room),
    outs AS (SELECT source_key AS key, count(*) FILTER (WHERE cross_room IS NULL) AS n
             FROM edges GROUP BY source_key),
    ins AS (SELECT target AS key, count(*) AS n FROM edges WHERE resolved GROUP BY target)
    SELECT json_build_object(
      'nodes', coalesce((
        SELECT json_agg(json_build_object('key', m.key, 'expandable', mycelium.is_expandable(m.meta),
                                          'outbound', coalesce(o.n, 0), 'inbound', coalesce(i.n, 0))
                        ORDER BY m.key)
        FROM mycelium.memories m
        LEFT JOIN outs o ON o.key = m.key LEFT JOIN ins i ON i.key = m.key
        WHERE m.room = p_room), '[]'),
      'edges', coalesce((
        SELECT json_agg(json_build_object('source', e.source_key, 'target', e.target, 'kind', e.kind,
                                          'anchor', e.anchor, 'relation', e.relation,
                                          'cross_room', e.cross_room, 'resolved', e.resolved,
                                          'error', e.error)
                        ORDER BY e.source_key, e.ord)
        FROM edges e), '[]'))
  );
END
$$;


-- Broken links, and the memories no resolved link reaches: orphans (nothing in, nothing out),
-- roots (nothing in, links out) and leaves (links in, nothing out).
CREATE OR REPLACE FUNCTION mycelium.link_integrity(p_room text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN (
    WITH edges AS MATERIALIZED (SELECT * FROM mycelium.link_edges WHERE room = p_room),
    degree AS (
      SELECT m.key,
             EXISTS (SELECT 1 FROM edges e WHERE e.target = m.key AND e.resolved) AS has_in,
             EXISTS (SELECT 1 FROM edges e WHERE e.source_key = m.key) AS has_out
      FROM mycelium.memories m WHERE m.room = p_room
    )
    SELECT json_build_object(
      'broken', coalesce((
        SELECT json_agg(json_build_object('source', e.source_key, 'target', e.target, 'kind', e.kind,
                                          'anchor', e.anchor, 'label', e.label, 'relation', e.relation,
                                          'raw', e.raw, 'cross_room', e.cross_room, 'resolved', e.resolved,
                                          'error', e.error)
                        ORDER BY e.source_key, e.ord)
        FROM edges e WHERE NOT e.resolved), '[]'),
      'orphans', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE NOT has_in AND NOT has_out), '[]'),
      'roots', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE NOT has_in AND has_out), '[]'),
      'leaves', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE has_in AND NOT has_out), '[]'),
      'total_memories', (SELECT count(*) FROM degree),
      'total_links', (SELECT count(*) FROM edges))
  );
END
$$;


-- A memory's body with each ![[...]] replaced by the target's text (or the #anchor section of it).
-- Depth 1: pulled text goes in as it is, markers inside it stay literal, so cycles cannot happen.
-- A marker that cannot be expanded stays exactly as written and is reported with its error. The
-- text is cut once at every ![[...]]; the ones the index holds (by position) are the transclusions,
-- the others (in code, degenerate, directives) stay as they are.
CREATE OR REPLACE FUNCTION mycelium.expand_memory(p_room text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  marker constant text := '!\[\[[^][\n\u0001]*\]\]';
  src text;
  result jsonb;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT m.body INTO src FROM mycelium.memories m WHERE m.room = p_room AND m.key = p_key;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('key', p_key, 'rendered', '', 'expansions', '[]'::jsonb, 'found', false);
  END IF;
  WITH cut AS (
    SELECT g.n, g.before, x.m[1] AS marker,
           (sum(length(g.before) + coalesce(length(x.m[1]), 0)) OVER (ORDER BY g.n)
            - coalesce(length(x.m[1]), 0) + 1)::integer AS pos
    FROM regexp_split_to_table(src, marker) WITH ORDINALITY AS g(before, n)
    LEFT JOIN regexp_matches(src, marker, 'g') WITH ORDINALITY AS x(m, n) ON x.n = g.n
  ), pieces AS (
    SELECT c.n, c.before, c.marker, l.target, l.anchor, l.error,
           CASE WHEN l.resolved THEN mycelium.memory_section(t.body, l.anchor) END AS pulled
    FROM cut c
    LEFT JOIN mycelium.link_edges l
      ON l.room = p_room AND l.source_key = p_key AND l.kind = 'transclusion' AND l.pos = c.pos
    LEFT JOIN mycelium.memories t ON t.room = p_room AND t.key = l.target AND l.resolved
  )
  SELECT jsonb_build_object(
    'key', p_key,
    'rendered', string_agg(p.before || coalesce(p.pulled, p.marker, ''), '' ORDER BY p.n),
    'expansions', coalesce(jsonb_agg(jsonb_build_object(
        'target', p.target, 'anchor', p.anchor, 'raw', p.marker, 'expanded', p.pulled IS NOT NULL,
        'error', CASE WHEN p.pulled IS NULL THEN coalesce(p.error, 'no_anchor') END) ORDER BY p.n)
      FILTER (WHERE p.target IS NOT NULL), '[]'),
    'found', true)
  INTO result
  FROM pieces p;
  RETURN result;
END
$$;
-- The transition ledger: a tool call's side effect happens once.
--
-- One row per transition (a tool call or a task, identified by request_id). The database decides
-- every redispatch under the row lock, on its own clock:
--   * claim_transition() locks the row, evaluates the complete gate (contracts/transition-gates.json)
--     and acts on it in the same transaction: claim, return, poll, reconcile, soft- or hard-block;
--   * every mutator compares and swaps on owner + fence and refuses with a clear error when it lost;
--   * the fence only grows; within one fence the side-effect boundary only moves forward; a terminal
--     outcome is left only through the resolution verbs (a fresh claim, release, reconcile), and a
--     COMPLETED transition is final. A direct INSERT/UPDATE/DELETE from psql is refused: the verbs
--     mark their transaction (GUC mycelium.transition_verb) and the guard trigger checks it.
--   * EXPIRED is never stored: it is an IN_FLIGHT row whose lease_until has passed (database clock).

-- ---------------------------------------------------------------------------------------------
-- Closed sets and per-class defaults (runtime.md §3).

CREATE OR REPLACE FUNCTION mycelium.side_effect_class(p text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE lower(btrim(p))
    WHEN 'read' THEN 'read' WHEN 'read_only' THEN 'read'
    WHEN 'idempotent_mutate' THEN 'idempotent_mutate' WHEN 'idempotent_write' THEN 'idempotent_mutate'
    WHEN 'keyed_mutate' THEN 'keyed_mutate' WHEN 'external_api_mutation' THEN 'keyed_mutate'
    WHEN 'non_idempotent_mutate' THEN 'non_idempotent_mutate'
    WHEN 'non_idempotent_write' THEN 'non_idempotent_mutate' WHEN 'payment' THEN 'non_idempotent_mutate'
    WHEN 'email' THEN 'non_idempotent_mutate' WHEN 'subagent' THEN 'non_idempotent_mutate'
    WHEN 'irreversible' THEN 'irreversible' WHEN 'onchain_action' THEN 'irreversible'
  END
$$;

COMMENT ON FUNCTION mycelium.side_effect_class(text) IS
  'The canonical side-effect class of a class name or legacy alias; NULL when unknown.';


CREATE OR REPLACE FUNCTION mycelium.default_retry_permission(p_class text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE p_class
    WHEN 'read' THEN 'safe_retry' WHEN 'idempotent_mutate' THEN 'safe_retry'
    WHEN 'keyed_mutate' THEN 'retry_only_with_same_provider_idempotency_key'
    WHEN 'non_idempotent_mutate' THEN 'manual_reconciliation_required'
    WHEN 'irreversible' THEN 'never_retry_automatically'
  END
$$;


CREATE OR REPLACE FUNCTION mycelium.default_spendability(p_class text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE p_class
    WHEN 'read' THEN 'multi_use' WHEN 'idempotent_mutate' THEN 'multi_use'
    WHEN 'keyed_mutate' THEN 'single_use' WHEN 'non_idempotent_mutate' THEN 'single_use'
    WHEN 'irreversible' THEN 'non_replayable'
  END
$$;


-- The loosest capability a tool of this class can honestly claim, given its mechanisms.
CREATE OR REPLACE FUNCTION mycelium.capability_floor(p_class text, p_key_param boolean, p_reconciler boolean)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_class IN ('read', 'idempotent_mutate') THEN 'idempotent'
    WHEN p_class = 'keyed_mutate' AND (p_key_param OR p_reconciler) THEN 'queryable'
    WHEN p_class = 'non_idempotent_mutate' AND p_reconciler THEN 'queryable'
    ELSE 'blind'
  END
$$;


CREATE OR REPLACE FUNCTION mycelium.boundary_rank(p text) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE p WHEN 'not_crossed' THEN 0 WHEN 'maybe_crossed' THEN 1 WHEN 'crossed' THEN 2 END
$$;


-- ---------------------------------------------------------------------------------------------
-- Guard: only the verbs write, the fence only grows, the boundary only moves forward within a
-- fence, a terminal outcome is left only by a fresh claim or a resolution verb, COMPLETED is final.
-- It also holds the row's consistency rules (where an outcome stands says what must (not) be on the
-- row), raised as a check violation (23514) naming the rule: as a table CHECK they were read back
-- from the catalog and planned again by every INSERT and UPDATE statement, and the row passed to a
-- function as a composite; the trigger runs on every write anyway.

CREATE OR REPLACE FUNCTION mycelium.transition_verb() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT coalesce(current_setting('mycelium.transition_verb', true), '')
$$;


CREATE OR REPLACE FUNCTION mycelium.transitions_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  verb text;
  released boolean;
  lane smallint;  -- NULL: the receipts' trigger takes the request id's lane
BEGIN
  -- (every expression evaluated here is compiled again in every transaction, a few microseconds each:
  -- the common writes, a claim's insert and an update within one in-flight fence that sets updated_at
  -- (complete), pass one test each; the rest go rule by rule)
  IF TG_OP = 'UPDATE' THEN
    IF mycelium.transition_verb() = '' OR NEW.fence <> OLD.fence OR OLD.terminal_outcome <> 'IN_FLIGHT'
       OR NEW.request_id <> OLD.request_id OR NEW.created_at <> OLD.created_at OR NEW.kind <> OLD.kind
       OR mycelium.boundary_rank(NEW.side_effect_boundary) < mycelium.boundary_rank(OLD.side_effect_boundary)
       OR NEW.updated_at <> now() THEN
      verb := mycelium.transition_verb();
      IF verb = '' THEN
        PERFORM mycelium.refuse(409, 'verbs_only',
          'transitions are written only through the mycelium verbs (claim_transition, complete, '
          'release, ...): a direct UPDATE is refused', jsonb_build_object('operation', TG_OP));
      END IF;
      IF NEW.request_id <> OLD.request_id OR NEW.created_at <> OLD.created_at OR NEW.kind <> OLD.kind THEN
        PERFORM mycelium.refuse(409, 'identity_immutable',
          'a transition''s request id, kind and creation time never change');
      END IF;
      IF NEW.fence < OLD.fence THEN
        PERFORM mycelium.refuse(409, 'fence_regressed',
          format('the fence of %s only grows (%s -> %s refused)', OLD.request_id, OLD.fence, NEW.fence),
          jsonb_build_object('request_id', OLD.request_id, 'fence', OLD.fence));
      END IF;
      IF NEW.fence = OLD.fence
         AND mycelium.boundary_rank(NEW.side_effect_boundary) < mycelium.boundary_rank(OLD.side_effect_boundary) THEN
        PERFORM mycelium.refuse(409, 'boundary_regressed',
          format('the side-effect boundary of %s only moves forward (%s -> %s refused)',
                 OLD.request_id, OLD.side_effect_boundary, NEW.side_effect_boundary),
          jsonb_build_object('request_id', OLD.request_id, 'boundary', OLD.side_effect_boundary));
      END IF;
      IF OLD.terminal_outcome = 'COMPLETED'
         AND (NEW.terminal_outcome <> 'COMPLETED' OR NEW.fence <> OLD.fence
              OR NEW.result IS DISTINCT FROM OLD.result OR NEW.result_text IS DISTINCT FROM OLD.result_text) THEN
        PERFORM mycelium.refuse(409, 'completed_is_final',
          format('%s is COMPLETED: its outcome, fence and result are final', OLD.request_id),
          jsonb_build_object('request_id', OLD.request_id));
      END IF;
      IF OLD.terminal_outcome <> 'IN_FLIGHT' AND NEW.terminal_outcome <> OLD.terminal_outcome THEN
        IF NEW.terminal_outcome = 'IN_FLIGHT' THEN
          IF verb <> 'claim_transition' OR NEW.fence <> OLD.fence + 1 THEN
            PERFORM mycelium.refuse(409, 'terminal_outcome',
              format('%s is %s: only a fresh claim (fence + 1) may reopen it', OLD.request_id,
                     OLD.terminal_outcome),
              jsonb_build_object('request_id', OLD.request_id, 'terminal_outcome', OLD.terminal_outcome));
          END IF;
        ELSIF NOT (NEW.terminal_outcome = 'COMPLETED' AND verb IN ('release', 'apply_reconcile_result')) THEN
          PERFORM mycelium.refuse(409, 'terminal_outcome',
            format('%s is %s: it is left only through release, reconciliation or a fresh claim',
                   OLD.request_id, OLD.terminal_outcome),
            jsonb_build_object('request_id', OLD.request_id, 'terminal_outcome', OLD.terminal_outcome));
        END IF;
      END IF;
      IF NEW.fence > OLD.fence AND verb <> 'claim_transition' THEN
        PERFORM mycelium.refuse(409, 'fence_claim_only', 'only a claim moves the fence');
      END IF;
      NEW.updated_at := now();
    END IF;
    -- a receipt is due when the row becomes terminal or is released: it is appended here, in the
    -- statement that makes the row so, and the row points at it (receipt_ref). The receipt carries the
    -- row as it will be written (this is the only BEFORE trigger, and it has set every column). The lane
    -- is the request id's; a receipt that follows an earlier one of the same attempt (a release after
    -- the outcome: receipt_ref still names it) takes that receipt's lane, so one transition's receipts
    -- share a lane even if the lane count changed in between. A release's receipt (kind release) also
    -- carries who verified it and why; an outcome's leaves those empty. The chain itself is computed by
    -- the receipts' own trigger (receipts.sql), whoever inserts.
    IF (NEW.terminal_outcome <> 'IN_FLIGHT' AND NEW.terminal_outcome <> OLD.terminal_outcome)
       OR (NEW.operator_resolution IS NOT NULL AND NEW.operator_resolution IS DISTINCT FROM OLD.operator_resolution) THEN
      released := NEW.operator_resolution IS NOT NULL AND NEW.operator_resolution IS DISTINCT FROM OLD.operator_resolution;
      IF OLD.receipt_ref IS NOT NULL THEN
        SELECT r.lane INTO lane FROM mycelium.receipts r WHERE r.id = substr(OLD.receipt_ref, 6)::bigint;
      END IF;
      INSERT INTO mycelium.receipts (
        agent_id, lane, seq, kind, action, request_id, transition_key, side_effect_class, policy_version,
        inputs_hash, outputs_hash, outcome, boundary, fence, external_operation_ref, error, verified,
        resolved_by, resolution_reason, started_at, finished_at, hash)
      VALUES (
        NEW.agent_id, lane, 1, CASE WHEN released THEN 'release' ELSE NEW.kind END, NEW.tool,
        NEW.request_id, NEW.transition_key, NEW.side_effect_class, NEW.policy_version, NEW.args_hash,
        CASE WHEN NEW.result IS NOT NULL THEN encode(sha256(convert_to(NEW.result::text, 'UTF8')), 'hex') END,
        NEW.terminal_outcome, NEW.side_effect_boundary, NEW.fence, NEW.external_operation_ref, NEW.error,
        CASE WHEN released THEN NEW.operator_resolution END,
        CASE WHEN released THEN NEW.resolved_by END, CASE WHEN released THEN NEW.resolution_reason END,
        NEW.started_at, NEW.finished_at, '\x')
      RETURNING receipt_id INTO NEW.receipt_ref;
    ELSIF NEW.fence = OLD.fence THEN
      NEW.receipt_ref := OLD.receipt_ref;
    END IF;
  ELSIF TG_OP = 'DELETE' OR mycelium.transition_verb() = '' THEN
    IF mycelium.transition_verb() = '' THEN
      PERFORM mycelium.refuse(409, 'verbs_only',
        format('transitions are written only through the mycelium verbs (claim_transition, complete, '
               'release, ...): a direct %s is refused', TG_OP),
        jsonb_build_object('operation', TG_OP));
    END IF;
    PERFORM mycelium.refuse(409, 'append_only', 'transitions are never deleted');
  ELSIF NEW.fence <> 1 OR NEW.created_at <> now() OR NEW.updated_at <> now() OR NEW.receipt_ref IS NOT NULL THEN
    NEW.fence := 1;
    NEW.created_at := now();
    NEW.updated_at := now();
    NEW.receipt_ref := NULL;
  END IF;
  IF (NEW.terminal_outcome = 'IN_FLIGHT') <> (NEW.finished_at IS NULL)
     OR (NEW.terminal_outcome <> 'IN_FLIGHT' AND NEW.lease_until IS NOT NULL)
     OR (NEW.terminal_outcome IN ('COMPLETED', 'FAILED_AFTER_EFFECT') AND NEW.side_effect_boundary <> 'crossed')
     OR (NEW.terminal_outcome = 'FAILED_BEFORE_EFFECT' AND NEW.side_effect_boundary <> 'not_crossed')
     OR (NEW.operator_resolution IS NOT NULL AND (NEW.resolved_by IS NULL OR NEW.resolution_reason IS NULL)) THEN
    RAISE EXCEPTION 'transition % breaks %', NEW.request_id, CASE
      WHEN (NEW.terminal_outcome = 'IN_FLIGHT') <> (NEW.finished_at IS NULL)
        THEN 'in_flight_is_unfinished: a row is IN_FLIGHT exactly while finished_at is empty'
      WHEN NEW.terminal_outcome <> 'IN_FLIGHT' AND NEW.lease_until IS NOT NULL
        THEN 'terminal_holds_no_lease: a terminal row holds no lease'
      WHEN NEW.terminal_outcome IN ('COMPLETED', 'FAILED_AFTER_EFFECT') AND NEW.side_effect_boundary <> 'crossed'
        THEN 'completed_crossed: COMPLETED and FAILED_AFTER_EFFECT rows crossed the side-effect boundary'
      WHEN NEW.terminal_outcome = 'FAILED_BEFORE_EFFECT' AND NEW.side_effect_boundary <> 'not_crossed'
        THEN 'failed_before_not_crossed: a FAILED_BEFORE_EFFECT row never crossed the side-effect boundary'
      ELSE 'release_is_recorded: a release names who verified it and why'
    END USING ERRCODE = 'check_violation', CONSTRAINT = 'transition_consistent';
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER transitions_guard BEFORE UPDATE OR DELETE ON mycelium.transitions
  FOR EACH ROW EXECUTE FUNCTION mycelium.transitions_guard();

-- An insert calls the guard unless the row is one it would pass unchanged: written by a verb, the
-- fence, creation and update times as the guard sets them, no receipt, in flight and unreleased (then
-- no consistency rule can fail). A claim's insert is such a row; the condition, evaluated by the
-- executor, costs a fraction of a call into the trigger function. Anything unknown (a NULL) calls it.
CREATE OR REPLACE TRIGGER transitions_guard_insert BEFORE INSERT ON mycelium.transitions
  FOR EACH ROW WHEN (NOT coalesce(
    coalesce(current_setting('mycelium.transition_verb', true), '') <> ''
    AND NEW.fence = 1 AND NEW.created_at = now() AND NEW.updated_at = now() AND NEW.receipt_ref IS NULL
    AND NEW.terminal_outcome = 'IN_FLIGHT' AND NEW.finished_at IS NULL AND NEW.operator_resolution IS NULL,
    false))
  EXECUTE FUNCTION mycelium.transitions_guard();


CREATE OR REPLACE FUNCTION mycelium.transitions_no_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'append_only', 'transitions are never deleted: TRUNCATE refused');
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER transitions_no_truncate BEFORE TRUNCATE ON mycelium.transitions
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.transitions_no_truncate();


-- ---------------------------------------------------------------------------------------------
-- The gate (pure; contracts/transition-gates.json is its specification and the test enumerates it).
--
-- p_state: IN_FLIGHT_HELD | IN_FLIGHT_UNBOUNDED | EXPIRED | COMPLETED | FAILED_BEFORE_EFFECT |
--          FAILED_AFTER_EFFECT | BLOCKED | UNKNOWN (the stored outcome resolved with the lease)
-- p_key_validity: VALID | EXPIRED | UNTRACKED; p_key_match: same | different | missing

CREATE OR REPLACE FUNCTION mycelium.transition_state(p_outcome text, p_lease_until timestamptz, p_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_outcome <> 'IN_FLIGHT' THEN p_outcome
    WHEN p_lease_until IS NULL THEN 'IN_FLIGHT_UNBOUNDED'
    WHEN p_at >= p_lease_until THEN 'EXPIRED'
    ELSE 'IN_FLIGHT_HELD'
  END
$$;


CREATE OR REPLACE FUNCTION mycelium.transition_gate(
  p_class text, p_spendability text, p_retry text, p_boundary text, p_state text,
  p_key_param boolean, p_key_ttl boolean, p_key_validity text, p_key_match text, p_needs_repair boolean
) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_needs_repair THEN 'REPAIR'
    WHEN p_state = 'COMPLETED' THEN 'RETURN'
    WHEN p_state IN ('IN_FLIGHT_HELD', 'IN_FLIGHT_UNBOUNDED') THEN 'POLL'
    -- read-only tools: re-running a read is safe
    WHEN p_class = 'read' THEN
      CASE WHEN p_state IN ('BLOCKED', 'UNKNOWN') THEN 'SOFT_BLOCK' ELSE 'RECLAIM' END
    -- side-effecting tools
    WHEN p_state = 'BLOCKED' THEN 'HARD_BLOCK'
    WHEN p_state = 'UNKNOWN' THEN
      CASE WHEN p_key_param AND p_key_ttl
                AND p_retry = 'retry_only_with_same_provider_idempotency_key'
                AND p_class IN ('idempotent_mutate', 'keyed_mutate')
                AND p_key_match = 'same' AND p_key_validity = 'VALID' THEN 'ALLOW'
           ELSE 'HARD_BLOCK' END
    WHEN p_state = 'EXPIRED' THEN
      CASE WHEN p_boundary <> 'not_crossed' THEN 'HARD_BLOCK'
           WHEN p_spendability IN ('single_use', 'non_replayable') THEN 'HARD_BLOCK'
           WHEN p_spendability = 'multi_use' AND p_retry = 'safe_retry' THEN 'ALLOW'
           ELSE 'HARD_BLOCK' END
    WHEN p_state = 'FAILED_AFTER_EFFECT' THEN 'HARD_BLOCK'
    WHEN p_state = 'FAILED_BEFORE_EFFECT' THEN
      CASE WHEN p_boundary <> 'not_crossed' THEN 'HARD_BLOCK'
           WHEN p_retry IN ('never_retry_automatically', 'manual_reconciliation_required') THEN 'HARD_BLOCK'
           WHEN p_retry = 'retry_only_with_same_provider_idempotency_key' THEN
             CASE WHEN p_class NOT IN ('idempotent_mutate', 'keyed_mutate') THEN 'HARD_BLOCK'
                  WHEN NOT p_key_param THEN 'ALLOW'
                  WHEN p_key_match <> 'same' THEN 'HARD_BLOCK'
                  WHEN p_key_ttl AND p_key_validity = 'EXPIRED' THEN 'HARD_BLOCK'
                  ELSE 'ALLOW' END
           ELSE 'ALLOW' END
    ELSE 'HARD_BLOCK'
  END
$$;

COMMENT ON FUNCTION mycelium.transition_gate(text,text,text,text,text,boolean,boolean,text,text,boolean) IS
  'The resolution gate for a redispatch (contracts/transition-gates.json, tables side_effecting and read_only).';


-- What the claim does after the gate (contracts/transition-gates.json, table claim_actions).
-- p_settled: an operator release or a reconciler said NOT_EXECUTED for this fence;
-- p_can_reconcile: the caller has a reconciler and the row has an external_operation_ref;
-- p_reconciled: the caller already ran its reconciler for this fence and it said UNKNOWN;
-- p_death_missing: death evidence is required for reclaiming an expired lease and there is none.
CREATE OR REPLACE FUNCTION mycelium.claim_action(
  p_gate text, p_state text, p_settled boolean, p_can_reconcile boolean, p_reconciled boolean,
  p_blind boolean, p_defer boolean, p_death_missing boolean
) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_gate = 'REPAIR' THEN 'repair'
    WHEN p_gate = 'RETURN' THEN 'return'
    WHEN p_gate = 'POLL' THEN 'poll'
    WHEN p_gate = 'RECLAIM' THEN CASE WHEN p_state = 'EXPIRED' AND p_death_missing THEN 'poll' ELSE 'run' END
    WHEN p_gate = 'SOFT_BLOCK' THEN CASE WHEN p_defer THEN 'soft_block' ELSE 'run' END
    WHEN p_gate = 'ALLOW' AND p_state = 'UNKNOWN' THEN
      CASE WHEN p_settled THEN 'run'
           WHEN p_can_reconcile AND NOT p_reconciled THEN 'reconcile'
           WHEN p_blind THEN 'hard_block'
           ELSE 'run' END
    WHEN p_gate = 'ALLOW' THEN CASE WHEN p_state = 'EXPIRED' AND p_death_missing THEN 'poll' ELSE 'run' END
    WHEN p_gate = 'HARD_BLOCK' THEN
      CASE WHEN p_settled THEN 'run'
           WHEN p_can_reconcile AND NOT p_reconciled THEN 'reconcile'
           ELSE 'hard_block' END
  END
$$;


-- ---------------------------------------------------------------------------------------------
-- Refusals shared by the verbs.

CREATE OR REPLACE FUNCTION mycelium.transition_detail(t mycelium.transitions) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('request_id', t.request_id, 'terminal_outcome', t.terminal_outcome,
    'state', mycelium.transition_state(t.terminal_outcome, t.lease_until, now()),
    'side_effect_boundary', t.side_effect_boundary, 'owner', t.owner, 'fence', t.fence,
    'lease_until', t.lease_until, 'external_operation_ref', t.external_operation_ref)
$$;


-- A compare-and-swap found nothing to change: say exactly why (and refuse).
CREATE OR REPLACE FUNCTION mycelium.transition_lost(
  p_request_id text, p_owner text, p_fence bigint, p_verb text, p_need_lease boolean DEFAULT false
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE t mycelium.transitions;
BEGIN
  SELECT * INTO t FROM mycelium.transitions WHERE request_id = p_request_id;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'transition_not_found', format('no transition %L', p_request_id),
                            jsonb_build_object('request_id', p_request_id));
  END IF;
  IF p_fence IS NULL OR p_owner IS NULL THEN
    PERFORM mycelium.refuse(422, 'fence_required', format('%s requires the claim''s owner and fence', p_verb),
                            mycelium.transition_detail(t));
  END IF;
  IF t.fence <> p_fence OR t.owner <> p_owner THEN
    PERFORM mycelium.refuse(409, 'fence_lost',
      format('%s lost: %s is now held by %s at fence %s (you hold fence %s as %s)',
             p_verb, p_request_id, t.owner, t.fence, p_fence, p_owner), mycelium.transition_detail(t));
  END IF;
  IF t.terminal_outcome <> 'IN_FLIGHT' THEN
    PERFORM mycelium.refuse(409, 'not_in_flight',
      format('%s refused: %s is %s, not IN_FLIGHT', p_verb, p_request_id, t.terminal_outcome),
      mycelium.transition_detail(t));
  END IF;
  IF p_need_lease AND t.lease_until IS NOT NULL AND t.lease_until <= now() THEN
    PERFORM mycelium.refuse(409, 'lease_expired',
      format('%s refused: the lease on %s already expired at %s; reclaim or reconcile instead',
             p_verb, p_request_id, t.lease_until), mycelium.transition_detail(t));
  END IF;
  PERFORM mycelium.refuse(409, 'transition_moved', format('%s refused: %s changed meanwhile', p_verb, p_request_id),
                          mycelium.transition_detail(t));
END
$$;


CREATE OR REPLACE FUNCTION mycelium.lease_end(p_ttl double precision) RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN p_ttl IS NOT NULL AND p_ttl > 0 THEN now() + make_interval(secs => p_ttl) END
$$;


CREATE OR REPLACE FUNCTION mycelium.claim_transition(
  p_request_id text,
  p_transition_key text,
  p_tool text,
  p_owner text,
  p_side_effect_class text,
  p_agent_id text DEFAULT '',
  p_policy_version text DEFAULT '',
  p_lease_ttl double precision DEFAULT 3600,
  p_spendability text DEFAULT NULL,
  p_retry_permission text DEFAULT NULL,
  p_capability text DEFAULT NULL,
  p_kind text DEFAULT 'tool',
  p_scope jsonb DEFAULT '{}',
  p_dispatch_id text DEFAULT NULL,
  p_args_hash text DEFAULT NULL,
  p_idempotency_key text DEFAULT NULL,
  p_key_param text DEFAULT NULL,
  p_key_ttl double precision DEFAULT NULL,
  p_incoming_key text DEFAULT NULL,
  p_has_reconciler boolean DEFAULT false,
  p_reconciled boolean DEFAULT false,
  p_defer_read_unknown boolean DEFAULT false,
  p_presumed_dead_after double precision DEFAULT NULL
) RETURNS mycelium.claim LANGUAGE plpgsql AS $$
DECLARE
  marked text;
  cls text := p_side_effect_class;
  spend text;
  retry text;
  cap text;
  t mycelium.transitions;
  st text;
  validity text;
  key_match text;
  first_at timestamptz;
  gate text;
  act text;
  repaired boolean;
  settled boolean;
  death_missing boolean;
BEGIN
  -- (every expression evaluated here is compiled again in every transaction: a valid call that
  -- nobody has seen passes one test and one insert, which computes the defaults the caller left out)
  IF cls IS NULL OR cls NOT IN ('read', 'idempotent_mutate', 'keyed_mutate', 'non_idempotent_mutate', 'irreversible')
     OR p_request_id IS NULL OR btrim(p_request_id) = '' OR p_owner IS NULL OR btrim(p_owner) = '' THEN
    cls := mycelium.side_effect_class(p_side_effect_class);
    IF cls IS NULL THEN
      PERFORM mycelium.refuse(422, 'invalid_side_effect_class',
        format('unknown side_effect_class %L (read, idempotent_mutate, keyed_mutate, non_idempotent_mutate, '
               'irreversible)', p_side_effect_class), jsonb_build_object('side_effect_class', p_side_effect_class));
    END IF;
    IF p_request_id IS NULL OR btrim(p_request_id) = '' THEN
      PERFORM mycelium.refuse(422, 'missing_request_id', 'a claim names its request id');
    END IF;
    IF p_owner IS NULL OR btrim(p_owner) = '' THEN
      PERFORM mycelium.refuse(422, 'missing_owner', 'a claim names its owner (host:pid of the worker)');
    END IF;
  END IF;
  marked := set_config('mycelium.transition_verb', 'claim_transition', true);

  -- the common case first: nobody has seen this call
  INSERT INTO mycelium.transitions AS x (
    request_id, kind, transition_key, idempotency_key, tool, agent_id, policy_version, scope, dispatch_id,
    args_hash, side_effect_class, spendability, retry_permission, capability, provider_key_param,
    provider_idempotency_key, provider_key_first_attempt_at, provider_key_ttl, owner, lease_until,
    last_heartbeat_at)
  VALUES (
    p_request_id, p_kind, p_transition_key, coalesce(p_idempotency_key, p_request_id), p_tool,
    coalesce(p_agent_id, ''), coalesce(p_policy_version, ''), coalesce(p_scope, '{}'), p_dispatch_id,
    p_args_hash, cls, coalesce(p_spendability, mycelium.default_spendability(cls)),
    coalesce(p_retry_permission, mycelium.default_retry_permission(cls)),
    coalesce(p_capability, mycelium.capability_floor(cls, p_key_param IS NOT NULL, p_has_reconciler)),
    p_key_param, p_incoming_key,
    CASE WHEN p_incoming_key IS NOT NULL THEN now() END,
    CASE WHEN p_key_ttl IS NOT NULL THEN make_interval(secs => p_key_ttl) END,
    p_owner, mycelium.lease_end(p_lease_ttl), now())
  ON CONFLICT (request_id) DO NOTHING
  RETURNING * INTO t;
  IF FOUND THEN
    marked := set_config('mycelium.transition_verb', '', true);
    RETURN ROW('ALLOW', 'run', false, t)::mycelium.claim;
  END IF;

  spend := coalesce(p_spendability, mycelium.default_spendability(cls));
  retry := coalesce(p_retry_permission, mycelium.default_retry_permission(cls));
  cap := coalesce(p_capability, mycelium.capability_floor(cls, p_key_param IS NOT NULL, p_has_reconciler));
  repaired := false;
  SELECT * INTO t FROM mycelium.transitions WHERE request_id = p_request_id FOR UPDATE;
  IF t.transition_key <> p_transition_key OR t.tool <> p_tool OR t.kind <> p_kind THEN
    PERFORM mycelium.refuse(409, 'identity_conflict',
      format('request id %L already names a different call (tool %s, transition key %s); '
             'an explicit request id is reused only for the same call', p_request_id, t.tool, t.transition_key),
      jsonb_build_object('request_id', p_request_id, 'tool', t.tool, 'transition_key', t.transition_key));
  END IF;

  LOOP
    st := mycelium.transition_state(t.terminal_outcome, t.lease_until, now());
    first_at := coalesce(t.provider_key_first_attempt_at, t.started_at);
    validity := CASE WHEN p_key_ttl IS NULL OR first_at IS NULL THEN 'UNTRACKED'
                     WHEN now() - first_at >= make_interval(secs => p_key_ttl) THEN 'EXPIRED'
                     ELSE 'VALID' END;
    key_match := CASE WHEN p_incoming_key IS NULL OR t.provider_idempotency_key IS NULL THEN 'missing'
                      WHEN p_incoming_key = t.provider_idempotency_key THEN 'same'
                      ELSE 'different' END;
    gate := mycelium.transition_gate(cls, spend, retry, t.side_effect_boundary, st, p_key_param IS NOT NULL,
                                     p_key_ttl IS NOT NULL, validity, key_match,
                                     t.idempotency_key IS NULL OR btrim(t.idempotency_key) = '');
    settled := t.operator_resolution = 'not_executed' OR t.reconcile_status = 'NOT_EXECUTED';
    death_missing := p_presumed_dead_after IS NOT NULL AND t.worker_dead_asserted_at IS NULL
                     AND now() - coalesce(t.last_heartbeat_at, t.started_at) < make_interval(secs => p_presumed_dead_after);
    act := mycelium.claim_action(gate, st, coalesce(settled, false),
                                 p_has_reconciler AND coalesce(btrim(t.external_operation_ref), '') <> '',
                                 p_reconciled, cap = 'blind', p_defer_read_unknown, death_missing);
    EXIT WHEN act <> 'repair';
    -- heal the incomplete record, then gate again (never invents a result, never renews a lease)
    UPDATE mycelium.transitions SET idempotency_key = request_id
    WHERE request_id = p_request_id RETURNING * INTO t;
    repaired := true;
  END LOOP;

  IF act = 'run' THEN
    UPDATE mycelium.transitions SET
      fence = t.fence + 1, attempts = t.attempts + 1, owner = p_owner, terminal_outcome = 'IN_FLIGHT',
      side_effect_boundary = 'not_crossed', effect_phase = 'INTENDED',
      lease_until = mycelium.lease_end(p_lease_ttl), last_heartbeat_at = now(),
      started_at = now(), finished_at = NULL, result = NULL, result_text = NULL, error = NULL, receipt_ref = NULL,
      external_operation_ref = NULL, reconcile_status = NULL, reconciled_at = NULL,
      operator_resolution = NULL, worker_dead_asserted_by = NULL, worker_dead_asserted_at = NULL,
      side_effect_class = cls, spendability = spend, retry_permission = retry, capability = cap,
      scope = coalesce(p_scope, '{}'), dispatch_id = coalesce(p_dispatch_id, t.dispatch_id),
      args_hash = coalesce(p_args_hash, t.args_hash),
      provider_key_param = p_key_param,
      provider_key_ttl = CASE WHEN p_key_ttl IS NOT NULL THEN make_interval(secs => p_key_ttl) END,
      provider_idempotency_key = p_incoming_key,
      provider_key_first_attempt_at = CASE
        WHEN p_incoming_key IS NULL THEN NULL
        WHEN p_incoming_key IS NOT DISTINCT FROM t.provider_idempotency_key
          THEN coalesce(t.provider_key_first_attempt_at, t.started_at)
        ELSE now() END
    WHERE request_id = p_request_id RETURNING * INTO t;
  ELSIF act = 'hard_block' AND st = 'EXPIRED' THEN
    -- the peer that finds a stale side-effecting lease parks the row for a human
    UPDATE mycelium.transitions SET
      terminal_outcome = 'BLOCKED', lease_until = NULL, finished_at = now(),
      effect_phase = CASE WHEN side_effect_boundary = 'not_crossed' THEN 'ABORTED' ELSE 'UNKNOWN' END,
      error = CASE WHEN side_effect_boundary = 'not_crossed'
        THEN 'stale in-flight lease with not_crossed boundary; reclaim only if a reconciler or an operator '
             'proves NOT_EXECUTED'
        ELSE format('stale in-flight lease with boundary %s: the effect may have happened', side_effect_boundary)
        END
    WHERE request_id = p_request_id RETURNING * INTO t;
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN ROW(gate, act, repaired, t)::mycelium.claim;
END
$$;

COMMENT ON FUNCTION mycelium.claim_transition(text,text,text,text,text,text,text,double precision,text,text,text,text,jsonb,text,text,text,text,double precision,text,boolean,boolean,boolean,double precision) IS
  'Claim a transition: under the row lock, evaluate the gate and act (run, return, poll, reconcile, soft_block, hard_block).';


-- ---------------------------------------------------------------------------------------------
-- Mutators of the owner (compare and swap on owner + fence).

CREATE OR REPLACE FUNCTION mycelium.renew_lease(
  p_request_id text, p_owner text, p_fence bigint, p_lease_ttl double precision
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  t mycelium.transitions;
  marked text;
BEGIN
  IF p_lease_ttl IS NULL OR p_lease_ttl <= 0 THEN
    PERFORM mycelium.refuse(422, 'invalid_lease_ttl', 'a lease is renewed for a positive number of seconds');
  END IF;
  marked := set_config('mycelium.transition_verb', 'renew_lease', true);
  UPDATE mycelium.transitions SET lease_until = mycelium.lease_end(p_lease_ttl), last_heartbeat_at = now()
  WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence AND terminal_outcome = 'IN_FLIGHT'
    AND (lease_until IS NULL OR lease_until > now())
  RETURNING * INTO t;
  IF NOT FOUND THEN
    PERFORM mycelium.transition_lost(p_request_id, p_owner, p_fence, 'renew_lease', true);
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


-- Move the boundary forward (a backward move changes nothing). Entering maybe_crossed needs a live
-- lease: an owner whose lease lapsed must not start the external call.
CREATE OR REPLACE FUNCTION mycelium.advance_boundary(
  p_request_id text, p_owner text, p_fence bigint, p_boundary text
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  t mycelium.transitions;
  marked text;
BEGIN
  IF mycelium.boundary_rank(p_boundary) IS NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_boundary',
      format('unknown side_effect_boundary %L (not_crossed, maybe_crossed, crossed)', p_boundary));
  END IF;
  marked := set_config('mycelium.transition_verb', 'advance_boundary', true);
  UPDATE mycelium.transitions SET
    side_effect_boundary = CASE WHEN mycelium.boundary_rank(p_boundary) > mycelium.boundary_rank(side_effect_boundary)
                                THEN p_boundary ELSE side_effect_boundary END,
    effect_phase = CASE WHEN mycelium.boundary_rank(p_boundary) > 0 THEN 'ATTEMPTING' ELSE effect_phase END
  WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence AND terminal_outcome = 'IN_FLIGHT'
    AND (p_boundary <> 'maybe_crossed' OR side_effect_boundary <> 'not_crossed'
         OR lease_until IS NULL OR lease_until > now())
  RETURNING * INTO t;
  IF NOT FOUND THEN
    PERFORM mycelium.transition_lost(p_request_id, p_owner, p_fence, 'advance_boundary', p_boundary = 'maybe_crossed');
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


-- Record the provider's handle (its operation id, or the idempotency key sent to it). Allowed while
-- the row is in flight, or after a peer parked it: more evidence never hurts reconciliation.
CREATE OR REPLACE FUNCTION mycelium.record_external_operation(
  p_request_id text, p_owner text, p_fence bigint, p_ref text
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  t mycelium.transitions;
  marked text;
BEGIN
  IF p_ref IS NULL OR btrim(p_ref) = '' OR p_ref ~ '[[:cntrl:]]' THEN
    PERFORM mycelium.refuse(422, 'invalid_external_ref', 'an external operation ref is a non-blank single line');
  END IF;
  marked := set_config('mycelium.transition_verb', 'record_external_operation', true);
  UPDATE mycelium.transitions SET external_operation_ref = p_ref
  WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence
    AND terminal_outcome IN ('IN_FLIGHT', 'BLOCKED', 'UNKNOWN')
  RETURNING * INTO t;
  IF NOT FOUND THEN
    PERFORM mycelium.transition_lost(p_request_id, p_owner, p_fence, 'record_external_operation');
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


-- p_result_text: the same result as the caller's JSON text (a redispatch returns it with its keys in
-- their order; jsonb keeps them sorted). complete_ack is the verb; it returns the request id only
-- (the SDK needs nothing else, and a RETURNING of the whole row is built column by column on every
-- call); complete() returns the completed row.
CREATE OR REPLACE FUNCTION mycelium.complete_ack(
  p_request_id text, p_owner text, p_fence bigint, p_result jsonb DEFAULT NULL, p_result_text text DEFAULT NULL
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  marked text;
BEGIN
  marked := set_config('mycelium.transition_verb', 'complete', true);
  UPDATE mycelium.transitions SET
    terminal_outcome = 'COMPLETED', side_effect_boundary = 'crossed', effect_phase = 'COMMITTED',
    result = p_result, result_text = p_result_text, error = NULL, lease_until = NULL, finished_at = now(),
    updated_at = now()
  WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence AND terminal_outcome = 'IN_FLIGHT';
  IF NOT FOUND THEN
    PERFORM mycelium.transition_lost(p_request_id, p_owner, p_fence, 'complete');
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN p_request_id;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.complete(
  p_request_id text, p_owner text, p_fence bigint, p_result jsonb DEFAULT NULL, p_result_text text DEFAULT NULL
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  t mycelium.transitions;
BEGIN
  PERFORM mycelium.complete_ack(p_request_id, p_owner, p_fence, p_result, p_result_text);
  SELECT * INTO t FROM mycelium.transitions WHERE request_id = p_request_id;
  RETURN t;
END
$$;


-- Record a failure. p_after_effect NULL classifies by the stored boundary (not_crossed →
-- FAILED_BEFORE_EFFECT, maybe_crossed → UNKNOWN, crossed → FAILED_AFTER_EFFECT); true records
-- FAILED_AFTER_EFFECT (boundary crossed); false records FAILED_BEFORE_EFFECT and is refused once
-- the boundary has moved (that failure is not "before the effect" any more).
CREATE OR REPLACE FUNCTION mycelium.fail(
  p_request_id text, p_owner text, p_fence bigint, p_error text DEFAULT NULL, p_after_effect boolean DEFAULT NULL
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  t mycelium.transitions;
  marked text;
BEGIN
  marked := set_config('mycelium.transition_verb', 'fail', true);
  UPDATE mycelium.transitions SET
    terminal_outcome = CASE
      WHEN p_after_effect THEN 'FAILED_AFTER_EFFECT'
      WHEN side_effect_boundary = 'not_crossed' THEN 'FAILED_BEFORE_EFFECT'
      WHEN side_effect_boundary = 'maybe_crossed' THEN 'UNKNOWN'
      ELSE 'FAILED_AFTER_EFFECT' END,
    side_effect_boundary = CASE WHEN p_after_effect THEN 'crossed' ELSE side_effect_boundary END,
    effect_phase = CASE WHEN NOT coalesce(p_after_effect, false) AND side_effect_boundary = 'not_crossed'
                        THEN 'ABORTED' ELSE 'UNKNOWN' END,
    error = left(p_error, 8000), lease_until = NULL, finished_at = now()
  WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence AND terminal_outcome = 'IN_FLIGHT'
    AND (p_after_effect IS DISTINCT FROM false OR side_effect_boundary = 'not_crossed')
  RETURNING * INTO t;
  IF NOT FOUND THEN
    SELECT * INTO t FROM mycelium.transitions
    WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence AND terminal_outcome = 'IN_FLIGHT';
    IF FOUND THEN
      PERFORM mycelium.refuse(409, 'boundary_crossed',
        format('%s is past the side-effect boundary (%s): it cannot fail "before the effect"',
               p_request_id, t.side_effect_boundary), mycelium.transition_detail(t));
    END IF;
    PERFORM mycelium.transition_lost(p_request_id, p_owner, p_fence, 'fail');
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.mark_outcome(
  p_request_id text, p_owner text, p_fence bigint, p_outcome text, p_error text, p_verb text
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  t mycelium.transitions;
  marked text;
BEGIN
  marked := set_config('mycelium.transition_verb', p_verb, true);
  UPDATE mycelium.transitions SET
    terminal_outcome = p_outcome, lease_until = NULL, finished_at = now(), error = left(p_error, 8000),
    effect_phase = CASE WHEN side_effect_boundary = 'not_crossed' AND p_outcome = 'BLOCKED'
                        THEN 'ABORTED' ELSE 'UNKNOWN' END
  WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence AND terminal_outcome = 'IN_FLIGHT'
  RETURNING * INTO t;
  IF NOT FOUND THEN
    PERFORM mycelium.transition_lost(p_request_id, p_owner, p_fence, p_verb);
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.mark_unknown(p_request_id text, p_owner text, p_fence bigint, p_error text DEFAULT NULL)
RETURNS mycelium.transitions LANGUAGE sql AS $$
  SELECT mycelium.mark_outcome(p_request_id, p_owner, p_fence, 'UNKNOWN', p_error, 'mark_unknown')
$$;


CREATE OR REPLACE FUNCTION mycelium.mark_blocked(p_request_id text, p_owner text, p_fence bigint, p_error text DEFAULT NULL)
RETURNS mycelium.transitions LANGUAGE sql AS $$
  SELECT mycelium.mark_outcome(p_request_id, p_owner, p_fence, 'BLOCKED', p_error, 'mark_blocked')
$$;


-- Heal an incomplete durable record (today: a missing idempotency key). The claim does this by
-- itself; the verb is here for operators.
CREATE OR REPLACE FUNCTION mycelium.repair(p_request_id text, p_owner text, p_fence bigint)
RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  t mycelium.transitions;
  marked text;
BEGIN
  marked := set_config('mycelium.transition_verb', 'repair', true);
  UPDATE mycelium.transitions
  SET idempotency_key = CASE WHEN coalesce(btrim(idempotency_key), '') = '' THEN request_id ELSE idempotency_key END
  WHERE request_id = p_request_id AND owner = p_owner AND fence = p_fence
  RETURNING * INTO t;
  IF NOT FOUND THEN
    PERFORM mycelium.transition_lost(p_request_id, p_owner, p_fence, 'repair');
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Resolution verbs.

-- A reconciler asked the provider about an ambiguous transition (observed at p_fence):
--   COMPLETED    settles the row COMPLETED with the provider's answer (the body never runs again);
--   NOT_EXECUTED stamps the row (an expired lease is parked BLOCKED first); the next claim consumes
--                the stamp and runs the body exactly once;
--   UNKNOWN      is recorded; the row stays as it is (a hard block).
-- A row held by a live lease is refused; so is a row whose fence moved on since it was observed.
CREATE OR REPLACE FUNCTION mycelium.apply_reconcile_result(
  p_request_id text, p_fence bigint, p_status text, p_result jsonb DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  marked text;
  t mycelium.transitions;
  st text;
BEGIN
  IF p_status IS NULL OR p_status NOT IN ('COMPLETED', 'NOT_EXECUTED', 'UNKNOWN') THEN
    PERFORM mycelium.refuse(422, 'invalid_reconcile_status',
      format('a reconcile result is COMPLETED, NOT_EXECUTED or UNKNOWN, not %L', p_status));
  END IF;
  SELECT * INTO t FROM mycelium.transitions WHERE request_id = p_request_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'transition_not_found', format('no transition %L', p_request_id),
                            jsonb_build_object('request_id', p_request_id));
  END IF;
  st := mycelium.transition_state(t.terminal_outcome, t.lease_until, now());
  IF t.fence <> p_fence OR st NOT IN ('EXPIRED', 'BLOCKED', 'UNKNOWN', 'FAILED_AFTER_EFFECT', 'FAILED_BEFORE_EFFECT') THEN
    PERFORM mycelium.refuse(409, 'transition_moved',
      format('reconcile result for %s at fence %s refused: the row is %s at fence %s',
             p_request_id, p_fence, st, t.fence), mycelium.transition_detail(t));
  END IF;
  marked := set_config('mycelium.transition_verb', 'apply_reconcile_result', true);
  IF p_status = 'COMPLETED' THEN
    UPDATE mycelium.transitions SET
      terminal_outcome = 'COMPLETED', side_effect_boundary = 'crossed', effect_phase = 'COMMITTED',
      result = p_result, result_text = NULL, lease_until = NULL, finished_at = now(), reconcile_status = 'COMPLETED',
      reconciled_at = now(), resolved_by = coalesce(p_by, resolved_by)
    WHERE request_id = p_request_id RETURNING * INTO t;
  ELSE
    UPDATE mycelium.transitions SET
      terminal_outcome = CASE WHEN st = 'EXPIRED' AND p_status = 'NOT_EXECUTED' THEN 'BLOCKED' ELSE terminal_outcome END,
      lease_until = CASE WHEN st = 'EXPIRED' AND p_status = 'NOT_EXECUTED' THEN NULL ELSE lease_until END,
      finished_at = CASE WHEN st = 'EXPIRED' AND p_status = 'NOT_EXECUTED' THEN now() ELSE finished_at END,
      reconcile_status = p_status, reconciled_at = now()
    WHERE request_id = p_request_id RETURNING * INTO t;
  END IF;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


-- A human verified what happened. 'completed' settles the row with the given result; 'not_executed'
-- stamps it, and the next claim runs the body once. One-shot; written to the receipt chain. Who
-- verified it is the declared actor, else p_by.
CREATE OR REPLACE FUNCTION mycelium.release(
  p_request_id text, p_verified text, p_by text, p_reason text, p_result jsonb DEFAULT NULL,
  p_expected_fence bigint DEFAULT NULL
) RETURNS mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  marked text;
  by_text text := mycelium.author(p_by, 'by');
  t mycelium.transitions;
  st text;
BEGIN
  PERFORM mycelium.operator_only('release');
  IF p_verified IS NULL OR p_verified NOT IN ('completed', 'not_executed') THEN
    PERFORM mycelium.refuse(422, 'invalid_release',
      format('a release states what was verified: completed or not_executed, not %L', p_verified));
  END IF;
  IF by_text IS NULL OR btrim(by_text) = '' OR p_reason IS NULL OR btrim(p_reason) = '' THEN
    PERFORM mycelium.refuse(422, 'release_unattributed', 'a release names who verified it (by) and why (reason)');
  END IF;
  SELECT * INTO t FROM mycelium.transitions WHERE request_id = p_request_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'transition_not_found', format('no transition %L', p_request_id),
                            jsonb_build_object('request_id', p_request_id));
  END IF;
  st := mycelium.transition_state(t.terminal_outcome, t.lease_until, now());
  IF p_expected_fence IS NOT NULL AND t.fence <> p_expected_fence THEN
    PERFORM mycelium.refuse(409, 'fence_lost',
      format('release refused: %s is at fence %s, not %s', p_request_id, t.fence, p_expected_fence),
      mycelium.transition_detail(t));
  END IF;
  IF st = 'COMPLETED' THEN
    PERFORM mycelium.refuse(409, 'release_refused', format('%s is already COMPLETED', p_request_id),
                            mycelium.transition_detail(t));
  END IF;
  IF st IN ('IN_FLIGHT_HELD', 'IN_FLIGHT_UNBOUNDED') THEN
    PERFORM mycelium.refuse(409, 'release_refused',
      format('%s is in flight under a live lease (owner %s); wait for it, or for the lease to expire',
             p_request_id, t.owner), mycelium.transition_detail(t));
  END IF;
  IF t.operator_resolution IS NOT NULL THEN
    PERFORM mycelium.refuse(409, 'already_resolved',
      format('%s was already released (%s by %s); a release is one-shot', p_request_id,
             t.operator_resolution, t.resolved_by), mycelium.transition_detail(t));
  END IF;
  marked := set_config('mycelium.transition_verb', 'release', true);
  UPDATE mycelium.transitions SET
    operator_resolution = p_verified, resolved_by = by_text, resolution_reason = p_reason, resolved_at = now(),
    released_from_outcome = st,
    terminal_outcome = CASE WHEN p_verified = 'completed' THEN 'COMPLETED'
                            WHEN st = 'EXPIRED' THEN 'BLOCKED' ELSE terminal_outcome END,
    side_effect_boundary = CASE WHEN p_verified = 'completed' THEN 'crossed' ELSE side_effect_boundary END,
    effect_phase = CASE WHEN p_verified = 'completed' THEN 'COMMITTED' ELSE effect_phase END,
    result = CASE WHEN p_verified = 'completed' THEN p_result ELSE result END,
    result_text = CASE WHEN p_verified = 'completed' THEN NULL ELSE result_text END,
    lease_until = NULL, finished_at = coalesce(finished_at, now())
  WHERE request_id = p_request_id RETURNING * INTO t;
  marked := set_config('mycelium.transition_verb', '', true);
  RETURN t;
END
$$;


-- A worker is known dead: stamp its in-flight rows so an expired lease may be reclaimed where the
-- caller requires death evidence. Refused while the worker's heartbeat is recent, unless overridden.
-- Who asserts it is the declared actor, else p_by.
CREATE OR REPLACE FUNCTION mycelium.mark_worker_dead(
  p_owner text, p_by text, p_reason text, p_override boolean DEFAULT false,
  p_presumed_dead_after double precision DEFAULT 60
) RETURNS SETOF mycelium.transitions LANGUAGE plpgsql AS $$
DECLARE
  marked text;
  alive text;
  by_text text := mycelium.author(p_by, 'by');
BEGIN
  PERFORM mycelium.operator_only('mark_worker_dead');
  IF by_text IS NULL OR btrim(by_text) = '' OR p_reason IS NULL OR btrim(p_reason) = '' THEN
    PERFORM mycelium.refuse(422, 'unattributed', 'a death assertion names who makes it (by) and why (reason)');
  END IF;
  SELECT request_id INTO alive FROM mycelium.transitions
  WHERE owner = p_owner AND finished_at IS NULL AND terminal_outcome = 'IN_FLIGHT'
    AND now() - coalesce(last_heartbeat_at, started_at) < make_interval(secs => p_presumed_dead_after)
  LIMIT 1;
  IF alive IS NOT NULL AND NOT p_override THEN
    PERFORM mycelium.refuse(409, 'worker_alive',
      format('worker %s renewed %s within the last %s s; pass override to assert its death anyway',
             p_owner, alive, p_presumed_dead_after), jsonb_build_object('owner', p_owner, 'request_id', alive));
  END IF;
  marked := set_config('mycelium.transition_verb', 'mark_worker_dead', true);
  RETURN QUERY
    UPDATE mycelium.transitions SET
      worker_dead_asserted_by = by_text, worker_dead_asserted_at = now(),
      resolution_reason = p_reason || CASE WHEN alive IS NOT NULL THEN ' (heartbeat overridden)' ELSE '' END
    WHERE owner = p_owner AND finished_at IS NULL AND terminal_outcome = 'IN_FLIGHT'
    RETURNING *;
  marked := set_config('mycelium.transition_verb', '', true);
END
$$;


-- The lane of a request id: RECEIPT_LANES = 32 (a power of two: the hash's low five bits). Raising it
-- later is safe: receipts already written keep their stored lane, and a release finds the lane of the
-- transition's earlier receipt (transitions_guard).
CREATE OR REPLACE FUNCTION mycelium.receipt_lane_of(p_request_id text) RETURNS smallint LANGUAGE sql IMMUTABLE AS $$
  SELECT (hashtextextended(p_request_id, 0) & 31)::smallint
$$;


-- ---------------------------------------------------------------------------------------------
-- The canonical rendering (the offline verifier renders the same bytes).

CREATE OR REPLACE FUNCTION mycelium.receipt_ts(p timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;


-- Field order is part of the format (mycelium.ledger.receipts.RECEIPT_FIELDS): each field is
-- "<name>:<length>:<value>\n", or "<name>:-\n" for NULL (only nullable columns can be); timestamps
-- in UTC with microseconds. Rendered in two parts around seq, so an append renders everything but seq
-- before it takes the chain's lock. Built-ins only and STABLE like to_char, so the planner inlines it.
-- The part after seq is one format() call: its cost is paid again in every transaction (an
-- expression is compiled per transaction), and one variadic call over the fields is a third of the
-- nodes that a chain of || and text casts is; the bytes are the same.
CREATE OR REPLACE FUNCTION mycelium.receipt_preimage_before_seq(r mycelium.receipts) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT E'mycelium.receipt/v2\nreceipt_id:' || length(r.receipt_id) || ':' || r.receipt_id
    || E'\nagent_id:' || length(r.agent_id) || ':' || r.agent_id
    || E'\nlane:' || length(r.lane::text) || ':' || r.lane::text || E'\n'
$$;


CREATE OR REPLACE FUNCTION mycelium.receipt_preimage_after_seq(r mycelium.receipts) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT format(E'kind:%s:%s\naction:%s:%s\nrequest_id:%s:%s\ntransition_key:%s:%s\nside_effect_class:%s:%s\n'
                 'policy_version:%s:%s\ninputs_hash%s\noutputs_hash%s\noutcome:%s:%s\nboundary:%s:%s\nfence:%s:%s\n'
                 'external_operation_ref%s\nerror%s\nverified%s\nresolved_by%s\nresolution_reason%s\n'
                 'started_at:%s:%s\nfinished_at%s\nrecorded_at:%s:%s\n',
    length(r.kind), r.kind, length(r.action), r.action, length(r.request_id), r.request_id,
    length(r.transition_key), r.transition_key, length(r.side_effect_class), r.side_effect_class,
    length(r.policy_version), r.policy_version,
    coalesce(':' || length(r.inputs_hash) || ':' || r.inputs_hash, ':-'),
    coalesce(':' || length(r.outputs_hash) || ':' || r.outputs_hash, ':-'),
    length(r.outcome), r.outcome, length(r.boundary), r.boundary, length(r.fence::text), r.fence,
    coalesce(':' || length(r.external_operation_ref) || ':' || r.external_operation_ref, ':-'),
    coalesce(':' || length(r.error) || ':' || r.error, ':-'),
    coalesce(':' || length(r.verified) || ':' || r.verified, ':-'),
    coalesce(':' || length(r.resolved_by) || ':' || r.resolved_by, ':-'),
    coalesce(':' || length(r.resolution_reason) || ':' || r.resolution_reason, ':-'),
    length(to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
    to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    coalesce(':' || length(to_char(r.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) || ':'
             || to_char(r.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), ':-'),
    length(to_char(r.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
    to_char(r.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
$$;


CREATE OR REPLACE FUNCTION mycelium.receipt_seq_field(p_seq bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT 'seq:' || length(p_seq::text) || ':' || p_seq::text || E'\n'
$$;


CREATE OR REPLACE FUNCTION mycelium.receipt_preimage(r mycelium.receipts) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT mycelium.receipt_preimage_before_seq(r) || mycelium.receipt_seq_field(r.seq)
         || mycelium.receipt_preimage_after_seq(r)
$$;


CREATE OR REPLACE FUNCTION mycelium.receipt_hash(p_prev bytea, r mycelium.receipts) RETURNS bytea LANGUAGE sql STABLE AS $$
  SELECT sha256(convert_to(coalesce(encode(p_prev, 'hex'), '') || E'\n' || mycelium.receipt_preimage(r), 'UTF8'))
$$;


-- ---------------------------------------------------------------------------------------------
-- Appending: the chain is computed here, whoever inserts.

CREATE OR REPLACE FUNCTION mycelium.receipts_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  before_seq text;
  after_seq text;
BEGIN
  NEW.recorded_at := now();
  NEW.receipt_id := 'rcpt-' || NEW.id::text;
  NEW.lane := coalesce(NEW.lane, mycelium.receipt_lane_of(NEW.request_id));
  before_seq := mycelium.receipt_preimage_before_seq(NEW);
  -- The head row is the chain's lock: appends to one chain (agent and lane) happen one at a time, each after the
  -- previous one committed, and one statement moves the head on by this receipt. Appenders queue on
  -- a transaction advisory lock first: a waiter then finds the head free, instead of waiting on the
  -- row and re-evaluating its UPDATE (EvalPlanQual) while the chain is held. The lock is taken in
  -- the expression that renders the rest of the preimage, after it (|| evaluates left to right; the
  -- void result renders as ''): a PERFORM would run a whole query for it.
  after_seq := mycelium.receipt_preimage_after_seq(NEW)
               || pg_advisory_xact_lock(hashtextextended(
                 'mycelium.receipt-chain:' || NEW.lane::text || ':' || NEW.agent_id, 0))::text;
  LOOP
    UPDATE mycelium.receipt_heads h SET
      seq = h.seq + 1,
      prev_hash = CASE WHEN h.seq > 0 THEN h.hash END,
      hash = sha256(convert_to(encode(h.hash, 'hex') || E'\n' || before_seq
                               || mycelium.receipt_seq_field(h.seq + 1) || after_seq, 'UTF8'))
    WHERE h.agent_id = NEW.agent_id AND h.lane = NEW.lane
    RETURNING h.seq, h.prev_hash, h.hash INTO NEW.seq, NEW.prev_hash, NEW.hash;
    EXIT WHEN FOUND;
    INSERT INTO mycelium.receipt_heads (agent_id, lane, seq, hash) VALUES (NEW.agent_id, NEW.lane, 0, '\x')
    ON CONFLICT (agent_id, lane) DO NOTHING;
  END LOOP;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER receipts_before_insert BEFORE INSERT ON mycelium.receipts
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_before_insert();


CREATE OR REPLACE FUNCTION mycelium.receipts_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: %s refused', TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER receipts_append_only BEFORE UPDATE OR DELETE ON mycelium.receipts
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_append_only();

CREATE OR REPLACE TRIGGER receipts_no_truncate BEFORE TRUNCATE ON mycelium.receipts
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.receipts_append_only();

CREATE OR REPLACE TRIGGER receipt_signatures_append_only BEFORE UPDATE OR DELETE ON mycelium.receipt_signatures
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_append_only();

CREATE OR REPLACE TRIGGER receipt_signatures_no_truncate BEFORE TRUNCATE ON mycelium.receipt_signatures
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.receipts_append_only();


-- ---------------------------------------------------------------------------------------------
-- Keys and signatures (written by the hub, which holds the private key).

CREATE OR REPLACE FUNCTION mycelium.register_receipt_key(p_key_id text, p_public_key bytea)
RETURNS mycelium.receipt_keys LANGUAGE plpgsql AS $$
DECLARE k mycelium.receipt_keys;
BEGIN
  PERFORM mycelium.operator_only('register_receipt_key');
  INSERT INTO mycelium.receipt_keys (key_id, public_key) VALUES (p_key_id, p_public_key)
  ON CONFLICT (key_id) DO NOTHING;
  SELECT * INTO k FROM mycelium.receipt_keys WHERE key_id = p_key_id;
  IF k.public_key <> p_public_key THEN
    PERFORM mycelium.refuse(409, 'key_conflict', format('key id %s is registered with another public key', p_key_id));
  END IF;
  IF k.retired_at IS NOT NULL THEN
    PERFORM mycelium.refuse(409, 'key_retired', format('receipt key %s was retired at %s', p_key_id, k.retired_at));
  END IF;
  RETURN k;
END
$$;


-- Rotation: every other key stops signing from now on (their old signatures stay valid).
CREATE OR REPLACE FUNCTION mycelium.retire_receipt_keys(p_except text) RETURNS SETOF mycelium.receipt_keys
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('retire_receipt_keys');
  RETURN QUERY UPDATE mycelium.receipt_keys SET retired_at = now()
               WHERE key_id <> p_except AND retired_at IS NULL RETURNING *;
END
$$;


-- The receipts waiting for a signature: each chain's (agent and lane) receipts past its signed-through
-- mark that have none (the index on (agent_id, lane, seq) serves each chain's tail).
CREATE OR REPLACE FUNCTION mycelium.unsigned_receipt_batch(p_limit integer DEFAULT 500)
RETURNS TABLE (id bigint, hash bytea) LANGUAGE sql STABLE AS $$
  SELECT r.id, r.hash
  FROM mycelium.receipt_heads h
  LEFT JOIN mycelium.receipts_signed_through s ON s.agent_id = h.agent_id AND s.lane = h.lane
  CROSS JOIN LATERAL (
    SELECT r.id, r.hash FROM mycelium.receipts r
    WHERE r.agent_id = h.agent_id AND r.lane = h.lane AND r.seq > coalesce(s.seq, 0)
      AND NOT EXISTS (SELECT 1 FROM mycelium.receipt_signatures g WHERE g.id = r.id)
    ORDER BY r.seq LIMIT p_limit
  ) r
  WHERE h.seq > coalesce(s.seq, 0)
  ORDER BY r.id LIMIT p_limit
$$;


-- Store signatures computed by the key holder over each receipt's hash. A key must be registered
-- and active; a receipt is signed once. Each touched chain's (agent and lane) signed-through mark then moves up to
-- its first receipt still without a signature (never down: two signers may race).
CREATE OR REPLACE FUNCTION mycelium.sign_receipts(p_key_id text, p_ids bigint[], p_signatures bytea[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  PERFORM mycelium.operator_only('sign_receipts');
  IF NOT EXISTS (SELECT 1 FROM mycelium.receipt_keys WHERE key_id = p_key_id AND retired_at IS NULL) THEN
    PERFORM mycelium.refuse(409, 'key_not_active', format('receipt key %s is not registered or retired', p_key_id));
  END IF;
  IF cardinality(p_ids) <> cardinality(p_signatures) THEN
    PERFORM mycelium.refuse(422, 'signature_mismatch', 'one signature per receipt id');
  END IF;
  INSERT INTO mycelium.receipt_signatures (id, key_id, signature)
  SELECT r, p_key_id, s FROM unnest(p_ids, p_signatures) AS x(r, s)
  ON CONFLICT (id) DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;
  INSERT INTO mycelium.receipts_signed_through AS m (agent_id, lane, seq)
  SELECT c.agent_id, c.lane, coalesce(
           (SELECT min(r.seq) - 1 FROM mycelium.receipts r
            WHERE r.agent_id = c.agent_id AND r.lane = c.lane AND r.seq > c.mark
              AND NOT EXISTS (SELECT 1 FROM mycelium.receipt_signatures g WHERE g.id = r.id)),
           (SELECT max(r.seq) FROM mycelium.receipts r WHERE r.agent_id = c.agent_id AND r.lane = c.lane))
  FROM (SELECT DISTINCT r.agent_id, r.lane, coalesce(s.seq, 0) AS mark
        FROM mycelium.receipts r
        LEFT JOIN mycelium.receipts_signed_through s ON s.agent_id = r.agent_id AND s.lane = r.lane
        WHERE r.id = ANY (p_ids)) c
  ON CONFLICT (agent_id, lane) DO UPDATE SET seq = greatest(m.seq, excluded.seq);
  RETURN n;
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Verification (in SQL; signatures are checked by `mycelium receipts verify`, which has the keys).

-- Every break of one agent's chains, every lane (or of every agent's, p_agent NULL): a receipt whose
-- content no longer matches its hash (an edit, a move to another lane), a link to the wrong
-- predecessor, a gap in a lane's sequence, a head that points past its lane's last receipt (a deleted
-- tail). No rows means every chain is intact. (Unsigned receipts: see receipt_export and the
-- signature check of `mycelium receipts verify`.)
CREATE OR REPLACE FUNCTION mycelium.verify_receipt_chain(p_agent text DEFAULT NULL)
RETURNS TABLE (agent_id text, lane smallint, seq bigint, receipt_id text, problem text) LANGUAGE sql STABLE AS $$
  WITH ordered AS (
    SELECT r.agent_id, r.lane::smallint AS lane, r.seq, r.receipt_id, r.prev_hash,
           r.hash = mycelium.receipt_hash(r.prev_hash, r) AS hash_ok,
           lag(r.hash) OVER w AS prior_hash, lag(r.seq) OVER w AS prior_seq
    FROM mycelium.receipts r
    WHERE p_agent IS NULL OR r.agent_id = p_agent
    WINDOW w AS (PARTITION BY r.agent_id, r.lane ORDER BY r.seq)
  )
  SELECT o.agent_id, o.lane, o.seq, o.receipt_id, p.problem
  FROM ordered o
  CROSS JOIN LATERAL (VALUES
    (CASE WHEN NOT o.hash_ok
          THEN 'content does not match its hash (edited)' END),
    (CASE WHEN o.prior_seq IS NULL AND o.seq <> 1 THEN format('chain starts at seq %s (receipts before it are missing)', o.seq)
          WHEN o.prior_seq IS NOT NULL AND o.seq <> o.prior_seq + 1
            THEN format('gap: seq %s follows %s (receipts deleted)', o.seq, o.prior_seq) END),
    (CASE WHEN o.prior_seq IS NULL AND o.seq = 1 AND o.prev_hash IS NOT NULL THEN 'first receipt links to a predecessor'
          WHEN o.prior_seq IS NOT NULL AND o.prev_hash IS DISTINCT FROM o.prior_hash
            THEN 'prev_hash does not match the previous receipt''s hash' END)
  ) AS p(problem)
  WHERE p.problem IS NOT NULL
  UNION ALL
  SELECT h.agent_id, h.lane, h.seq, NULL,
         format('head is at seq %s but the last receipt is %s (receipts deleted)', h.seq, coalesce(m.last_seq, 0))
  FROM mycelium.receipt_heads h
  LEFT JOIN (SELECT r.agent_id, r.lane, max(r.seq) AS last_seq,
                    (array_agg(r.hash ORDER BY r.seq DESC))[1] AS last_hash
             FROM mycelium.receipts r GROUP BY r.agent_id, r.lane) m
    ON m.agent_id = h.agent_id AND m.lane = h.lane
  WHERE (p_agent IS NULL OR h.agent_id = p_agent)
    AND (m.last_seq IS DISTINCT FROM h.seq OR m.last_hash IS DISTINCT FROM h.hash)
  ORDER BY 1, 2, 3
$$;


-- ---------------------------------------------------------------------------------------------
-- Views for the common audits.

-- Side effects per tool per day: effects that happened (or may have) on side-effecting tools.
CREATE OR REPLACE VIEW mycelium.side_effects_per_tool_per_day AS
  SELECT (r.recorded_at AT TIME ZONE 'UTC')::date AS day, r.agent_id, r.action AS tool,
         count(*) FILTER (WHERE r.outcome = 'COMPLETED') AS completed,
         count(*) FILTER (WHERE r.outcome = 'FAILED_AFTER_EFFECT') AS failed_after_effect,
         count(*) FILTER (WHERE r.outcome IN ('UNKNOWN', 'BLOCKED') AND r.boundary <> 'not_crossed') AS ambiguous
  FROM mycelium.receipts r
  WHERE r.side_effect_class <> 'read' AND r.kind <> 'release'
  GROUP BY 1, 2, 3;


-- Hard blocks awaiting a human: side-effecting transitions parked in an ambiguous or blocked state
-- that nobody has released yet.
CREATE OR REPLACE VIEW mycelium.hard_blocks_awaiting_human AS
  SELECT t.request_id, t.agent_id, t.tool, t.terminal_outcome, t.side_effect_boundary,
         t.external_operation_ref, t.error, t.owner, t.fence, t.finished_at,
         now() - t.finished_at AS waiting
  FROM mycelium.transitions t
  WHERE t.side_effect_class <> 'read'
    AND t.terminal_outcome IN ('BLOCKED', 'UNKNOWN', 'FAILED_AFTER_EFFECT')
    AND t.operator_resolution IS NULL
    AND coalesce(t.reconcile_status, '') <> 'NOT_EXECUTED';


-- Reconciled transitions: what a provider lookup settled, and how.
CREATE OR REPLACE VIEW mycelium.reconciled_transitions AS
  SELECT t.request_id, t.agent_id, t.tool, t.reconcile_status, t.reconciled_at, t.terminal_outcome,
         t.external_operation_ref, t.fence, t.receipt_ref
  FROM mycelium.transitions t
  WHERE t.reconcile_status IS NOT NULL;


-- Receipts as the offline verifier reads them (timestamps rendered exactly as hashed; each agent and
-- lane is one chain).
CREATE OR REPLACE VIEW mycelium.receipt_export AS
  SELECT r.id, r.receipt_id, r.agent_id, r.lane::smallint AS lane, r.seq, r.kind, r.action, r.request_id, r.transition_key,
         r.side_effect_class, r.policy_version, r.inputs_hash, r.outputs_hash, r.outcome, r.boundary, r.fence,
         r.external_operation_ref, r.error, r.verified, r.resolved_by, r.resolution_reason,
         mycelium.receipt_ts(r.started_at) AS started_at, mycelium.receipt_ts(r.finished_at) AS finished_at,
         mycelium.receipt_ts(r.recorded_at) AS recorded_at,
         encode(r.prev_hash, 'hex') AS prev_hash, encode(r.hash, 'hex') AS hash,
         s.key_id, encode(s.signature, 'hex') AS signature, r.recorded_at AS recorded_at_ts
  FROM mycelium.receipts r LEFT JOIN mycelium.receipt_signatures s ON s.id = r.id;


CREATE OR REPLACE FUNCTION mycelium.live_episode(p_room text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT mycelium.episode_urn(p_room, 'live') $$;


-- The envelope's closed sets (contracts/message-envelope.json), checked on every insert by the
-- BEFORE INSERT trigger below rather than by table CHECKs: a table's CHECK expressions are
-- deserialised and planned again for every INSERT statement (six of them cost a seventh of
-- appending one message), a PL/pgSQL body is compiled once per session. The table is append-only
-- (no UPDATE), so the insert is the only moment a row's values can be set.
CREATE OR REPLACE FUNCTION mycelium.message_kind_valid(p_kind text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_kind IN ('intent', 'contingency', 'exchange', 'commit', 'knowledge');
END
$$;


CREATE OR REPLACE FUNCTION mycelium.payload_type_valid(p_payload_type text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_payload_type IN ('reply', 'message', 'tick', 'utterance', 'consensus', 'distillation', 'ping',
                            'notice', 'presence', 'keepalive');
END
$$;


CREATE OR REPLACE FUNCTION mycelium.sender_role_valid(p_role text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_role IN ('agent', 'human', 'coordinator');
END
$$;


-- The subkinds each kind takes.
CREATE OR REPLACE FUNCTION mycelium.message_subkind_valid(p_kind text, p_subkind text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_subkind IS NULL OR p_subkind = '' OR (p_kind, p_subkind) IN (
    ('knowledge', 'distillation'), ('knowledge', 'extraction'), ('knowledge', 'feedback'),
    ('knowledge', 'query'), ('commit', 'converged'), ('commit', 'rejected'), ('commit', 'resolved'),
    ('intent', 'coordinator-assignment'), ('intent', 'mission'), ('exchange', 'accept'),
    ('exchange', 'amend'), ('exchange', 'counter'), ('exchange', 'reject'),
    ('exchange', 'team-formation'), ('contingency', 'negotiation'));
END
$$;


-- Refused like a CHECK constraint would be (SQLSTATE 23514 naming the rule), before a position is
-- taken. A NULL passes here as it would pass a CHECK; NOT NULL refuses it after the trigger.
CREATE OR REPLACE FUNCTION mycelium.messages_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE broken text;
BEGIN
  broken := CASE
    WHEN NOT mycelium.message_kind_valid(NEW.kind) THEN 'messages_kind_check'
    WHEN NOT mycelium.payload_type_valid(NEW.payload_type) THEN 'messages_payload_type_check'
    WHEN NOT mycelium.sender_role_valid(NEW.sender_role) THEN 'messages_sender_role_check'
    WHEN coalesce(NEW.subkind, '') <> '' AND NOT mycelium.message_subkind_valid(NEW.kind, NEW.subkind)
      THEN 'message_subkind_valid'
    WHEN btrim(NEW.sender) = '' THEN 'messages_sender_check'
    WHEN jsonb_typeof(NEW.payload) <> 'object' THEN 'messages_payload_check'
  END;
  IF broken IS NOT NULL THEN
    RAISE EXCEPTION 'new row for relation "messages" violates check constraint "%"', broken
      USING ERRCODE = 'check_violation', SCHEMA = 'mycelium', TABLE = 'messages', CONSTRAINT = broken;
  END IF;
  INSERT INTO mycelium.message_positions AS p (room, last) VALUES (NEW.room, 1)
  ON CONFLICT (room) DO UPDATE SET last = p.last + 1
  RETURNING last INTO NEW.position;
  NEW.created_at := clock_timestamp();
  NEW.episode := coalesce(nullif(NEW.episode, ''), mycelium.live_episode(NEW.room));
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER messages_before_insert BEFORE INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_before_insert();


-- The wake hint of every insert. Called by assignment (a simple expression), not by PERFORM, which
-- would start a query per row.
CREATE OR REPLACE FUNCTION mycelium.messages_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE hinted text;
BEGIN
  hinted := mycelium.wake_hint('mycelium_messages', NEW.room || ' ' || NEW.position);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER messages_after_insert AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_after_insert();


CREATE OR REPLACE TRIGGER messages_append_only BEFORE UPDATE OR DELETE ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.refuse_history_change();

CREATE OR REPLACE TRIGGER messages_no_truncate BEFORE TRUNCATE ON mycelium.messages
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_truncate();


-- Post a notice into the room's timeline (the board moved). Called by the verbs in the same
-- transaction as the change, so a notice exists iff its change committed. Notices wake nobody.
-- p_data carries the subkind's own fields (kind, assignee, by, title, episode, speakers, …).
CREATE OR REPLACE FUNCTION mycelium.post_notice(p_room text, p_subkind text, p_key text, p_data jsonb DEFAULT '{}')
RETURNS mycelium.messages LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE r mycelium.messages;
BEGIN
  IF p_subkind NOT IN ('filed', 'claimed', 'released', 'resolved', 'blocked', 'unblocked', 'expired',
                       'floor') THEN
    PERFORM mycelium.refuse(422, 'unknown_notice', format('%L is not a notice subkind', p_subkind));
  END IF;
  INSERT INTO mycelium.messages (room, episode, kind, payload_type, sender, sender_role, payload)
  VALUES (p_room, mycelium.live_episode(p_room), 'exchange', 'notice', 'system', 'coordinator',
          coalesce(p_data, '{}') || jsonb_build_object('subkind', p_subkind, 'key', p_key))
  RETURNING * INTO r;
  RETURN r;
END
$$;
-- The board: tasks are memories in the live namespaces (decisions/ status/ work/ failed/), each
-- bound to its own thread (the memory's database-minted `episode`, write-once and unique per room:
-- see memories.sql). This file holds the board's vocabulary, the row <-> thread lookups, the
-- dependency edges and their cycle check, the notices a row raises when it moves, field writes and
-- the board verbs. Leases (claims) live in assignments.sql.
--
-- Rules the database keeps here, whoever writes (a hub replica, an engine, a person in psql):
--   * filing a board row raises one `filed` notice in the same transaction (trigger on insert);
--   * setting / clearing `blocked_by` raises `blocked` / `unblocked`;
--   * a row becoming settled raises exactly one `unblocked` for each work/ row that now waits on
--     nothing (statement triggers over transition tables, so a multi-row UPDATE counts once);
--   * a `depends-on` edge that would close a cycle between board rows is refused (422);
--   * the lease fields are never frontmatter of a board row (refused, 422): leases live in
--     mycelium.assignments and change only through the assignment verbs.

-- ---------------------------------------------------------------------------------------------
-- Vocabulary (contracts/board-vocabulary.json; tests assert these against the file).

CREATE OR REPLACE FUNCTION mycelium.board_namespaces() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['decisions', 'status', 'work', 'failed']
$$;


CREATE OR REPLACE FUNCTION mycelium.board_statuses() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['open', 'in_review', 'resolved', 'dismissed']
$$;


CREATE OR REPLACE FUNCTION mycelium.board_kinds() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['decision', 'blocked', 'review', 'action', 'concern', 'signal']
$$;


CREATE OR REPLACE FUNCTION mycelium.board_priorities() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['urgent', 'high', 'normal', 'low']
$$;


CREATE OR REPLACE FUNCTION mycelium.settled_statuses() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['resolved', 'dismissed']
$$;


-- The lease's own fields: never written as frontmatter, refused by /fields.
CREATE OR REPLACE FUNCTION mycelium.reserved_lease_fields() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['assignment', 'owner', 'claimed_at', 'ttl_minutes', 'assignment_note', 'assignment_note_by']
$$;


CREATE OR REPLACE FUNCTION mycelium.is_board_key(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT p_key LIKE '%/%' AND split_part(p_key, '/', 1) = ANY (mycelium.board_namespaces())
$$;


-- (A SQL-standard body: queries that name it inline it, and a stored body is read back instead of
-- being parsed again.)
CREATE OR REPLACE FUNCTION mycelium.is_assignable_key(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE
RETURN p_key LIKE 'work/_%';


-- Everything the database believes about the board's closed sets, for the contract test.
CREATE OR REPLACE FUNCTION mycelium.board_vocabulary() RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'statuses', to_jsonb(mycelium.board_statuses()),
    'kinds', to_jsonb(mycelium.board_kinds()),
    'priorities', to_jsonb(mycelium.board_priorities()),
    'live_namespaces', to_jsonb(mycelium.board_namespaces()),
    'settled_statuses', to_jsonb(mycelium.settled_statuses()),
    'reserved', to_jsonb(mycelium.reserved_lease_fields()),
    'assignable_namespaces', jsonb_build_array('work'),
    'notice_subkinds', jsonb_build_array('filed', 'claimed', 'released', 'resolved', 'blocked',
                                         'unblocked', 'expired', 'floor'))
$$;


-- ---------------------------------------------------------------------------------------------
-- Handles, titles, slugs.

-- The one handle normalisation (service/mycelium/core/handles.py, contracts/mentions.json): trim
-- ASCII whitespace, drop leading '@', drop a '#session' suffix, trim again, lowercase A-Z only.
CREATE OR REPLACE FUNCTION mycelium.board_handle(p_handle text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT translate(
    btrim(split_part(ltrim(btrim(p_handle, E' \t\n\r\f' || chr(11)), '@'), '#', 1), E' \t\n\r\f' || chr(11)),
    'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
$$;


CREATE OR REPLACE FUNCTION mycelium.board_handle_problem(p_handle text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE h text := mycelium.board_handle(p_handle);
BEGIN
  RETURN CASE
    WHEN h IS NULL OR h = '' THEN 'blank'
    WHEN length(h) > 64 THEN 'too_long'
    WHEN h !~ '^[a-z0-9]' THEN 'bad_start'
    WHEN h !~ '^[a-z0-9_-]*$' THEN 'bad_character'
  END;
END
$$;


-- A valid normalised handle, or a 422 naming what is wrong with it.
-- (Every verb calls it: a valid handle costs one normalisation and one match; only a bad one is
-- examined further.)
CREATE OR REPLACE FUNCTION mycelium.board_require_handle(p_handle text, p_what text DEFAULT 'handle') RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  h text := mycelium.board_handle(p_handle);
  problem text;
BEGIN
  IF h ~ '^[a-z0-9][a-z0-9_-]{0,63}$' THEN
    RETURN h;
  END IF;
  problem := mycelium.board_handle_problem(p_handle);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_handle',
      format('%s %L is not a handle: %s', p_what, coalesce(p_handle, ''), CASE problem
        WHEN 'blank' THEN 'a handle must not be blank'
        WHEN 'too_long' THEN 'a handle has at most 64 characters'
        WHEN 'bad_start' THEN 'a handle must start with a letter a-z or a digit'
        ELSE 'a handle may contain only a-z, 0-9, ''_'' and ''-''' END),
      jsonb_build_object('field', p_what, 'problem', problem));
  END IF;
  RETURN h;
END
$$;


-- A row's title: frontmatter `title`, else the first non-empty body line without leading '#'.
-- (The body's line, when there is no frontmatter title, in PL/pgSQL: a loop over the lines that stops
-- at the first one costs less than a SQL function splitting the whole text into a set. memory_title
-- itself is one SQL expression, inlined where it is named, so a notice or a lease read with a
-- frontmatter title, as every task has, calls no function for it: two per claim or resolve.)
CREATE OR REPLACE FUNCTION mycelium.memory_body_title(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE line text;
BEGIN
  FOREACH line IN ARRAY string_to_array(coalesce(p_text, ''), E'\n') LOOP
    IF btrim(line) <> '' THEN
      RETURN nullif(btrim(regexp_replace(line, '^\s*#+\s*', '')), '');
    END IF;
  END LOOP;
  RETURN NULL;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.memory_title(p_value jsonb, p_meta jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(nullif(btrim(p_meta ->> 'title'), ''), mycelium.memory_body_title(p_value ->> 'text'))
$$;


-- The key slug of a task title: lowercased, runs of anything but a-z0-9 become '-', trimmed,
-- at most 48 characters, 'task' when nothing is left. Deterministic: the same title lands on the
-- same row.
-- NULL when the title has no slug characters at all ('!!!', '🚀'): such a task gets a short unique key.
CREATE OR REPLACE FUNCTION mycelium.task_slug(p_title text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT nullif(btrim(left(btrim(regexp_replace(lower(coalesce(p_title, '')), '[^a-z0-9]+', '-', 'g'),
                               '-'), 48), '-'), '')
$$;


-- The key a new task of this title gets: work/<slug>, else work/<slug>-2, -3, … (the first not taken),
-- or work/task-<8 hex> for a title without slug characters. The caller holds the room's task-key lock.
CREATE OR REPLACE FUNCTION mycelium.free_task_key(p_room text, p_title text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  base text := 'work/' || mycelium.task_slug(p_title);
  k text := base;
  n integer := 1;
BEGIN
  LOOP
    IF base IS NULL THEN
      k := 'work/task-' || left(md5(gen_random_uuid()::text), 8);
    END IF;
    EXIT WHEN NOT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = k);
    n := n + 1;
    k := base || '-' || n;
  END LOOP;
  RETURN k;
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Row <-> thread lookups (the conversations feature uses them for floor notices and search).

CREATE OR REPLACE FUNCTION mycelium.episode_of(p_room text, p_key text) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT episode FROM mycelium.memories WHERE room = p_room AND key = p_key
$$;


-- The row bound to a thread (a full URN, or its short id), with its title; no row when none is.
CREATE OR REPLACE FUNCTION mycelium.row_of_episode(p_room text, p_episode text)
RETURNS TABLE (key text, title text, board boolean) LANGUAGE sql STABLE AS $$
  SELECT m.key, mycelium.memory_title(m.value, m.meta), mycelium.is_board_key(m.key)
  FROM mycelium.memories m
  WHERE m.room = p_room
    AND m.episode = CASE WHEN p_episode LIKE '%:%' THEN p_episode
                         ELSE mycelium.episode_urn(p_room, p_episode) END
$$;


-- ---------------------------------------------------------------------------------------------
-- Dependencies: `depends-on` edges come from the links table (parsed from frontmatter by the
-- database on every write). A dependency is a prerequisite only while it is an existing, unsettled
-- board row; a context/ note or a missing key is a reference.

CREATE OR REPLACE VIEW mycelium.board_dependencies AS
  SELECT l.room, l.source_key AS key, l.target AS depends_on, min(l.ord) AS ord
  FROM mycelium.memory_links l
  WHERE l.kind = 'relation' AND l.relation = 'depends-on' AND l.cross_room IS NULL
  GROUP BY l.room, l.source_key, l.target;


-- Settled: status resolved or dismissed, or the lease resolved.
CREATE OR REPLACE FUNCTION mycelium.row_settled(p_meta jsonb, p_lease_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(p_meta ->> 'status' = ANY (mycelium.settled_statuses()), false)
      OR coalesce(p_lease_state = 'resolved', false)
$$;


-- Refuse a depends-on edge that closes a cycle between board rows. Edges are checked one room at
-- a time under a transaction advisory lock, so two writers cannot each add half of a cycle.
-- The search visits each edge once: `reach` holds (row, the row it was reached from), and UNION
-- drops a pair already seen, so a graph where many paths share rows (each row depending on the two
-- before it) costs its edges, not its paths. When the new edge's source is reached, one path back
-- to the target is read off the `via` pointers (the graph before the edge has no cycle, so the walk
-- ends at the target; it never revisits a row in any case).
CREATE OR REPLACE FUNCTION mycelium.memory_links_no_dependency_cycle() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  loop_path text[];
BEGIN
  IF NEW.cross_room IS NOT NULL OR NOT mycelium.is_board_key(NEW.source_key)
     OR NOT mycelium.is_board_key(NEW.target) THEN
    RETURN NULL;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('mycelium.depends-on:' || NEW.room, 0));
  IF NEW.target = NEW.source_key THEN
    loop_path := ARRAY[NEW.source_key, NEW.source_key];
  ELSE
    WITH RECURSIVE reach (k, via) AS (
      SELECT NEW.target, NULL::text
      UNION
      SELECT d.depends_on, r.k
      FROM reach r
      JOIN mycelium.board_dependencies d ON d.room = NEW.room AND d.key = r.k
      WHERE mycelium.is_board_key(d.depends_on) AND r.k <> NEW.source_key
    ), back (k, path) AS (
      SELECT NEW.source_key, ARRAY[NEW.source_key]
      WHERE EXISTS (SELECT FROM reach WHERE reach.k = NEW.source_key)
      UNION ALL
      SELECT p.via, p.via || b.path
      FROM back b
      CROSS JOIN LATERAL (SELECT r.via FROM reach r WHERE r.k = b.k AND r.via IS NOT NULL
                          ORDER BY r.via LIMIT 1) p
      WHERE b.k <> NEW.target AND NOT p.via = ANY (b.path)
    )
    SELECT NEW.source_key || path INTO loop_path FROM back WHERE k = NEW.target;
  END IF;
  IF loop_path IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'dependency_cycle',
      format('%L cannot depend on %L: that closes a cycle (%s)', NEW.source_key, NEW.target,
             array_to_string(loop_path, ' -> ')),
      jsonb_build_object('key', NEW.source_key, 'depends_on', NEW.target, 'cycle', to_jsonb(loop_path)));
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memory_links_no_dependency_cycle AFTER INSERT ON mycelium.memory_links
  FOR EACH ROW WHEN (NEW.kind = 'relation' AND NEW.relation = 'depends-on')
  EXECUTE FUNCTION mycelium.memory_links_no_dependency_cycle();


-- ---------------------------------------------------------------------------------------------
-- Notices a board row raises. Every notice carries key, title and episode (the row's thread).

CREATE OR REPLACE FUNCTION mycelium.row_notice(p_room text, p_subkind text, p_key text, p_value jsonb, p_meta jsonb,
                                    p_episode text, p_data jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.post_notice(p_room, p_subkind, p_key,
    jsonb_build_object('title', mycelium.memory_title(p_value, p_meta), 'episode', p_episode)
    || coalesce(p_data, '{}'));
END
$$;


-- Raise `unblocked` for every unsettled work/ row that depended on one of p_settled and now waits
-- on nothing. Called once per statement with every row that became settled in it.
CREATE OR REPLACE FUNCTION mycelium.raise_unblocked(p_room text, p_settled text[], p_by text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  dependent text;
  m mycelium.memories;
  lease_state text;
  n integer := 0;
BEGIN
  -- the dependents, found from the settled rows' backlinks (an index scan, however big the board)
  FOR dependent IN
    SELECT DISTINCT l.source_key FROM mycelium.memory_links l
    WHERE l.room = p_room AND l.target = ANY (p_settled) AND l.kind = 'relation'
      AND l.relation = 'depends-on' AND l.cross_room IS NULL AND mycelium.is_assignable_key(l.source_key)
    ORDER BY 1
  LOOP
    SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = dependent;
    CONTINUE WHEN NOT FOUND;
    SELECT a.state INTO lease_state FROM mycelium.assignments a WHERE a.room = p_room AND a.key = dependent;
    CONTINUE WHEN mycelium.row_settled(m.meta, lease_state)
               OR cardinality(mycelium.waiting_on(p_room, dependent)) > 0;
    PERFORM mycelium.row_notice(p_room, 'unblocked', dependent, m.value, m.meta, m.episode,
                                jsonb_build_object('by', p_by, 'after', to_jsonb(p_settled)));
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.board_rows_filed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT * FROM new_rows WHERE mycelium.is_board_key(key) ORDER BY key LOOP
    PERFORM mycelium.row_notice(r.room, 'filed', r.key, r.value, r.meta, r.episode,
      jsonb_build_object('kind', r.meta ->> 'kind', 'assignee', r.meta ->> 'assignee', 'by', r.created_by));
  END LOOP;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER board_rows_filed AFTER INSERT ON mycelium.memories
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mycelium.board_rows_filed();


CREATE OR REPLACE FUNCTION mycelium.board_rows_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
  g record;
BEGIN
  FOR r IN
    SELECT n.room, n.key, n.value, n.meta, n.episode, n.updated_by,
           o.meta ->> 'blocked_by' AS was_blocked, n.meta ->> 'blocked_by' AS blocked
    FROM new_rows n JOIN old_rows o ON o.room = n.room AND o.key = n.key
    WHERE mycelium.is_board_key(n.key)
      AND (o.meta ->> 'blocked_by') IS DISTINCT FROM (n.meta ->> 'blocked_by')
    ORDER BY n.room, n.key
  LOOP
    IF r.blocked IS NOT NULL THEN
      PERFORM mycelium.row_notice(r.room, 'blocked', r.key, r.value, r.meta, r.episode,
                                  jsonb_build_object('by', r.updated_by, 'blocked_by', r.blocked));
    ELSE
      PERFORM mycelium.row_notice(r.room, 'unblocked', r.key, r.value, r.meta, r.episode,
                                  jsonb_build_object('by', r.updated_by, 'was_blocked_by', r.was_blocked));
    END IF;
  END LOOP;

  FOR g IN
    SELECT n.room, array_agg(n.key ORDER BY n.key) AS keys, min(n.updated_by) AS actor
    FROM new_rows n
    JOIN old_rows o ON o.room = n.room AND o.key = n.key
    LEFT JOIN mycelium.assignments a ON a.room = n.room AND a.key = n.key
    WHERE mycelium.is_board_key(n.key)
      AND mycelium.row_settled(n.meta, a.state) AND NOT mycelium.row_settled(o.meta, a.state)
    GROUP BY n.room
  LOOP
    PERFORM mycelium.raise_unblocked(g.room, g.keys, g.actor);
  END LOOP;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER board_rows_moved AFTER UPDATE ON mycelium.memories
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
  EXECUTE FUNCTION mycelium.board_rows_moved();


-- The lease fields are not frontmatter of a board row: whoever writes them there (the memory
-- route, /fields, a plain UPDATE) is refused, so no write can forge a lease.
CREATE OR REPLACE FUNCTION mycelium.board_rows_no_lease_fields() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE found text[];
BEGIN
  SELECT array_agg(k ORDER BY k) INTO found
  FROM jsonb_object_keys(NEW.meta) k
  WHERE k = ANY (mycelium.reserved_lease_fields())
    AND (TG_OP = 'INSERT' OR (NEW.meta -> k) IS DISTINCT FROM (OLD.meta -> k));
  IF found IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'reserved_fields',
      format('%s %s reserved for assignments: a lease changes only through claim, release, resolve '
             'and renew', array_to_string(found, ', '), CASE WHEN cardinality(found) = 1 THEN 'is' ELSE 'are' END),
      jsonb_build_object('key', NEW.key, 'reserved', to_jsonb(found)));
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER board_rows_no_lease_fields BEFORE INSERT OR UPDATE OF meta ON mycelium.memories
  FOR EACH ROW WHEN (mycelium.is_board_key(NEW.key))
  EXECUTE FUNCTION mycelium.board_rows_no_lease_fields();


-- ---------------------------------------------------------------------------------------------
-- The dependency gate setting: mycelium.config 'board.dependency_gate' (per room, else hub-wide),
-- off by default.

CREATE OR REPLACE FUNCTION mycelium.dependency_gate_on(p_room text) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT coalesce(mycelium.config_value('board.dependency_gate', p_room) = 'true'::jsonb, false)
$$;


CREATE OR REPLACE FUNCTION mycelium.set_dependency_gate(p_on boolean, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('set_dependency_gate');
  IF coalesce(p_room, '') <> '' THEN
    PERFORM mycelium.require_room(p_room);
  END IF;
  PERFORM mycelium.set_config('board.dependency_gate', to_jsonb(p_on), coalesce(p_room, ''),
                              mycelium.author(p_by, 'handle'));
  RETURN mycelium.dependency_gate_on(nullif(p_room, ''));
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Field writes: frontmatter of one existing memory; a JSON null clears a field; prose, tags and
-- the vector are untouched; version +1. Lease fields are refused (all of the write, 422).

CREATE OR REPLACE FUNCTION mycelium.write_fields(p_room text, p_key text, p_by text, p_fields jsonb)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  by_handle text;
  cur mycelium.memories;
  bad text[];
  f record;
  allowed text[];
BEGIN
  PERFORM mycelium.require_room(p_room);
  by_handle := mycelium.author(p_by, 'handle');
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'a field write names who writes it (handle)');
  END IF;
  IF p_fields IS NULL OR jsonb_typeof(p_fields) <> 'object' OR p_fields = '{}'::jsonb THEN
    PERFORM mycelium.refuse(422, 'empty_fields', 'fields is empty: name at least one field to write',
                            jsonb_build_object('key', p_key));
  END IF;
  SELECT array_agg(k ORDER BY k) INTO bad FROM jsonb_object_keys(p_fields) k
  WHERE k = ANY (mycelium.reserved_lease_fields());
  IF bad IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'reserved_fields',
      format('%s %s reserved for assignments: use claim, release, resolve or renew; nothing was written',
             array_to_string(bad, ', '), CASE WHEN cardinality(bad) = 1 THEN 'is' ELSE 'are' END),
      jsonb_build_object('key', p_key, 'reserved', to_jsonb(bad)));
  END IF;
  SELECT array_agg(k ORDER BY k) INTO bad FROM jsonb_object_keys(p_fields) k
  WHERE k = ANY (mycelium.managed_memory_keys());
  IF bad IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'managed_fields',
      format('%s %s kept by the store and cannot be written', array_to_string(bad, ', '),
             CASE WHEN cardinality(bad) = 1 THEN 'is' ELSE 'are' END),
      jsonb_build_object('key', p_key, 'managed', to_jsonb(bad)));
  END IF;
  IF mycelium.is_board_key(p_key) THEN
    FOR f IN SELECT * FROM jsonb_each(p_fields) WHERE key IN ('status', 'kind', 'priority') LOOP
      CONTINUE WHEN jsonb_typeof(f.value) = 'null';
      allowed := CASE f.key WHEN 'status' THEN mycelium.board_statuses()
                            WHEN 'kind' THEN mycelium.board_kinds() ELSE mycelium.board_priorities() END;
      IF jsonb_typeof(f.value) <> 'string' OR NOT (f.value #>> '{}') = ANY (allowed) THEN
        PERFORM mycelium.refuse(422, 'invalid_field_value',
          format('%s must be one of %s, not %s', f.key, array_to_string(allowed, ', '), f.value::text),
          jsonb_build_object('key', p_key, 'field', f.key, 'allowed', to_jsonb(allowed)));
      END IF;
    END LOOP;
  END IF;
  SELECT * INTO cur FROM mycelium.memories WHERE room = p_room AND key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN mycelium.write_memory(p_room, p_key, cur.value, by_handle, NULL, p_fields, cur.content_text,
                               NULL, NULL, false);
END
$$;


-- The user's fields of a memory: its frontmatter without the lease fields.
CREATE OR REPLACE FUNCTION mycelium.read_fields(p_room text, p_key text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE m mycelium.memories;
BEGIN
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key;
  IF NOT FOUND THEN
    PERFORM mycelium.require_room(p_room);
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN m.meta - mycelium.reserved_lease_fields();
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Board verbs over fields (their notices come from the triggers above).

CREATE OR REPLACE FUNCTION mycelium.require_board_row(p_room text, p_key text) RETURNS mycelium.memories
LANGUAGE plpgsql STABLE AS $$
DECLARE m mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF NOT mycelium.is_board_key(coalesce(p_key, '')) THEN
    PERFORM mycelium.refuse(422, 'not_a_board_row',
      format('%L is not a board row: board rows live in %s', p_key,
             array_to_string(ARRAY(SELECT n || '/' FROM unnest(mycelium.board_namespaces()) n), ' ')),
      jsonb_build_object('key', p_key));
  END IF;
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in this room', p_key),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN m;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.block_row(p_room text, p_key text, p_by text, p_on text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  IF p_on IS NULL OR btrim(p_on) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_blocker', 'say what the row is blocked on (e.g. "#502")',
                            jsonb_build_object('key', p_key));
  END IF;
  RETURN mycelium.write_fields(p_room, p_key, mycelium.board_require_handle(mycelium.author(p_by)),
                               jsonb_build_object('blocked_by', btrim(p_on)));
END
$$;


CREATE OR REPLACE FUNCTION mycelium.unblock_row(p_room text, p_key text, p_by text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE m mycelium.memories := mycelium.require_board_row(p_room, p_key);
BEGIN
  IF NOT m.meta ? 'blocked_by' THEN
    PERFORM mycelium.refuse(409, 'not_blocked', format('%L is not blocked', p_key),
                            jsonb_build_object('key', p_key));
  END IF;
  RETURN mycelium.write_fields(p_room, p_key, mycelium.board_require_handle(mycelium.author(p_by)),
                               '{"blocked_by": null}');
END
$$;


CREATE OR REPLACE FUNCTION mycelium.dismiss_row(p_room text, p_key text, p_by text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  RETURN mycelium.write_fields(p_room, p_key, mycelium.board_require_handle(mycelium.author(p_by)),
                               '{"status": "dismissed"}');
END
$$;


-- Promote: the row is owned elsewhere now (an issue, a PR); it is resolved here and says where.
CREATE OR REPLACE FUNCTION mycelium.promote_row(p_room text, p_key text, p_by text, p_url text DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE h text := mycelium.board_require_handle(mycelium.author(p_by));
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  RETURN mycelium.write_fields(p_room, p_key, h,
    jsonb_build_object('status', 'resolved', 'promoted_by', h)
    || CASE WHEN nullif(btrim(p_url), '') IS NOT NULL THEN jsonb_build_object('upstream_url', btrim(p_url))
            ELSE '{}' END);
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Tasks: file a row in work/ (status open, kind action), optionally for someone and under a parent.

-- A task never lands on an existing row: a title takes the first free key (free_task_key), an explicit
-- key that exists is refused (409 task_exists). Filers of one room take turns on a transaction lock,
-- so two filing the same title at once get two keys; the write itself is create-only (base version
-- 0), so even a plain write_memory racing in cannot be overwritten. depends-on is written with the
-- row, in its first version.
CREATE OR REPLACE FUNCTION mycelium.create_task(p_room text, p_title text, p_by text, p_key text DEFAULT NULL,
                                     p_assignee text DEFAULT NULL, p_parent text DEFAULT NULL,
                                     p_depends_on text[] DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  by_handle text;
  k text := nullif(btrim(p_key), '');
  deps text[];
  meta jsonb := jsonb_build_object('status', 'open', 'kind', 'action');
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_title IS NULL OR btrim(p_title) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_title', 'a task needs a title');
  END IF;
  by_handle := mycelium.board_require_handle(mycelium.author(p_by));
  IF k IS NOT NULL AND NOT mycelium.is_board_key(k) THEN
    PERFORM mycelium.refuse(422, 'not_a_board_row',
      format('%L is not a board row: a task lives in work/ (or decisions/ status/ failed/)', k),
      jsonb_build_object('key', k));
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('mycelium.task-key:' || p_room, 0));
  IF k IS NULL THEN
    k := mycelium.free_task_key(p_room, p_title);
  ELSIF EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = k) THEN
    PERFORM mycelium.refuse(409, 'task_exists',
      format('%L already exists in room %L: file the task under another key, or leave the key out', k, p_room),
      jsonb_build_object('room', p_room, 'key', k));
  END IF;
  IF nullif(btrim(p_assignee), '') IS NOT NULL THEN
    meta := meta || jsonb_build_object('assignee', mycelium.board_require_handle(p_assignee, 'assignee'));
  END IF;
  IF nullif(btrim(p_parent), '') IS NOT NULL THEN
    IF NOT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = btrim(p_parent)) THEN
      PERFORM mycelium.refuse(404, 'parent_not_found',
        format('No task %L in room %L to parent to', btrim(p_parent), p_room),
        jsonb_build_object('room', p_room, 'parent', btrim(p_parent)));
    END IF;
    IF btrim(p_parent) = k THEN
      PERFORM mycelium.refuse(422, 'invalid_parent', 'a task cannot be its own parent',
                              jsonb_build_object('key', k));
    END IF;
    meta := meta || jsonb_build_object('part-of', btrim(p_parent));
  END IF;
  SELECT array_agg(d ORDER BY o) INTO deps
  FROM (SELECT DISTINCT ON (btrim(d)) btrim(d) AS d, o FROM unnest(p_depends_on) WITH ORDINALITY u(d, o)
        WHERE nullif(btrim(d), '') IS NOT NULL ORDER BY btrim(d), o) x;
  IF k = ANY (deps) THEN
    PERFORM mycelium.refuse(422, 'invalid_dependency', format('%L cannot depend on itself', k),
                            jsonb_build_object('key', k));
  END IF;
  IF deps IS NOT NULL THEN
    meta := meta || jsonb_build_object('depends-on', to_jsonb(deps));
  END IF;
  RETURN mycelium.write_memory(p_room, k, jsonb_build_object('text', '# ' || btrim(p_title) || E'\n'),
                               by_handle, NULL, meta, NULL, 0);
END
$$;


-- (STABLE, as timestamptz + interval is: a SQL function declared IMMUTABLE over a STABLE operator is
-- never inlined, so every lease read and guard ran it as a function call of its own.)
CREATE OR REPLACE FUNCTION mycelium.task_lease_end(p_claimed_at timestamptz, p_ttl_minutes integer) RETURNS timestamptz
LANGUAGE sql STABLE RETURN p_claimed_at + make_interval(mins => p_ttl_minutes);


-- A held lease is live until claimed_at + ttl (by the database clock).
CREATE OR REPLACE FUNCTION mycelium.task_lease_live(a mycelium.assignments) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT a.state = 'held' AND a.owner IS NOT NULL AND now() < mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)
$$;


-- ---------------------------------------------------------------------------------------------
-- Derived state.

-- The dependencies a row waits on: existing, unsettled board rows it `depends-on`, in the order
-- they are written. (A set-returning function of one row, so that a read of many rows — the board
-- views — has the planner fold it into its own plan, where a call per row costs a function call
-- each; waiting_on is the same answer as a value, for the verbs.)
CREATE OR REPLACE FUNCTION mycelium.row_waits(p_room text, p_key text) RETURNS TABLE (waiting_on text[])
LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(d.depends_on ORDER BY d.ord, d.depends_on), '{}')
  FROM mycelium.board_dependencies d
  JOIN mycelium.memories m ON m.room = d.room AND m.key = d.depends_on
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  WHERE d.room = p_room AND d.key = p_key AND mycelium.is_board_key(d.depends_on)
    AND NOT mycelium.row_settled(m.meta, a.state)
$$;


CREATE OR REPLACE FUNCTION mycelium.waiting_on(p_room text, p_key text) RETURNS text[] LANGUAGE sql STABLE AS $$
  SELECT w.waiting_on FROM mycelium.row_waits(p_room, p_key) w
$$;


-- The derived state of a lease row (NULL when never leased): unclaimed, held, expired, released or
-- resolved.
CREATE OR REPLACE FUNCTION mycelium.lease_assignment(a mycelium.assignments) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN a.state IS NULL THEN 'unclaimed'
    WHEN a.state <> 'held' THEN a.state
    WHEN a.owner IS NULL THEN 'unclaimed'
    WHEN now() < mycelium.task_lease_end(a.claimed_at, a.ttl_minutes) THEN 'held'
    ELSE 'expired' END
$$;


-- (One ROW expression: the planner inlines it into the caller, so a read is built without a
-- function call of its own.)
CREATE OR REPLACE FUNCTION mycelium.lease_read(m mycelium.memories, a mycelium.assignments)
RETURNS mycelium.lease_read LANGUAGE sql STABLE AS $$
  SELECT ROW(
    m.room, m.key, m.episode, m.version, mycelium.memory_title(m.value, m.meta),
    mycelium.lease_assignment(a), a.state, a.owner, a.claimed_at, a.ttl_minutes,
    mycelium.task_lease_end(a.claimed_at, a.ttl_minutes),
    CASE WHEN a.claimed_at IS NULL OR a.ttl_minutes IS NULL THEN NULL
         WHEN now() >= mycelium.task_lease_end(a.claimed_at, a.ttl_minutes) THEN 'expired'
         WHEN (now() - a.claimed_at) * 2 < make_interval(mins => a.ttl_minutes) THEN 'fresh'
         ELSE 'stale' END,
    CASE WHEN mycelium.lease_assignment(a) = 'expired' THEN format('expired — @%s stopped renewing', a.owner)
         ELSE a.note END,
    CASE WHEN mycelium.lease_assignment(a) = 'expired' THEN 'runtime' ELSE a.note_by END,
    mycelium.waiting_on(m.room, m.key), a.claim_id, coalesce(a.version, 0))::mycelium.lease_read
$$;


-- The answer of a verb that has just written lease a: lease_read without the clock, which that
-- write fixed. A claim has just started (claimed_at = now(): held, fresh, no note); a release or a
-- resolve does not run out (its own state, its note). A smaller expression than lease_read's, which
-- a verb compiles again in every transaction. p_waiting_on is what the row waits on, read by the verb
-- before its write (a lease never changes what its own row waits on): the verbs append their notice,
-- which takes the room's timeline lock, as late as they can, so nothing slow runs between it and the
-- commit. (tests/board: each verb's answer equals a read of the lease in the same transaction.)
CREATE OR REPLACE FUNCTION mycelium.lease_written(m mycelium.memories, a mycelium.assignments, p_waiting_on text[])
RETURNS mycelium.lease_read LANGUAGE sql STABLE AS $$
  SELECT ROW(
    m.room, m.key, m.episode, m.version, mycelium.memory_title(m.value, m.meta), a.state, a.state, a.owner,
    a.claimed_at, a.ttl_minutes, mycelium.task_lease_end(a.claimed_at, a.ttl_minutes),
    CASE WHEN a.state = 'held' THEN 'fresh' END, a.note, a.note_by, p_waiting_on, a.claim_id,
    a.version)::mycelium.lease_read
$$;


-- Every work/ row's lease. (room and key are the memory's own columns, not the function's, so a
-- filter on them reaches the memories' index and the lease is derived for the rows asked for only.
-- The lease is expanded column by column, `(lease_read(m, a)).*`, not read as one value from a
-- function in FROM: the planner then computes only the columns a read uses, where a function scan
-- builds every column of every row, what it waits on included.)
CREATE OR REPLACE VIEW mycelium.lease_states AS
  SELECT m.room, m.key, l.episode, l.version, l.title, l.assignment, l.stored_state, l.owner, l.claimed_at,
         l.ttl_minutes, l.expires_at, l.freshness, l.assignment_note, l.assignment_note_by, l.waiting_on,
         l.claim_id, l.lease_version
  FROM mycelium.memories m
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  CROSS JOIN LATERAL (SELECT (mycelium.lease_read(m, a)).*) l
  WHERE mycelium.is_assignable_key(m.key);


-- Every board row with what a board shows: status, kind, priority, lease, what it waits on, and
-- where it needs attention (resolved > in_flight > needs_you). The lease is derived from the row's
-- own memory and lease row, for the board rows a read asks for only; what it waits on is row_waits
-- planned into the read (the lease's own waiting_on column is not computed here).
CREATE OR REPLACE VIEW mycelium.board_rows AS
  SELECT m.room, m.key, split_part(m.key, '/', 1) AS namespace,
         mycelium.memory_title(m.value, m.meta) AS title,
         m.meta ->> 'status' AS status, m.meta ->> 'kind' AS kind, m.meta ->> 'priority' AS priority,
         m.meta ->> 'assignee' AS assignee, m.meta ->> 'blocked_by' AS blocked_by,
         m.meta ->> 'part-of' AS parent,
         m.episode, mycelium.episode_short_id(m.episode) AS short_id,
         m.version, m.created_by, m.updated_by, m.created_at, m.updated_at,
         l.assignment, l.owner, l.claimed_at, l.ttl_minutes, l.expires_at, l.freshness,
         w.waiting_on,
         CASE WHEN mycelium.row_settled(m.meta, l.stored_state) THEN 'resolved'
              WHEN m.meta ->> 'status' = 'in_review' OR l.assignment = 'held' THEN 'in_flight'
              ELSE 'needs_you' END AS attention
  FROM mycelium.memories m
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  LEFT JOIN LATERAL (SELECT (mycelium.lease_read(m, a)).*) l ON mycelium.is_assignable_key(m.key)
  CROSS JOIN LATERAL mycelium.row_waits(m.room, m.key) w
  WHERE mycelium.is_board_key(m.key);


-- ---------------------------------------------------------------------------------------------
-- Guards and notices.

CREATE OR REPLACE FUNCTION mycelium.assignments_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  old_live boolean := TG_OP = 'UPDATE' AND mycelium.task_lease_live(OLD);
BEGIN
  IF NEW.claimed_at > now() + interval '1 second' THEN
    PERFORM mycelium.refuse(422, 'claimed_in_future', 'a lease cannot be claimed in the future',
                            jsonb_build_object('key', NEW.key, 'claimed_at', NEW.claimed_at));
  END IF;
  IF TG_OP = 'UPDATE' THEN
    IF (NEW.room, NEW.key) IS DISTINCT FROM (OLD.room, OLD.key) THEN
      PERFORM mycelium.refuse(409, 'immutable', 'a lease stays on its row: room and key never change',
                              jsonb_build_object('key', OLD.key));
    END IF;
    IF old_live AND NEW.state = 'held' AND NEW.owner IS DISTINCT FROM OLD.owner THEN
      PERFORM mycelium.refuse(409, 'lease_held', format('%L is held by @%s', OLD.key, OLD.owner),
        jsonb_build_object('key', OLD.key, 'owner', OLD.owner, 'claimed_at', OLD.claimed_at,
                           'ttl_minutes', OLD.ttl_minutes));
    END IF;
    IF NOT old_live AND OLD.state = 'held' AND NEW.state = 'held' AND NEW.owner = OLD.owner
       AND NEW.claim_id IS NOT DISTINCT FROM OLD.claim_id
       AND (NEW.claimed_at, NEW.ttl_minutes) IS DISTINCT FROM (OLD.claimed_at, OLD.ttl_minutes) THEN
      PERFORM mycelium.refuse(409, 'lease_expired',
        format('the lease of @%s on %L has expired: claim it again instead of renewing it', OLD.owner, OLD.key),
        jsonb_build_object('key', OLD.key, 'owner', OLD.owner));
    END IF;
    NEW.version := OLD.version + 1;
    -- someone takes the row: that is a new lease, with its own number
    IF NEW.state = 'held' AND NEW.claim_id IS NOT DISTINCT FROM OLD.claim_id
       AND (OLD.state <> 'held' OR NEW.owner IS DISTINCT FROM OLD.owner) THEN
      NEW.claim_id := nextval('mycelium.claim_ids');
    END IF;
  ELSE
    NEW.version := 1;
    IF NEW.state = 'held' AND NEW.claim_id IS NULL THEN
      NEW.claim_id := nextval('mycelium.claim_ids');
    END IF;
  END IF;
  IF NEW.state = 'held' AND (NEW.owner IS NULL OR NEW.claimed_at IS NULL OR NEW.ttl_minutes IS NULL
                             OR NEW.claim_id IS NULL) THEN
    PERFORM mycelium.refuse(422, 'incomplete_lease', 'a held lease names its owner, claimed_at, ttl_minutes and claim_id',
                            jsonb_build_object('key', NEW.key));
  END IF;
  NEW.updated_by := mycelium.actor();
  NEW.updated_at := now();
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER assignments_before_write BEFORE INSERT OR UPDATE ON mycelium.assignments
  FOR EACH ROW EXECUTE FUNCTION mycelium.assignments_before_write();


-- Announce the expiry of lease p (a held lease whose time is up) unless it was announced already.
CREATE OR REPLACE FUNCTION mycelium.announce_expiry(p mycelium.assignments, p_by text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE m mycelium.memories;
BEGIN
  INSERT INTO mycelium.lease_expiries (claim_id, room, key, owner, expired_at, announced_by)
  VALUES (p.claim_id, p.room, p.key, p.owner, mycelium.task_lease_end(p.claimed_at, p.ttl_minutes), p_by)
  ON CONFLICT (claim_id) DO NOTHING;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  SELECT * INTO m FROM mycelium.memories WHERE room = p.room AND key = p.key;
  PERFORM mycelium.row_notice(p.room, 'expired', p.key, m.value, m.meta, m.episode,
    jsonb_build_object('by', p.owner, 'claimed_at', p.claimed_at, 'ttl_minutes', p.ttl_minutes));
  RETURN true;
END
$$;


-- (Only a write that raises a notice reads the row, once: its title and thread for the notice and,
-- for a resolve, whether anything depends on it; the notice is posted directly. This runs on every
-- lease write.)
--
-- A resolve settles the row: its dependents that now wait on nothing hear `unblocked`, once per
-- statement however many of their prerequisites the statement settled. A resolve that something
-- depends on is noted (room, key, who) in a transaction-local setting; the statement trigger below
-- raises the notices for everything noted and clears it, and returns at once when nothing was (a
-- claim, release or renew, a row nothing waits on), so no other write pays for transition tables or
-- a query. A row settled by its status already unblocked its dependents then. Before it is noted,
-- such a row is locked FOR NO KEY UPDATE and its status read again, so a field write settling it at
-- the same time (a plain UPDATE of the lease too) is either seen or waits for this commit.
CREATE OR REPLACE FUNCTION mycelium.assignments_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  title text;
  thread text;
  waited_on boolean;
  subkind text;
  extra jsonb;
  noted text;
  by_handle text := mycelium.actor();
  kept text;
BEGIN
  kept := mycelium.wake_hint('mycelium_board', NEW.room);  -- by assignment: a PERFORM starts a query
  IF TG_OP = 'UPDATE' AND OLD.state = 'held' AND NOT mycelium.task_lease_live(OLD)
     AND (NEW.claim_id IS DISTINCT FROM OLD.claim_id OR NEW.state <> 'held') THEN
    PERFORM mycelium.announce_expiry(OLD, by_handle);
  END IF;
  IF NEW.state = 'held' AND (TG_OP = 'INSERT' OR NEW.claim_id IS DISTINCT FROM OLD.claim_id) THEN
    subkind := 'claimed';
    extra := jsonb_build_object('by', NEW.owner, 'ttl_minutes', NEW.ttl_minutes);
  ELSIF NEW.state <> 'held' AND (TG_OP = 'INSERT' OR NEW.state <> OLD.state) THEN
    subkind := NEW.state;
    extra := jsonb_build_object('by', coalesce(NEW.note_by, by_handle), 'note', NEW.note);
    -- ended by someone other than the live lease's holder: a forced release, a reviewer's resolve
    IF TG_OP = 'UPDATE' AND mycelium.task_lease_live(OLD) AND OLD.owner <> coalesce(NEW.note_by, by_handle) THEN
      extra := extra || jsonb_build_object('holder', OLD.owner)
               || CASE WHEN NEW.state = 'released' THEN '{"forced": true}'::jsonb ELSE '{}' END;
    END IF;
  ELSE
    RETURN NULL;
  END IF;
  SELECT mycelium.memory_title(m.value, m.meta), m.episode,
         CASE WHEN NEW.state = 'resolved' THEN NOT mycelium.row_settled(m.meta, NULL) AND EXISTS (
           SELECT 1 FROM mycelium.memory_links l
           WHERE l.room = m.room AND l.target = m.key AND l.kind = 'relation' AND l.relation = 'depends-on'
             AND l.cross_room IS NULL) END
  INTO title, thread, waited_on
  FROM mycelium.memories m WHERE m.room = NEW.room AND m.key = NEW.key;
  IF waited_on THEN
    -- read its status again under the row lock (taken already when resolve_task saw the dependents)
    SELECT NOT mycelium.row_settled(m.meta, NULL) INTO waited_on
    FROM mycelium.memories m WHERE m.room = NEW.room AND m.key = NEW.key
    FOR NO KEY UPDATE;
  END IF;
  PERFORM mycelium.post_notice(NEW.room, subkind, NEW.key,
                               jsonb_build_object('title', title, 'episode', thread) || extra);
  IF coalesce(waited_on, false) THEN
    noted := nullif(current_setting('mycelium.settled_leases', true), '');
    noted := set_config('mycelium.settled_leases',
      (coalesce(noted::jsonb, '[]') || jsonb_build_array(jsonb_build_array(
        NEW.room, NEW.key, coalesce(NEW.note_by, NEW.updated_by))))::text, true);
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER assignments_after_write AFTER INSERT OR UPDATE ON mycelium.assignments
  FOR EACH ROW EXECUTE FUNCTION mycelium.assignments_after_write();


CREATE OR REPLACE FUNCTION mycelium.assignments_raise_unblocked() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  noted text := nullif(current_setting('mycelium.settled_leases', true), '');
  g record;
BEGIN
  IF noted IS NULL THEN
    RETURN NULL;
  END IF;
  PERFORM set_config('mycelium.settled_leases', '', true);
  FOR g IN
    SELECT s ->> 0 AS room, array_agg(DISTINCT s ->> 1 ORDER BY s ->> 1) AS keys, min(s ->> 2) AS actor
    FROM jsonb_array_elements(noted::jsonb) s
    GROUP BY 1
  LOOP
    PERFORM mycelium.raise_unblocked(g.room, g.keys, g.actor);
  END LOOP;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER assignments_settled AFTER INSERT OR UPDATE ON mycelium.assignments
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.assignments_raise_unblocked();


CREATE OR REPLACE FUNCTION mycelium.assignments_before_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF mycelium.task_lease_live(OLD) AND EXISTS (SELECT 1 FROM mycelium.memories WHERE room = OLD.room AND key = OLD.key) THEN
    PERFORM mycelium.refuse(409, 'lease_held',
      format('%L is held by @%s: release it rather than deleting the lease', OLD.key, OLD.owner),
      jsonb_build_object('key', OLD.key, 'owner', OLD.owner));
  END IF;
  RETURN OLD;
END
$$;

CREATE OR REPLACE TRIGGER assignments_before_delete BEFORE DELETE ON mycelium.assignments
  FOR EACH ROW EXECUTE FUNCTION mycelium.assignments_before_delete();


-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Why a lease verb found no row to work on: 422 outside work/, else 404 (no such room or memory).
-- Called only once the verb's one read came back empty, so a verb that finds its row pays nothing.
CREATE OR REPLACE FUNCTION mycelium.refuse_task_lease(p_room text, p_key text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF NOT mycelium.is_assignable_key(coalesce(p_key, '')) THEN
    PERFORM mycelium.refuse(422, 'not_assignable',
      format('leases live on work/ memories; %L is elsewhere', p_key), jsonb_build_object('key', p_key));
  END IF;
  PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in this room', p_key),
                          jsonb_build_object('room', p_room, 'key', p_key));
END
$$;


-- The lease of one work/ row, or the refusal upstream gives: 422 outside work/, 404 if missing.
CREATE OR REPLACE FUNCTION mycelium.read_assignment(p_room text, p_key text) RETURNS mycelium.lease_read
LANGUAGE plpgsql STABLE AS $$
DECLARE
  m mycelium.memories;
  a mycelium.assignments;
BEGIN
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key AND mycelium.is_assignable_key(key);
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  SELECT * INTO a FROM mycelium.assignments WHERE room = p_room AND key = p_key;
  RETURN mycelium.lease_read(m, a);
END
$$;


-- The verbs below each read their row once, through task_row_of (only the columns a lease read and
-- a notice name, so a stored vector is never fetched; whether the row depends on anything, so a row
-- without an edge skips the dependency query; for resolve, whether anything depends on it, so only
-- then is it locked), decide, and make one write to mycelium.assignments, whose triggers keep the
-- rules and append the notice; what the row waits on is read before that write, so after the notice
-- (which holds the room's timeline counter until the commit) only the answer is built.
-- task_row_of is a SQL function over one SELECT, so each verb's query inlines it: no call at run
-- time, and a column a verb does not name is not computed. It finds no row outside work/.
CREATE OR REPLACE FUNCTION mycelium.task_row_of(p_room text, p_key text)
RETURNS TABLE (episode text, version integer, value jsonb, meta jsonb, depends boolean, depended boolean)
LANGUAGE sql STABLE AS $$
  SELECT x.episode, x.version, x.value, x.meta,
         EXISTS (SELECT 1 FROM mycelium.memory_links l WHERE l.room = x.room AND l.source_key = x.key
                   AND l.kind = 'relation' AND l.relation = 'depends-on'),
         EXISTS (SELECT 1 FROM mycelium.memory_links l WHERE l.room = x.room AND l.target = x.key
                   AND l.kind = 'relation' AND l.relation = 'depends-on' AND l.cross_room IS NULL)
  FROM mycelium.memories x WHERE x.room = p_room AND x.key = p_key AND mycelium.is_assignable_key(x.key)
$$;


-- Claim: take the lease for p_ttl_minutes. Someone else's live lease -> 409 naming the holder;
-- the same holder refreshes; an expired lease is taken over. With the dependency gate on (and no
-- p_force) a row that still waits on something -> 409 with waiting_on.
-- One upsert: a first claim inserts the lease; a later one updates it, and the row lock that the
-- conflict takes makes concurrent claimants queue; the takeover of someone else's live lease is
-- refused by assignments_before_write, the same rule a direct UPDATE meets.
CREATE OR REPLACE FUNCTION mycelium.claim_task(p_room text, p_key text, p_handle text, p_ttl_minutes integer DEFAULT 30,
                                    p_force boolean DEFAULT false)
RETURNS mycelium.lease_read LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.board_require_handle(mycelium.author(p_handle));
  m mycelium.memories;
  a mycelium.assignments;
  depends boolean;
  waits text[];
BEGIN
  IF p_ttl_minutes IS NULL OR p_ttl_minutes < 1 THEN
    PERFORM mycelium.refuse(422, 'invalid_ttl', 'ttl_minutes is a whole number of minutes, 1 or more',
                            jsonb_build_object('key', p_key));
  END IF;
  SELECT r.episode, r.version, r.value, r.meta, r.depends
  INTO m.episode, m.version, m.value, m.meta, depends
  FROM mycelium.task_row_of(p_room, p_key) r;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  m.room := p_room;
  m.key := p_key;
  waits := CASE WHEN depends THEN mycelium.waiting_on(p_room, p_key) ELSE '{}' END;
  IF cardinality(waits) > 0 AND NOT coalesce(p_force, false) AND mycelium.dependency_gate_on(p_room) THEN
    SELECT * INTO a FROM mycelium.assignments x WHERE x.room = p_room AND x.key = p_key;
    IF mycelium.task_lease_live(a) AND a.owner <> h THEN  -- the holder is named first
      PERFORM mycelium.refuse(409, 'lease_held', format('%L is held by @%s', p_key, a.owner),
        jsonb_build_object('key', p_key, 'owner', a.owner, 'claimed_at', a.claimed_at,
                           'ttl_minutes', a.ttl_minutes));
    END IF;
    PERFORM mycelium.refuse(409, 'waiting', format('%L waits on %s', p_key, array_to_string(waits, ', ')),
                            jsonb_build_object('key', p_key, 'waiting_on', to_jsonb(waits)));
  END IF;
  h := set_config('mycelium.actor', h, true);
  INSERT INTO mycelium.assignments AS x (room, key, state, owner, claimed_at, ttl_minutes, claim_id)
  VALUES (p_room, p_key, 'held', h, now(), p_ttl_minutes, nextval('mycelium.claim_ids'))
  ON CONFLICT (room, key) DO UPDATE
  SET state = 'held', owner = h, claimed_at = now(), ttl_minutes = p_ttl_minutes, note = NULL, note_by = NULL,
      claim_id = excluded.claim_id
  RETURNING * INTO a;
  RETURN mycelium.lease_written(m, a, waits);
END
$$;


-- Release: the row is free again, with a note (default 'released') and who left it. A settled row
-- (resolved, dismissed: its status or its lease) is not re-opened (409 already_resolved); a live
-- lease someone else holds is released only with p_force (else 409 not_holder naming the holder),
-- and the `released` notice then names the holder and says it was forced (assignments_after_write).
-- The lease row is locked before it is judged, so a claim racing in is either seen or waits.
CREATE OR REPLACE FUNCTION mycelium.release_task(p_room text, p_key text, p_handle text, p_note text DEFAULT NULL,
                                      p_force boolean DEFAULT false)
RETURNS mycelium.lease_read LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.board_require_handle(mycelium.author(p_handle));
  m mycelium.memories;
  a mycelium.assignments;
  depends boolean;
  waits text[];
  v_note text := coalesce(nullif(btrim(p_note), ''), 'released');
BEGIN
  SELECT r.episode, r.version, r.value, r.meta, r.depends
  INTO m.episode, m.version, m.value, m.meta, depends
  FROM mycelium.task_row_of(p_room, p_key) r;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  m.room := p_room;
  m.key := p_key;
  SELECT * INTO a FROM mycelium.assignments x WHERE x.room = p_room AND x.key = p_key FOR UPDATE;
  IF mycelium.row_settled(m.meta, a.state) THEN
    PERFORM mycelium.refuse(409, 'already_resolved',
      format('%L is %s: a settled row is not released (claim it to work on it again)', p_key,
             CASE WHEN m.meta ->> 'status' = ANY (mycelium.settled_statuses()) THEN m.meta ->> 'status'
                  ELSE 'resolved' END),
      jsonb_build_object('key', p_key, 'status', coalesce(m.meta ->> 'status', a.state)));
  END IF;
  IF mycelium.task_lease_live(a) AND a.owner <> h AND NOT coalesce(p_force, false) THEN
    PERFORM mycelium.refuse(409, 'not_holder',
      format('%L is held by @%s, not @%s: only the holder releases it (force to release it anyway)',
             p_key, a.owner, h),
      jsonb_build_object('key', p_key, 'owner', a.owner, 'claimed_at', a.claimed_at, 'ttl_minutes', a.ttl_minutes));
  END IF;
  -- behind the token gate, only an operator forces (base.sql: is_operator)
  IF mycelium.task_lease_live(a) AND a.owner <> h AND NOT mycelium.is_operator() THEN
    PERFORM mycelium.refuse(403, 'operator_only',
      format('%L is held by @%s: forcing its release is an operator''s word', p_key, a.owner),
      jsonb_build_object('key', p_key, 'owner', a.owner));
  END IF;
  waits := CASE WHEN depends THEN mycelium.waiting_on(p_room, p_key) ELSE '{}' END;
  h := set_config('mycelium.actor', h, true);
  INSERT INTO mycelium.assignments AS x (room, key, state, note, note_by)
  VALUES (p_room, p_key, 'released', v_note, h)
  ON CONFLICT (room, key) DO UPDATE
  SET state = 'released', owner = NULL, claimed_at = NULL, ttl_minutes = NULL, note = v_note, note_by = h
  RETURNING * INTO a;
  RETURN mycelium.lease_written(m, a, waits);
END
$$;


-- Resolve: the work is done. Dependents that now wait on nothing get their `unblocked` notice in
-- this same transaction (trigger). A row something depends on is locked FOR NO KEY UPDATE before its
-- lease (and read again under the lock): a field write that settles it at the same time either
-- committed first (this resolve then sees it settled and raises nothing) or waits for this commit and
-- then sees the lease resolved, so the dependents hear `unblocked` once. A row nothing depends on
-- has nobody to unblock and is not locked (assignments_after_write locks it itself if a dependent
-- appeared in between).
CREATE OR REPLACE FUNCTION mycelium.resolve_task(p_room text, p_key text, p_handle text)
RETURNS mycelium.lease_read LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.board_require_handle(mycelium.author(p_handle));
  m mycelium.memories;
  a mycelium.assignments;
  depends boolean;
  depended boolean;
  waits text[];
BEGIN
  SELECT r.episode, r.version, r.value, r.meta, r.depends, r.depended
  INTO m.episode, m.version, m.value, m.meta, depends, depended
  FROM mycelium.task_row_of(p_room, p_key) r;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  IF depended THEN
    SELECT x.version, x.value, x.meta INTO m.version, m.value, m.meta
    FROM mycelium.memories x WHERE x.room = p_room AND x.key = p_key
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN  -- deleted since the first read
      PERFORM mycelium.refuse_task_lease(p_room, p_key);
    END IF;
  END IF;
  m.room := p_room;
  m.key := p_key;
  waits := CASE WHEN depends THEN mycelium.waiting_on(p_room, p_key) ELSE '{}' END;
  h := set_config('mycelium.actor', h, true);
  LOOP
    UPDATE mycelium.assignments x
    SET state = 'resolved', claimed_at = NULL, ttl_minutes = NULL, note = format('resolved by @%s', h), note_by = h
    WHERE x.room = p_room AND x.key = p_key
    RETURNING * INTO a;
    EXIT WHEN FOUND;
    -- never leased; a claim that inserts its lease meanwhile is resolved by the next round
    INSERT INTO mycelium.assignments (room, key, state, note, note_by)
    VALUES (p_room, p_key, 'resolved', format('resolved by @%s', h), h)
    ON CONFLICT (room, key) DO NOTHING
    RETURNING * INTO a;
    EXIT WHEN FOUND;
  END LOOP;
  RETURN mycelium.lease_written(m, a, waits);
END
$$;


-- Renew: refresh every lease p_handle holds in the room that is past half its time and still
-- live. Fresh leases are left alone (no write); expired ones are not brought back. No notices.
CREATE OR REPLACE FUNCTION mycelium.renew_tasks(p_room text, p_handle text)
RETURNS TABLE (key text, claimed_at timestamptz, ttl_minutes integer) LANGUAGE plpgsql AS $$
DECLARE h text := mycelium.board_require_handle(mycelium.author(p_handle));
BEGIN
  PERFORM mycelium.require_room(p_room);
  PERFORM set_config('mycelium.actor', h, true);
  RETURN QUERY
  UPDATE mycelium.assignments a SET claimed_at = now()
  WHERE a.room = p_room AND a.owner = h AND a.state = 'held'
    AND now() < mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)
    AND (now() - a.claimed_at) * 2 >= make_interval(mins => a.ttl_minutes)
  RETURNING a.key::text, a.claimed_at, a.ttl_minutes::integer;
END
$$;


-- ---------------------------------------------------------------------------------------------
-- The sweeper: announce each lease that has run out, once. One sweeper at a time across replicas
-- (transaction advisory lock: the others return nothing); each announcement is recorded with the
-- notice in one transaction, so a restart neither repeats nor loses one.

CREATE OR REPLACE FUNCTION mycelium.sweep_expired_leases(p_limit integer DEFAULT 500)
RETURNS TABLE (room text, key text, owner text, claim_id bigint, expired_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE a mycelium.assignments;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtextextended('mycelium.lease-sweep', 0)) THEN
    RETURN;
  END IF;
  FOR a IN
    SELECT s.* FROM mycelium.assignments s
    WHERE s.state = 'held' AND now() >= mycelium.task_lease_end(s.claimed_at, s.ttl_minutes)
      AND NOT EXISTS (SELECT 1 FROM mycelium.lease_expiries e WHERE e.claim_id = s.claim_id)
    ORDER BY s.claimed_at
    LIMIT p_limit
    FOR UPDATE OF s SKIP LOCKED
  LOOP
    IF mycelium.announce_expiry(a, 'runtime') THEN
      room := a.room; key := a.key; owner := a.owner; claim_id := a.claim_id;
      expired_at := mycelium.task_lease_end(a.claimed_at, a.ttl_minutes);
      RETURN NEXT;
    END IF;
  END LOOP;
END
$$;


-- Seconds until the next held lease runs out (NULL when none is held), so a sweeper sleeps
-- exactly as long as it may.
CREATE OR REPLACE FUNCTION mycelium.next_lease_expiry() RETURNS double precision LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN min(mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)) IS NOT NULL THEN
           greatest(0, extract(epoch FROM min(mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)) - now()))
         END::double precision
  FROM mycelium.assignments a
  WHERE a.state = 'held'
    AND NOT EXISTS (SELECT 1 FROM mycelium.lease_expiries e WHERE e.claim_id = a.claim_id)
$$;
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

COMMENT ON FUNCTION mycelium.normalize_handle(text) IS
  'The one spelling of a handle: no @, no #session suffix, no surrounding whitespace, A-Z lowercased.';


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
-- Conversations on the timeline: who a message names and wakes, pings, amendments, the post verb.
--
-- Builds on messages.sql (the append-only table with per-room, gapless, commit-ordered positions).
--   * mentions, silent_mentions and wakes are derived from the row itself on insert, so a plain
--     INSERT in psql gets exactly what the hub's verbs get, and nobody can write them by hand;
--   * wakes = the handles this message is a turn for (the await rule of contracts/message-envelope):
--     an exchange whose payload is not a control signal, addressed to its recipients and its
--     @-mentions, never to its own sender; an amendment wakes nobody (the original already did);
--   * a write into a thread raises a ping into the room's channel in the same transaction (which
--     thread moved, who wrote, which message: never the prose);
--   * a message that wakes somebody sends a hint on mycelium_wakes naming them, so each hub
--     process wakes only the waiters it concerns; state is always re-read from the tables.
--   * an amendment is a new exchange:amend message parented on the original; reads fold the chain
--     to the newest text (view mycelium.timeline).

CREATE OR REPLACE FUNCTION mycelium.message_wakes(
  p_kind text, p_subkind text, p_payload_type text, p_sender text, p_recipients text[], p_content text
) RETURNS text[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  me text;
  given text;
  one text;
  woken text[] := '{}';
BEGIN
  IF p_kind <> 'exchange' OR coalesce(p_subkind, '') = 'amend'
     OR p_payload_type IN ('presence', 'keepalive', 'ping', 'notice') THEN
    RETURN '{}';
  END IF;
  -- the recipients in the order given, then the loud mentions in the order first seen; each once,
  -- never the sender (a loop, no query to plan and run)
  me := mycelium.normalize_handle(p_sender);
  FOREACH given IN ARRAY coalesce(p_recipients, '{}') || mycelium.loud_mentions(p_content) LOOP
    one := mycelium.normalize_handle(given);
    IF one <> '' AND one <> me AND NOT (one = ANY (woken)) THEN
      woken := woken || one;
    END IF;
  END LOOP;
  RETURN woken;
END
$$;

COMMENT ON FUNCTION mycelium.message_wakes(text,text,text,text,text[],text) IS
  'The handles a message is a turn for: recipients and @-mentions of a non-control exchange, minus its sender.';


-- The timeline as people read it: amendments folded into the message they amend (its newest text,
-- and edited_at), amendment rows themselves left out.
CREATE OR REPLACE VIEW mycelium.timeline AS
SELECT m.*, coalesce(a.content, m.content) AS text, a.created_at AS edited_at
FROM mycelium.messages m
LEFT JOIN LATERAL (
  SELECT x.content, x.created_at FROM mycelium.messages x
  WHERE x.room = m.room AND x.subkind = 'amend' AND x.parents[1] = m.id
  ORDER BY x.position DESC LIMIT 1
) a ON true
WHERE NOT (coalesce(m.subkind, '') = 'amend' AND cardinality(m.parents) > 0);


-- An episode reference as a URN of p_room: NULL, '' and 'live' are the room's channel; anything
-- not starting with 'urn:' is a thread's short id.
CREATE OR REPLACE FUNCTION mycelium.episode_ref(p_room text, p_ref text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_ref IS NULL OR btrim(p_ref) = '' OR btrim(p_ref) = 'live' THEN mycelium.live_episode(p_room)
    WHEN btrim(p_ref) LIKE 'urn:%' THEN btrim(p_ref)
    ELSE mycelium.episode_urn(p_room, btrim(p_ref))
  END
$$;


-- ---------------------------------------------------------------------------------------------
-- Triggers: the ping, the wake hint and the search document.

-- One AFTER trigger for all three (each trigger on the table is one more call per insert, and a WHEN
-- clause is deserialised and planned again for every INSERT statement, a PL/pgSQL body once per
-- session): the ping first, then the wake hint, so the ping's own hint comes before it.
--   ping: a write into a thread (not the room's channel, and prose) raises one in the channel;
--   wake: a message that is somebody's turn hints '<position>\t<room>\t<handle>,<handle>…' on
--         mycelium_wakes ('*' instead of the list when it would not fit);
--   search: the message's document (message_search.sql: index_message), or, for an amendment, its
--         original's document rewritten with the newest text; a notice has none (its document is
--         derived by the message_documents view when a search looks through notices).
CREATE OR REPLACE FUNCTION mycelium.messages_follow_up() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  who text;
  kept text;
  original mycelium.messages;
  indexed bigint;
BEGIN
  IF NEW.episode <> mycelium.live_episode(NEW.room)
     AND NEW.payload_type NOT IN ('ping', 'notice', 'presence', 'keepalive') THEN
    INSERT INTO mycelium.messages (room, episode, kind, payload_type, sender, sender_role, payload)
    VALUES (NEW.room, mycelium.live_episode(NEW.room), 'exchange', 'ping', 'system', 'coordinator',
            jsonb_build_object('episode', NEW.episode, 'sender', NEW.sender, 'message', NEW.id::text));
  END IF;
  IF cardinality(NEW.wakes) > 0 THEN
    who := array_to_string(NEW.wakes, ',');
    IF octet_length(who) + octet_length(NEW.room) > 7000 THEN
      who := '*';
    END IF;
    -- by assignment, as in messages_after_insert (a PERFORM would start a query)
    kept := mycelium.wake_hint('mycelium_wakes', NEW.position || E'\t' || NEW.room || E'\t' || who);
  END IF;
  IF NEW.subkind = 'amend' AND cardinality(NEW.parents) > 0 THEN
    SELECT * INTO original FROM mycelium.messages WHERE room = NEW.room AND id = NEW.parents[1];
    IF FOUND THEN
      indexed := mycelium.index_message(original, NEW.content, NEW.created_at,
                                        mycelium.named_handles(NEW.content));
    END IF;
  ELSIF NOT mycelium.stored_without_document(NEW.payload_type, NEW.payload, NEW.subkind, NEW.parents) THEN
    indexed := mycelium.index_message(NEW, NEW.content, NULL,
      CASE WHEN cardinality(NEW.mentions) + cardinality(NEW.silent_mentions) = 0 THEN '{}'
           ELSE mycelium.named_handles(NEW.content) END);
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER messages_follow_up AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_follow_up();


-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Post one message. Every write passes the thread write gate (floors.sql) on insert. The sender is the
-- declared actor, else p_sender, and never a reserved handle (mycelium.require_sender: 403); sender
-- and recipients are stored normalised; p_episode may be a URN, a thread's short id, or NULL (the room).
CREATE OR REPLACE FUNCTION mycelium.post_message(
  p_room text, p_sender text, p_content text, p_episode text DEFAULT NULL,
  p_recipients text[] DEFAULT '{}', p_kind text DEFAULT 'exchange', p_subkind text DEFAULT NULL,
  p_payload_type text DEFAULT 'message', p_payload jsonb DEFAULT '{}', p_parents uuid[] DEFAULT '{}',
  p_sender_role text DEFAULT 'agent'
) RETURNS mycelium.messages LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  sender text;
  given text;
  recipients text[] := '{}';
  unknown uuid[];
  r mycelium.messages;
BEGIN
  PERFORM mycelium.require_room(p_room);
  sender := mycelium.require_sender(mycelium.author(p_sender, 'sender'), 'sender');
  -- (loops and guards rather than queries over empty or one-element arrays: each query is an
  -- executor start-up on every post)
  FOREACH given IN ARRAY coalesce(p_recipients, '{}') LOOP
    recipients := recipients || mycelium.require_handle(given, 'recipient');
  END LOOP;
  IF p_payload IS NOT NULL AND jsonb_typeof(p_payload) <> 'object' THEN
    PERFORM mycelium.refuse(422, 'invalid_payload', 'a message payload is a JSON object');
  END IF;
  IF cardinality(p_parents) > 0 THEN
    SELECT array_agg(p) INTO unknown FROM unnest(p_parents) p
    WHERE NOT EXISTS (SELECT 1 FROM mycelium.messages m WHERE m.room = p_room AND m.id = p);
  END IF;
  IF unknown IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'unknown_parent',
      format('no message %s in room %L to answer', array_to_string(unknown, ', '), p_room),
      jsonb_build_object('parents', unknown));
  END IF;
  PERFORM set_config('mycelium.actor', sender, true);
  INSERT INTO mycelium.messages (room, episode, kind, subkind, payload_type, sender, sender_role,
                                 recipients, parents, content, payload)
  VALUES (p_room, mycelium.episode_ref(p_room, p_episode), coalesce(p_kind, 'exchange'),
          nullif(p_subkind, ''), coalesce(p_payload_type, 'message'), sender,
          coalesce(p_sender_role, 'agent'), recipients, coalesce(p_parents, '{}'), coalesce(p_content, ''),
          coalesce(p_payload, '{}'))
  RETURNING * INTO r;
  RETURN r;
END
$$;


-- Amend a message: a new exchange:amend parented on the original (an amendment of an amendment
-- amends the original). Only the original sender may amend (the declared actor, else p_by, else the
-- original sender), and a reserved handle never does. Returns the original, folded.
CREATE OR REPLACE FUNCTION mycelium.amend_message(p_room text, p_id uuid, p_content text, p_by text)
RETURNS mycelium.timeline LANGUAGE plpgsql AS $$
DECLARE
  target mycelium.messages;
  by_handle text;
  r mycelium.timeline;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT * INTO target FROM mycelium.messages WHERE room = p_room AND id = p_id;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'message_not_found', format('no message %s in room %L', p_id, p_room),
                            jsonb_build_object('room', p_room, 'id', p_id));
  END IF;
  IF target.subkind = 'amend' AND cardinality(target.parents) > 0 THEN
    SELECT * INTO target FROM mycelium.messages WHERE room = p_room AND id = target.parents[1];
  END IF;
  IF target.payload_type IN ('ping', 'notice', 'presence', 'keepalive') THEN
    PERFORM mycelium.refuse(422, 'not_amendable',
      format('a %s is not prose: it cannot be amended', target.payload_type), jsonb_build_object('id', p_id));
  END IF;
  IF p_content IS NULL OR btrim(p_content) = '' THEN
    PERFORM mycelium.refuse(422, 'empty_content', 'an amendment needs the new text');
  END IF;
  by_handle := mycelium.require_sender(coalesce(mycelium.author(p_by, 'sender_handle'), target.sender),
                                       'sender_handle');
  IF by_handle <> mycelium.normalize_handle(target.sender) THEN
    PERFORM mycelium.refuse(403, 'not_sender',
      format('only @%s may amend their message; @%s may not', mycelium.normalize_handle(target.sender), by_handle),
      jsonb_build_object('id', target.id, 'sender', target.sender));
  END IF;
  PERFORM set_config('mycelium.actor', by_handle, true);
  INSERT INTO mycelium.messages (room, episode, kind, subkind, payload_type, sender, sender_role,
                                 recipients, parents, content, payload)
  VALUES (p_room, target.episode, 'exchange', 'amend', target.payload_type, target.sender,
          target.sender_role, target.recipients, ARRAY[target.id], p_content, target.payload);
  SELECT * INTO r FROM mycelium.timeline WHERE room = p_room AND id = target.id;
  RETURN r;
END
$$;


-- A handle list as the database keeps it: normalised, each once, in the order given.
CREATE OR REPLACE FUNCTION mycelium.handle_list(p_handles text[], p_what text DEFAULT 'handle') RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(h ORDER BY first_seen), '{}')
  FROM (
    SELECT mycelium.require_handle(x, p_what) AS h, min(o) AS first_seen
    FROM unnest(coalesce(p_handles, '{}')) WITH ORDINALITY AS t (x, o)
    GROUP BY 1
  ) l
$$;


CREATE OR REPLACE FUNCTION mycelium.thread_known(p_room text, p_episode text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND episode = p_episode)
      OR EXISTS (SELECT 1 FROM mycelium.messages WHERE room = p_room AND episode = p_episode)
$$;


-- '@conductor holds the floor; @api, @web may speak' / '…; no one else may speak right now'.
CREATE OR REPLACE FUNCTION mycelium.describe_floor(p_holder text, p_speakers text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT format('@%s holds the floor; ', p_holder)
      || CASE WHEN cardinality(coalesce(p_speakers, '{}')) = 0 THEN 'no one else may speak right now'
              ELSE (SELECT string_agg('@' || s, ', ' ORDER BY o) FROM unnest(p_speakers) WITH ORDINALITY AS t (s, o))
                   || ' may speak' END
$$;


-- ---------------------------------------------------------------------------------------------
-- The gate.

CREATE OR REPLACE FUNCTION mycelium.check_thread_write(p_room text, p_episode text, p_handle text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  h text;
  short text;
  roster mycelium.rosters;
  fl mycelium.floors;
BEGIN
  IF p_episode IS NULL OR p_episode = mycelium.live_episode(p_room) THEN
    RETURN;
  END IF;
  h := mycelium.normalize_handle(p_handle);
  short := mycelium.episode_short_id(p_episode);
  IF NOT mycelium.thread_known(p_room, p_episode) THEN
    PERFORM mycelium.refuse(404, 'thread_not_found', format('No thread ''%s'' in room ''%s''', short, p_room),
                            jsonb_build_object('room', p_room, 'episode', p_episode));
  END IF;
  SELECT * INTO roster FROM mycelium.rosters WHERE room = p_room AND episode = p_episode FOR SHARE;
  IF FOUND AND NOT (h = ANY (roster.members) OR h = roster.frozen_by) THEN
    PERFORM mycelium.refuse(403, 'not_in_roster',
      format('@%s is not a member of the negotiation in thread ''%s''', h, short),
      jsonb_build_object('episode', p_episode, 'handle', h, 'roster', roster.members));
  END IF;
  SELECT * INTO fl FROM mycelium.floors WHERE room = p_room AND episode = p_episode FOR SHARE;
  IF FOUND AND NOT (h = fl.holder OR h = ANY (fl.speakers)) THEN
    PERFORM mycelium.refuse(409, 'not_your_floor',
      format('@%s does not have the floor: %s', h, mycelium.describe_floor(fl.holder, fl.speakers)),
      jsonb_build_object('episode', p_episode, 'handle', h, 'holder', fl.holder, 'speakers', fl.speakers));
  END IF;
END
$$;

COMMENT ON FUNCTION mycelium.check_thread_write(text,text,text) IS
  'The thread write gate (404 unknown thread, 403 outside a frozen roster, 409 not admitted by the floor).';


-- Named to fire before messages_before_insert (which allocates the position): a refused write
-- never touches the room's position counter. A write into the room's own channel (no episode, '',
-- or the live URN: every notice and ping) is open to everyone.
-- The same trigger then sets the row's derived columns (conversations.sql), whatever the INSERT
-- gave: who the text names, loud and silent, and whom the message wakes. (One trigger for both:
-- each trigger on the table is one more call per insert.) A row with no '@' in its text names
-- nobody, and one that names nobody and has no recipients wakes nobody, so a notice or a ping
-- parses nothing.
CREATE OR REPLACE FUNCTION mycelium.messages_admit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(NEW.episode, '') <> '' AND NEW.episode <> mycelium.live_episode(NEW.room) THEN
    PERFORM mycelium.check_thread_write(NEW.room, NEW.episode, NEW.sender);
  END IF;
  IF strpos(NEW.content, '@') = 0 THEN
    NEW.mentions := '{}';
    NEW.silent_mentions := '{}';
  ELSE
    NEW.mentions := mycelium.loud_mentions(NEW.content);
    NEW.silent_mentions := mycelium.silent_mentions(NEW.content);
  END IF;
  NEW.wakes := CASE WHEN cardinality(NEW.mentions) = 0 AND cardinality(NEW.recipients) = 0 THEN '{}'
                    ELSE mycelium.message_wakes(NEW.kind, NEW.subkind, NEW.payload_type, NEW.sender,
                                                NEW.recipients, NEW.content) END;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER messages_admit BEFORE INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_admit();


-- ---------------------------------------------------------------------------------------------
-- Floor rows: normalised on the way in, and every change announced.

CREATE OR REPLACE FUNCTION mycelium.floors_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.episode = mycelium.live_episode(NEW.room) THEN
    PERFORM mycelium.refuse(422, 'live_has_no_floor', 'the room''s own channel never holds a floor',
                            jsonb_build_object('room', NEW.room));
  END IF;
  IF TG_OP = 'UPDATE' AND (NEW.room, NEW.episode) IS DISTINCT FROM (OLD.room, OLD.episode) THEN
    PERFORM mycelium.refuse(409, 'immutable', 'a floor belongs to one thread; release it and hold another');
  END IF;
  IF TG_OP = 'INSERT' AND NOT mycelium.thread_known(NEW.room, NEW.episode) THEN
    PERFORM mycelium.refuse(404, 'thread_not_found',
      format('No thread ''%s'' in room ''%s''', mycelium.episode_short_id(NEW.episode), NEW.room),
      jsonb_build_object('room', NEW.room, 'episode', NEW.episode));
  END IF;
  NEW.holder := mycelium.require_handle(NEW.holder, 'holder');
  NEW.speakers := array_remove(mycelium.handle_list(NEW.speakers, 'speaker'), NEW.holder);
  NEW.held_at := now();
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER floors_before_write BEFORE INSERT OR UPDATE ON mycelium.floors
  FOR EACH ROW EXECUTE FUNCTION mycelium.floors_before_write();


CREATE OR REPLACE FUNCTION mycelium.floors_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  f mycelium.floors := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
  row_key text;
  row_title text;
  data jsonb;
BEGIN
  IF TG_OP = 'UPDATE' AND (NEW.holder, NEW.speakers) IS NOT DISTINCT FROM (OLD.holder, OLD.speakers) THEN
    RETURN NULL;  -- the same floor held again: nothing moved
  END IF;
  IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = OLD.room) THEN
    RETURN NULL;  -- the room is going
  END IF;
  SELECT b.key, b.title INTO row_key, row_title FROM mycelium.row_of_episode(f.room, f.episode) b;
  data := jsonb_build_object(
    'title', row_title, 'episode', f.episode, 'holder', f.holder,
    'speakers', array_to_string(f.speakers, ','), 'by', coalesce(f.held_by, f.holder));
  IF TG_OP = 'DELETE' THEN
    data := data || jsonb_build_object('released', '1',
                                       'by', coalesce(nullif(current_setting('mycelium.actor', true), ''), f.holder));
  END IF;
  PERFORM mycelium.post_notice(f.room, 'floor', coalesce(row_key, mycelium.episode_short_id(f.episode)), data);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER floors_after_write AFTER INSERT OR UPDATE OR DELETE ON mycelium.floors
  FOR EACH ROW EXECUTE FUNCTION mycelium.floors_after_write();


-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Hold (or re-hold) a thread's floor for p_holder, admitting p_speakers too. Re-holding replaces;
-- holding exactly the same floor again changes nothing and announces nothing. A floor that moves
-- (a flow's every step) is one UPDATE; the INSERT, whose trigger first checks that the thread
-- exists, is only for a thread's first floor (and a floor held again unchanged, which it leaves).
CREATE OR REPLACE FUNCTION mycelium.hold_floor(
  p_room text, p_episode text, p_holder text, p_speakers text[] DEFAULT '{}', p_by text DEFAULT NULL
) RETURNS mycelium.floors LANGUAGE plpgsql AS $$
DECLARE
  ep text := mycelium.episode_ref(p_room, p_episode);
  by_handle text := mycelium.author(p_by, 'by');
  who text;
  admitted text[];
  r mycelium.floors;
BEGIN
  PERFORM mycelium.require_room(p_room);
  who := mycelium.require_handle(p_holder, 'holder');
  admitted := array_remove(mycelium.handle_list(p_speakers, 'speaker'), who);
  IF by_handle IS NOT NULL THEN PERFORM set_config('mycelium.actor', by_handle, true); END IF;
  UPDATE mycelium.floors AS f
  SET holder = who, speakers = admitted, held_by = coalesce(mycelium.normalize_handle(by_handle), who)
  WHERE f.room = p_room AND f.episode = ep AND (f.holder, f.speakers) IS DISTINCT FROM (who, admitted)
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN r;
  END IF;
  INSERT INTO mycelium.floors AS f (room, episode, holder, speakers, held_by)
  VALUES (p_room, ep, who, admitted, coalesce(mycelium.normalize_handle(by_handle), who))
  ON CONFLICT (room, episode) DO UPDATE SET holder = excluded.holder, speakers = excluded.speakers,
                                            held_by = excluded.held_by
    WHERE (f.holder, f.speakers) IS DISTINCT FROM (excluded.holder, excluded.speakers)
  RETURNING * INTO r;
  IF r.room IS NULL THEN
    SELECT * INTO r FROM mycelium.floors WHERE room = p_room AND episode = ep;
  END IF;
  RETURN r;
END
$$;


-- Release a thread's floor: true if one was held (and is now gone), false if there was none.
CREATE OR REPLACE FUNCTION mycelium.release_floor(p_room text, p_episode text, p_by text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE by_handle text := mycelium.author(p_by, 'by');
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF by_handle IS NOT NULL THEN
    PERFORM set_config('mycelium.actor', mycelium.normalize_handle(by_handle), true);
  END IF;
  DELETE FROM mycelium.floors WHERE room = p_room AND episode = mycelium.episode_ref(p_room, p_episode);
  RETURN FOUND;
END
$$;


-- Freeze a negotiation's roster in a thread: from now on only p_members (and p_by, who runs it)
-- may write there. Freezing again replaces the roster.
CREATE OR REPLACE FUNCTION mycelium.freeze_roster(p_room text, p_episode text, p_members text[], p_by text)
RETURNS mycelium.rosters LANGUAGE plpgsql AS $$
DECLARE
  ep text := mycelium.episode_ref(p_room, p_episode);
  r mycelium.rosters;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF ep = mycelium.live_episode(p_room) THEN
    PERFORM mycelium.refuse(422, 'live_has_no_roster', 'a negotiation runs in a thread, not the room''s channel');
  END IF;
  IF NOT mycelium.thread_known(p_room, ep) THEN
    PERFORM mycelium.refuse(404, 'thread_not_found',
      format('No thread ''%s'' in room ''%s''', mycelium.episode_short_id(ep), p_room),
      jsonb_build_object('room', p_room, 'episode', ep));
  END IF;
  INSERT INTO mycelium.rosters AS x (room, episode, members, frozen_by)
  VALUES (p_room, ep, mycelium.handle_list(p_members, 'member'),
          mycelium.require_handle(mycelium.author(p_by, 'frozen_by'), 'frozen_by'))
  ON CONFLICT (room, episode) DO UPDATE SET members = excluded.members, frozen_by = excluded.frozen_by,
                                            frozen_at = now()
  RETURNING * INTO r;
  RETURN r;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.thaw_roster(p_room text, p_episode text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM mycelium.rosters WHERE room = p_room AND episode = mycelium.episode_ref(p_room, p_episode);
  RETURN FOUND;
END
$$;


-- A cursor only moves forward: moving it back would deliver a message twice.
CREATE OR REPLACE FUNCTION mycelium.delivery_cursors_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.position < OLD.position OR (NEW.room, NEW.handle) IS DISTINCT FROM (OLD.room, OLD.handle) THEN
    PERFORM mycelium.refuse(409, 'cursor_backwards',
      format('the inbox cursor of @%s only moves forward (%s → %s refused)', OLD.handle, OLD.position, NEW.position),
      jsonb_build_object('room', OLD.room, 'handle', OLD.handle, 'position', OLD.position));
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER delivery_cursors_forward BEFORE UPDATE ON mycelium.delivery_cursors
  FOR EACH ROW EXECUTE FUNCTION mycelium.delivery_cursors_forward();


-- Where a handle's inbox starts when it is first seen (one snapshot, so nothing slips between).
CREATE OR REPLACE FUNCTION mycelium.inbox_anchor(p_room text, p_handle text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT min(position) - 1 FROM mycelium.messages
     WHERE room = p_room AND wakes @> ARRAY[p_handle] AND cardinality(wakes) > 0),
    (SELECT last FROM mycelium.message_positions WHERE room = p_room),
    0)
$$;


-- Refresh p_handle's presence in p_room for presence.ttl_seconds, or p_hold_seconds if longer. A
-- lease that already runs that long (within 10 s) is left alone: a poll loop costs no write.
CREATE OR REPLACE FUNCTION mycelium.touch_presence(p_room text, p_handle text, p_hold_seconds double precision DEFAULT 0)
RETURNS mycelium.presence LANGUAGE plpgsql AS $$
DECLARE
  h text := mycelium.require_handle(p_handle);
  ttl double precision;
  wanted timestamptz;
  r mycelium.presence;
BEGIN
  -- the lease and the room's ttl (as mycelium.config_value reads it) in one statement
  SELECT p.*, (SELECT c.value #>> '{}' FROM mycelium.config c
               WHERE c.name = 'presence.ttl_seconds' AND c.room IN (coalesce(p_room, ''), '')
               ORDER BY c.room DESC LIMIT 1)::double precision
    INTO r.room, r.handle, r.expires_at, r.seen_at, ttl
  FROM (SELECT) one LEFT JOIN mycelium.presence p ON p.room = p_room AND p.handle = h;
  wanted := now() + make_interval(secs => greatest(coalesce(ttl, 90), coalesce(p_hold_seconds, 0)));
  IF r.room IS NOT NULL AND r.expires_at >= wanted - interval '10 seconds' THEN
    RETURN r;
  END IF;
  PERFORM mycelium.require_room(p_room);
  INSERT INTO mycelium.presence AS p (room, handle, expires_at, seen_at)
  VALUES (p_room, h, wanted, now())
  ON CONFLICT (room, handle) DO UPDATE
    SET expires_at = greatest(p.expires_at, excluded.expires_at), seen_at = excluded.seen_at
  RETURNING * INTO r;
  RETURN r;
END
$$;


-- Take the next message addressed to p_handle: in the whole room, or only in thread p_episode.
-- Returns the message (amendments folded) or no row; either way the cursor has moved past
-- everything that was not for the handle. Refreshes the handle's presence.
CREATE OR REPLACE FUNCTION mycelium.take_next(
  p_room text, p_handle text, p_episode text DEFAULT NULL, p_hold_seconds double precision DEFAULT 0
) RETURNS SETOF mycelium.timeline LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.require_handle(mycelium.author(p_handle));
  scope text;
  cur mycelium.delivery_cursors;
  hit mycelium.messages;
  shown mycelium.timeline;
  settled bigint;
  pending bigint[];
  scanned bigint;
  next_pending bigint;
  head bigint;
  new_position bigint;
  present mycelium.presence;
  ttl double precision;
  state text;
BEGIN
  -- The lease as touch_presence reads it; that call (a write, and a security-definer call) only
  -- when the lease runs short of what touch_presence would make it, which most looks do not find.
  SELECT p.*, (SELECT c.value #>> '{}' FROM mycelium.config c
               WHERE c.name = 'presence.ttl_seconds' AND c.room IN (p_room, '')
               ORDER BY c.room DESC LIMIT 1)::double precision
    INTO present.room, present.handle, present.expires_at, present.seen_at, ttl
  FROM (SELECT) one LEFT JOIN mycelium.presence p ON p.room = p_room AND p.handle = h;
  IF present.room IS NULL OR present.expires_at < now() - interval '10 seconds'
       + make_interval(secs => greatest(coalesce(ttl, 90), coalesce(p_hold_seconds, 0))) THEN
    present := mycelium.touch_presence(p_room, h, p_hold_seconds);
  END IF;
  IF p_episode IS NOT NULL THEN
    scope := nullif(mycelium.episode_ref(p_room, p_episode), mycelium.live_episode(p_room));
  END IF;

  -- one take per handle at a time; every statement below reads after the previous take committed
  PERFORM pg_advisory_xact_lock(hashtext('mycelium.inbox:' || p_room), hashtext(h));
  SELECT * INTO cur FROM mycelium.delivery_cursors WHERE room = p_room AND handle = h;
  IF NOT FOUND THEN
    INSERT INTO mycelium.delivery_cursors (room, handle, position)
    VALUES (p_room, h, mycelium.inbox_anchor(p_room, h)) ON CONFLICT DO NOTHING;
    SELECT * INTO cur FROM mycelium.delivery_cursors WHERE room = p_room AND handle = h;
  END IF;

  -- Everything up to `settled` is delivered or not for the handle: a room-wide hit is the first
  -- pending message, so it settles what lies below it; a thread's hit is recorded as delivered early.
  -- The message still pending after that, and the head, are read in one snapshot: the cursor may
  -- move up to just before that message, or to the head when nothing is pending.
  settled := cur.position;
  IF scope IS NULL THEN
    -- Look through a window of at most 256 positions at a time, whatever plan the statistics of
    -- the moment suggest (a scan that reads the whole backlog to sort it would make every look cost
    -- as much as the backlog is long). Each window is read with the head in one snapshot; the cursor
    -- never moves past the end of what was read.
    scanned := cur.position;
    LOOP
      SELECT ARRAY(SELECT m.position FROM mycelium.messages m
                   WHERE m.room = p_room AND m.position > scanned AND m.position <= scanned + 256
                     AND m.wakes @> ARRAY[h]
                     AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                                     WHERE d.room = p_room AND d.handle = h AND d.position = m.position)
                   ORDER BY m.position LIMIT 2),
             (SELECT last FROM mycelium.message_positions WHERE room = p_room)
        INTO pending, head;
      scanned := least(scanned + 256, greatest(coalesce(head, 0), scanned));
      IF pending[1] IS NOT NULL THEN
        -- read once, as the caller is shown it (a pending message is never an amendment: those wake
        -- nobody, so the timeline has it)
        SELECT * INTO shown FROM mycelium.timeline t WHERE t.room = p_room AND t.position = pending[1];
        hit.id := shown.id;
        hit.position := shown.position;
        hit.episode := shown.episode;
        hit.sender := shown.sender;
        settled := hit.position;
        -- the next one pending, or, when the window ended before the head, the first unread position
        next_pending := coalesce(pending[2], CASE WHEN scanned < head THEN scanned + 1 END);
        EXIT;
      END IF;
      settled := scanned;  -- nothing for the handle up to here
      EXIT WHEN scanned >= coalesce(head, 0);
    END LOOP;
  ELSE
    SELECT m.* INTO hit FROM mycelium.messages m
    WHERE m.room = p_room AND m.episode = scope AND m.position > cur.position AND m.wakes @> ARRAY[h]
      AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                      WHERE d.room = p_room AND d.handle = h AND d.position = m.position)
    ORDER BY m.position LIMIT 1;
    IF hit.id IS NOT NULL THEN
      INSERT INTO mycelium.early_deliveries (room, handle, position) VALUES (p_room, h, hit.position);
    END IF;
    SELECT (SELECT m.position FROM mycelium.messages m
            WHERE m.room = p_room AND m.position > settled AND m.wakes @> ARRAY[h]
              AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                              WHERE d.room = p_room AND d.handle = h AND d.position = m.position)
            ORDER BY m.position LIMIT 1),
           (SELECT last FROM mycelium.message_positions WHERE room = p_room)
      INTO next_pending, head;
  END IF;
  IF hit.id IS NULL THEN
    state := set_config('synchronous_commit', 'off', true);  -- (an assignment: no query to run)
  END IF;
  new_position := greatest(settled, coalesce(next_pending - 1, head, settled));
  -- For the caller, in the same statement: '<more pending> <seconds the presence lease still runs>'.
  -- A hub that knows nothing else waits for the handle, and that its presence holds, may let the
  -- handle's next await wait for a hint instead of looking first (conversations/inbox.py).
  state := set_config('mycelium.inbox_state', (next_pending IS NOT NULL)::text || ' '
                      || extract(epoch FROM present.expires_at - now())::text, true);

  IF new_position > cur.position OR hit.id IS NOT NULL THEN
    DELETE FROM mycelium.early_deliveries WHERE room = p_room AND handle = h AND position <= new_position;
    UPDATE mycelium.delivery_cursors
    SET position = new_position,
        woken_by = coalesce(hit.id, woken_by),
        woken_episode = CASE WHEN hit.id IS NULL THEN woken_episode ELSE hit.episode END,
        woken_sender = CASE WHEN hit.id IS NULL THEN woken_sender ELSE hit.sender END
    WHERE room = p_room AND handle = h;
  END IF;

  IF shown.id IS NOT NULL THEN
    RETURN NEXT shown;
  ELSIF hit.id IS NOT NULL THEN
    RETURN QUERY SELECT * FROM mycelium.timeline t WHERE t.room = p_room AND t.position = hit.position;
  END IF;
END
$$;

COMMENT ON FUNCTION mycelium.take_next(text,text,text,double precision) IS
  'await: the next message addressed to a handle, delivered exactly once, from its durable cursor.';


-- A member's reply: an exchange with payload type `reply`, through the same write gate. p_data is
-- what its markers stated (lifted by the caller), else {"action": "reply"}. It lands in p_episode
-- (NULL: the room), never implicitly in the thread that woke the replier; when it does land where
-- the waking message was, it answers that message (parent) and its sender (recipient). The replier
-- is the declared actor, else p_handle, and never a reserved handle (403).
CREATE OR REPLACE FUNCTION mycelium.reply(
  p_room text, p_handle text, p_text text, p_data jsonb DEFAULT NULL, p_episode text DEFAULT NULL
) RETURNS mycelium.messages LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.require_sender(mycelium.author(p_handle), 'handle');
  ep text := mycelium.episode_ref(p_room, p_episode);
  cur mycelium.delivery_cursors;
  parents uuid[] := '{}';
  recipients text[] := '{}';
BEGIN
  IF p_text IS NULL OR btrim(p_text) = '' THEN
    PERFORM mycelium.refuse(422, 'empty_reply', 'a reply needs some text');
  END IF;
  PERFORM mycelium.touch_presence(p_room, h);
  SELECT * INTO cur FROM mycelium.delivery_cursors WHERE room = p_room AND handle = h;
  IF cur.woken_by IS NOT NULL AND cur.woken_episode = ep THEN
    parents := ARRAY[cur.woken_by];
    IF mycelium.normalize_handle(cur.woken_sender) <> h THEN
      recipients := ARRAY[mycelium.normalize_handle(cur.woken_sender)];
    END IF;
  END IF;
  RETURN mycelium.post_message(
    p_room, h, p_text, ep, recipients, 'exchange', NULL, 'reply',
    CASE WHEN p_data IS NULL OR p_data = '{}'::jsonb THEN '{"action": "reply"}'::jsonb ELSE p_data END,
    parents, 'agent');
END
$$;


-- Who is in a room now: every handle whose presence lease runs.
CREATE OR REPLACE FUNCTION mycelium.room_members(p_room text)
RETURNS TABLE (handle text, kind text, seen_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT p.handle, 'lease', p.seen_at, p.expires_at FROM mycelium.presence p
  WHERE p.room = p_room AND p.expires_at > now()
  ORDER BY p.handle
$$;
-- Message search: one document per readable message with every field the search grammar narrows
-- by (contracts/message-search.json), kept by the database as messages arrive: a message inserts its
-- document, an amendment rewrites its original's (newest text, edited); the timeline's after-insert
-- trigger (messages_follow_up, conversations.sql) calls index_message. Like an index, documents
-- are derived and never written by a client. The query itself is composed per request
-- (service/mycelium/conversations/search.py); the task a thread belongs to is joined at query time,
-- so a renamed task is found by its new title.

-- What a message is, for `type:`: a chat message's own type (announce, direct, broadcast, delegate,
-- event), else its payload type (reply, message, tick, ping, notice, ...).
CREATE OR REPLACE FUNCTION mycelium.message_type_of(p_payload_type text, p_payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(p_payload ->> 'message_type', p_payload_type)
$$;


-- accept / reject as a message states it: the payload's lifted action first, then the last
-- stance=/action= inside a [[mycelium: …]] marker in the prose (mirrors core/markers.stance_of).
CREATE OR REPLACE FUNCTION mycelium.stance_of(p_payload jsonb, p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_payload ->> 'action' IN ('accept', 'reject') THEN p_payload ->> 'action'
              WHEN strpos(p_text, '[[') = 0 THEN NULL ELSE (
    SELECT CASE WHEN v IN ('accept', 'agree', 'yes', 'approve') THEN 'accept' ELSE 'reject' END
    FROM (
      SELECT lower(coalesce(p[2], p[3], p[4])) AS v, i, j
      FROM regexp_matches(coalesce(p_text, ''), '\[\[\s*mycelium\s*:((?:[^\]]|\](?!\]))*)\]\]', 'gi')
             WITH ORDINALITY AS mk (b, i),
           regexp_matches(mk.b[1], '([[:alnum:]_-]+)\s*=\s*(?:"([^"]*)"|''([^'']*)''|([^\s,;]+))', 'g')
             WITH ORDINALITY AS pr (p, j)
      WHERE lower(p[1]) IN ('stance', 'action')
    ) pairs
    WHERE v IN ('accept', 'agree', 'yes', 'approve', 'reject', 'block', 'no')
    ORDER BY i DESC, j DESC LIMIT 1
  ) END
$$;


-- The `has:` values a message carries: mention, link, memory, code, scores.
CREATE OR REPLACE FUNCTION mycelium.message_has(p_text text, p_payload jsonb, p_mentions text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT array_remove(ARRAY[
    CASE WHEN cardinality(p_mentions) > 0 THEN 'mention' END,
    CASE WHEN p_text ~* 'https?://' THEN 'link' END,
    CASE WHEN p_text ~ 'myc://' OR p_text ~* '\[\[(?!\s*mycelium\s*:)[^\]\[]+\]\]' THEN 'memory' END,
    CASE WHEN strpos(p_text, '`') > 0 THEN 'code' END,
    CASE WHEN jsonb_typeof(p_payload -> 'scores') = 'object' AND p_payload -> 'scores' <> '{}'::jsonb
           OR strpos(p_text, '[[') > 0 AND EXISTS (
             SELECT 1
             FROM regexp_matches(coalesce(p_text, ''), '\[\[\s*mycelium\s*:((?:[^\]]|\](?!\]))*)\]\]', 'gi') AS mk (b),
                  regexp_matches(mk.b[1], '(?:^|[^[:alnum:]_-])([A-Z])\s*=\s*([0-9]{1,3})(?=[\s,;]|$)', 'g') AS pr (p)
             WHERE p[2]::integer <= 100)
         THEN 'scores' END
  ], NULL)
$$;


-- Does a thread reference (a URN, its tail, or the prefix of a short id) name p_episode?
CREATE OR REPLACE FUNCTION mycelium.thread_matches(p_episode text, p_ref text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_ref <> '' AND (lower(p_episode) = p_ref
                          OR right(lower(p_episode), length(p_ref) + 1) = ':' || p_ref
                          OR starts_with(lower(mycelium.episode_short_id(p_episode)), p_ref))
$$;

-- (no index by thread: a thread filter is thread_matches(), which no btree serves; a room's documents
-- are found by the primary key)

CREATE OR REPLACE FUNCTION mycelium.message_search_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM mycelium.message_search d USING gone WHERE d.room = gone.name;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER message_search_forget AFTER DELETE ON mycelium.rooms
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION mycelium.message_search_forget();


-- The document of message m whose current text is p_text (edited at p_edited, if it was);
-- p_mentions: every handle the text names, loud or silent, first seen first. One SELECT in SQL, so
-- both of its users inline it: index_message, which stores it, and message_documents, which derives
-- a notice's at query time; the expressions exist once.
CREATE OR REPLACE FUNCTION mycelium.message_document(m mycelium.messages, p_text text, p_edited timestamptz,
                                          p_mentions text[]) RETURNS SETOF mycelium.message_search
LANGUAGE sql STABLE AS $$
  SELECT m.room, m.position, m.id, m.episode, m.created_at, p_edited, p_text, lower(p_text),
    mycelium.normalize_handle(m.sender),
    CASE WHEN cardinality(m.recipients) = 0 THEN '{}'::text[] ELSE
      ARRAY(SELECT DISTINCT mycelium.normalize_handle(r) FROM unnest(m.recipients) r
            WHERE mycelium.normalize_handle(r) NOT IN ('', mycelium.normalize_handle(m.sender))) END,
    p_mentions,
    CASE WHEN m.episode = mycelium.live_episode(m.room) THEN 'channel' ELSE 'thread' END,
    mycelium.message_type_of(m.payload_type, m.payload),
    coalesce(nullif(m.payload -> 'metadata' ->> 'kind', ''), nullif(m.subkind, '')),
    m.payload -> 'metadata' ->> 'status',
    -- the parsers run only on what can hold their markers (a notice or a ping has no prose)
    CASE WHEN m.payload ? 'action' OR strpos(p_text, '[[') > 0 THEN mycelium.stance_of(m.payload, p_text) END,
    lower(m.payload ->> 'step'),
    array_remove(ARRAY[CASE WHEN p_edited IS NOT NULL THEN 'edited' END,
                       CASE WHEN m.payload ? 'step' THEN 'conductor' END], NULL),
    -- message_has finds nothing in a text with no mention, no '://', no '[[' and no '`' whose payload
    -- has no scores: most messages, spared its patterns
    CASE WHEN cardinality(p_mentions) = 0 AND NOT (m.payload ? 'scores') AND strpos(p_text, '://') = 0
              AND strpos(p_text, '[[') = 0 AND strpos(p_text, '`') = 0 THEN '{}'::text[]
         ELSE mycelium.message_has(p_text, m.payload, p_mentions) END,
    (m.created_at AT TIME ZONE 'UTC')::date::text,
    CASE WHEN jsonb_typeof(m.payload -> 'metadata' -> 'ttl_seconds') = 'number'
         THEN m.created_at + make_interval(secs => (m.payload -> 'metadata' ->> 'ttl_seconds')::double precision)
    END
$$;


-- Store the document of message m (message_document's arguments). A new message's document is a
-- plain INSERT (an upsert's speculative insertion cost every message ~13 us); an amendment rewrites
-- the text-derived fields of its original's document, written when the original landed. Returns the
-- document's position, so the trigger calls it by assignment (a simple expression) rather than by
-- PERFORM (a query started per message).
CREATE OR REPLACE FUNCTION mycelium.index_message(m mycelium.messages, p_text text, p_edited timestamptz,
                                       p_mentions text[]) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  IF p_edited IS NOT NULL THEN
    UPDATE mycelium.message_search d
    SET (edited_at, text, lowered, mention_handles, stance, is_values, has_values) = (
      SELECT n.edited_at, n.text, n.lowered, n.mention_handles, n.stance, n.is_values, n.has_values
      FROM mycelium.message_document(m, p_text, p_edited, p_mentions) n)
    WHERE d.room = m.room AND d.position = m.position;
    IF FOUND THEN
      RETURN m.position;
    END IF;
  END IF;
  INSERT INTO mycelium.message_search SELECT * FROM mycelium.message_document(m, p_text, p_edited, p_mentions);
  RETURN m.position;
END
$$;


-- A message whose document is not stored but derived (message_documents): a notice not amending
-- anything whose payload names no message_type (its type_value is then 'notice'). SQL, so inlined.
CREATE OR REPLACE FUNCTION mycelium.stored_without_document(p_payload_type text, p_payload jsonb, p_subkind text,
                                                 p_parents uuid[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_payload_type = 'notice' AND NOT p_payload ? 'message_type'
         AND NOT (coalesce(p_subkind, '') = 'amend' AND cardinality(p_parents) > 0)
$$;


-- Every handle a text names, loud or silent, each once, first seen first.
CREATE OR REPLACE FUNCTION mycelium.named_handles(p_text text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}')
  FROM (SELECT handle, min(first_seen) AS first_seen FROM mycelium.mentions_in(p_text) GROUP BY handle) x
$$;


-- Every searchable message's document: the table's, and for a notice that has none, the same fields
-- derived from the timeline row at query time. A notice is prose-free board traffic (two per claim
-- and resolve, appended while the room's position lock is held) that only a search naming
-- `type:notice` looks through, so it gets no stored document (messages_follow_up skips it) unless
-- it is amended or its payload names a message_type (index_message writes one then, and that one
-- is read instead). Both kinds are message_document's; the search reads this view only when its
-- scope includes notices.
CREATE OR REPLACE VIEW mycelium.message_documents AS
SELECT * FROM mycelium.message_search
UNION ALL
SELECT d.*
FROM mycelium.messages m
CROSS JOIN LATERAL mycelium.message_document(m, m.content, NULL,
  CASE WHEN cardinality(m.mentions) + cardinality(m.silent_mentions) = 0 THEN '{}'::text[]
       ELSE mycelium.named_handles(m.content) END) d
WHERE mycelium.stored_without_document(m.payload_type, m.payload, m.subkind, m.parents)
  AND NOT EXISTS (SELECT 1 FROM mycelium.message_search s WHERE s.room = m.room AND s.position = m.position);


-- ---------------------------------------------------------------------------------------------
-- Rules on the timeline.

CREATE OR REPLACE FUNCTION mycelium.engine_kinds() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['conductor', 'persona', 'aligner', 'synthesizer']
$$;


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

-- The step vocabulary (mycelium.engines.flows.VOCABULARY says the same; a test holds them equal):
-- the groups a step may address, the ends, the step kinds and the edges each kind branches on, what
-- a step may collect and require.
CREATE OR REPLACE FUNCTION mycelium.flow_vocabulary() RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT '{"groups": ["each", "all", "workers", "bottleneck", "contested"],
           "ends": ["resolved", "rejected", "converged"],
           "kinds": ["ask", "select", "tally", "lock"],
           "collect": ["options", "scores", "pieces", "tasks"],
           "require": ["stance", "scores", "pieces", "tasks"],
           "edges": {"ask": ["accept", "reject", "silent", "default"],
                     "select": ["feasible", "infeasible", "stuck"],
                     "tally:points": ["grew", "settled", "empty", "default"],
                     "tally:terms": ["contested", "clear", "default"],
                     "lock": ["locked", "empty", "default"]}}'::jsonb
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
-- The wake digest: what an agent woken by a message needs beside it to take its turn without
-- reading the whole room (hub.md §10b), as one read of the database's state:
--   * why it woke: an engine's turn addressed to it (the flow, step and turn), a mention, a message
--     addressed to it, or one in a thread it is part of;
--   * where: the thread, and the board row it belongs to;
--   * what changed since its last turn (its previous message in the room): the board's notices,
--     floor moves and upstream states left out, newest last, the rest counted;
--   * its tasks (assigned to it or held by it, not settled) and the board's open rows;
--   * the messages that asked for it since its last turn, besides this one (cut, the rest counted);
--   * how many more messages wait for it (so it awaits first), and where to reply.
-- mycelium.conversations.digest renders it as text.

CREATE OR REPLACE FUNCTION mycelium.wake_digest(p_room text, p_handle text, p_message uuid)
RETURNS jsonb LANGUAGE sql STABLE AS $$
  WITH me AS (
    SELECT mycelium.normalize_handle(p_handle) AS h
  ), msg AS (
    SELECT t.* FROM mycelium.timeline t WHERE t.room = p_room AND t.id = p_message
  ), last_turn AS (
    -- the handle's previous message in the room (bounded: a handle that never spoke scans no further)
    SELECT max(m.position) AS position
    FROM mycelium.messages m, msg, me
    WHERE m.room = p_room AND m.position < msg.position AND m.position > msg.position - 5000
      AND mycelium.normalize_handle(m.sender) = me.h AND m.payload_type NOT IN ('ping', 'presence', 'keepalive')
  ), since AS (
    -- what is looked back at: from the last turn, or as far as the same bound reaches
    SELECT coalesce(l.position, greatest(msg.position - 5000, 0)) AS position, l.position IS NOT NULL AS spoke
    FROM last_turn l, msg
  ), thread AS (
    SELECT msg.episode, r.key, r.title, msg.episode = mycelium.live_episode(p_room) AS live
    FROM msg LEFT JOIN LATERAL mycelium.row_of_episode(p_room, msg.episode) r ON true
  ), changes AS (
    SELECT m.position, m.payload ->> 'subkind' AS subkind, m.payload ->> 'key' AS key,
           coalesce(m.payload ->> 'by', m.payload ->> 'owner') AS by, m.payload ->> 'title' AS title
    FROM mycelium.messages m, msg, since
    WHERE m.room = p_room AND m.position > since.position AND m.position < msg.position
      AND m.payload_type = 'notice' AND coalesce(m.payload ->> 'subkind', '') NOT IN ('floor', 'upstream')
  ), asked AS (
    SELECT t.position, mycelium.normalize_handle(t.sender) AS sender, t.episode, t.text
    FROM mycelium.timeline t, msg, since, me
    WHERE t.room = p_room AND t.position > since.position AND t.position < msg.position
      AND t.wakes @> ARRAY[me.h]
  ), board AS (
    SELECT b.key, b.title, b.status, b.assignee, b.owner, b.attention, b.updated_at
    FROM mycelium.board_rows b WHERE b.room = p_room AND b.attention <> 'resolved'
  ), waiting AS (
    SELECT count(*) AS n
    FROM mycelium.messages m, me, mycelium.delivery_cursors c
    WHERE c.room = p_room AND c.handle = me.h AND m.room = p_room AND m.position > c.position
      AND m.id <> p_message AND m.wakes @> ARRAY[me.h]
      AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                      WHERE d.room = p_room AND d.handle = me.h AND d.position = m.position)
  )
  SELECT jsonb_build_object(
    'handle', me.h,
    'why', CASE
      WHEN msg.payload #>> '{conductor,event}' = 'turn' AND me.h = ANY (msg.recipients) THEN 'turn'
      WHEN me.h = ANY (msg.mentions) THEN 'mention'
      WHEN me.h = ANY (msg.recipients) THEN 'addressed'
      ELSE 'message' END,
    'from', mycelium.normalize_handle(msg.sender),
    'turn', CASE WHEN msg.payload #>> '{conductor,event}' = 'turn' THEN
      jsonb_strip_nulls(jsonb_build_object('flow', msg.payload #>> '{conductor,protocol}',
        'step', msg.payload #>> '{conductor,step}', 'turn', msg.payload #> '{conductor,turn}',
        'cap', msg.payload #> '{conductor,cap}', 'to', msg.payload #> '{conductor,to}')) END,
    'thread', (SELECT jsonb_build_object('episode', t.episode, 'short_id', mycelium.episode_short_id(t.episode),
                                         'live', t.live, 'key', t.key, 'title', t.title) FROM thread t),
    'since', CASE WHEN since.spoke THEN since.position END,
    'changes', coalesce((SELECT jsonb_agg(to_jsonb(c) ORDER BY c.position)
                         FROM (SELECT * FROM changes ORDER BY position DESC LIMIT 8) c), '[]'),
    'changes_more', greatest((SELECT count(*) FROM changes) - 8, 0),
    'tasks', coalesce((SELECT jsonb_agg(jsonb_build_object('key', b.key, 'title', b.title, 'status', b.status,
                                                           'holding', coalesce(b.owner = me.h, false)) ORDER BY b.key)
                       FROM board b WHERE b.assignee = me.h OR b.owner = me.h), '[]'),
    'board', coalesce((SELECT jsonb_agg(jsonb_build_object('key', b.key, 'title', b.title, 'status', b.status,
                                                           'assignee', b.assignee, 'owner', b.owner,
                                                           'attention', b.attention) ORDER BY b.updated_at DESC)
                       FROM (SELECT * FROM board ORDER BY updated_at DESC LIMIT 8) b), '[]'),
    'board_more', greatest((SELECT count(*) FROM board) - 8, 0),
    'asked', coalesce((SELECT jsonb_agg(jsonb_build_object('position', a.position, 'sender', a.sender,
                                                           'here', a.episode = msg.episode,
                                                           'text', CASE WHEN length(a.text) > 240
                                                                        THEN left(a.text, 239) || '…' ELSE a.text END)
                                        ORDER BY a.position)
                       FROM (SELECT * FROM asked ORDER BY position DESC LIMIT 3) a), '[]'),
    'asked_more', greatest((SELECT count(*) FROM asked) - 3, 0),
    'waiting', coalesce((SELECT n FROM waiting), 0)
  )
  FROM msg, me, since
$$;

COMMENT ON FUNCTION mycelium.wake_digest(text, text, uuid) IS
  'What a handle woken by a message needs beside it: why, what changed since its last turn, its tasks, the board, who asked.';
-- Negotiations: the aligner's runs (mycelium.engines.aligner). A negotiation is an engine run of
-- kind 'aligner', moved by the same workers, leases and compare-and-swap steps as a conductor's run
-- (engines.sql); its trace is the move log a fresh worker replays into a new NEGMAS mechanism.
--
--   * start_negotiation: the run (started as any run: one per thread, the floor held by the engine,
--     the opening post, the summon closed) and the thread's roster frozen on its members, in one
--     transaction: from then on an outsider's write into the thread is refused (403 not_in_roster,
--     from HTTP and psql alike), and a member not addressed by the current turn is refused by the
--     floor (409). engine_step thaws the roster when the run closes.
--   * a membership change makes the run due at once and moves its seq (a step computed before the
--     change is refused, 409 step_moved, so nothing is lost to a race): a member who left the room
--     (no longer among the members of a room it was a member of when the run started), or the
--     roster frozen again on other members, or thawed, by anyone but the engine.
--     negotiation_departure says who left; the aligner then closes the run as rejected with it.
--   * a negotiation that found nothing to negotiate (its issues recorded as none) ends with its
--     explanation and leaves no episode: run_leaves_episode (sql/engines.sql), which engine_step
--     asks on close and mycelium.episodes filters on.

CREATE OR REPLACE FUNCTION mycelium.start_negotiation(
  p_room text, p_summon bigint, p_worker text, p_flow jsonb, p_open jsonb, p_lease_seconds double precision
) RETURNS mycelium.engine_runs LANGUAGE plpgsql AS $$
DECLARE
  kind text;
  cast_ text[];
  r mycelium.engine_runs;
BEGIN
  SELECT s.kind INTO kind FROM mycelium.engine_summons s WHERE s.room = p_room AND s.id = p_summon;
  IF kind IS DISTINCT FROM 'aligner' THEN
    PERFORM mycelium.refuse(422, 'not_an_aligner', format('summon %s is not an aligner''s', p_summon));
  END IF;
  cast_ := mycelium.handle_list(ARRAY(SELECT jsonb_array_elements_text(coalesce(p_flow -> 'cast', '[]'))), 'member');
  IF cardinality(cast_) < 2 THEN
    PERFORM mycelium.refuse(422, 'too_few_participants',
      'A negotiation needs at least two agents: name them, e.g. `@aligner @alice @bob: the price and the vendor`',
      jsonb_build_object('cast', to_jsonb(cast_)));
  END IF;
  -- the members who are members of the room now (its owner among them): leaving it aborts the run
  r := mycelium.start_engine_run(p_room, p_summon, p_worker, 'negotiate',
         p_flow || jsonb_build_object('cast', to_jsonb(cast_), 'enrolled', to_jsonb(ARRAY(
           SELECT h FROM unnest(cast_) WITH ORDINALITY AS c (h, i), mycelium.rooms ro
           WHERE ro.name = p_room AND (h = mycelium.normalize_handle(ro.owner)
                                       OR h = ANY (ARRAY(SELECT mycelium.normalize_handle(m) FROM unnest(ro.members) m)))
           ORDER BY i))),
         p_open, p_lease_seconds);
  UPDATE mycelium.engine_runs SET kind = 'aligner' WHERE room = p_room AND id = r.id RETURNING * INTO r;
  PERFORM mycelium.freeze_roster(p_room, r.episode, cast_, r.engine);
  RETURN r;
END
$$;


-- Who left a negotiation that is still open, in words (NULL while every member is still in): a member
-- no longer among the members of a room it was a member of when the run started; the thread's
-- roster thawed, or frozen again (by someone else, or on other members).
CREATE OR REPLACE FUNCTION mycelium.negotiation_departure(p_room text, p_run bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
  r mycelium.engine_runs;
  ro mycelium.rosters;
  cast_ text[];
  now_in text[];
  said text[] := '{}';
  gone text[];
BEGIN
  SELECT * INTO r FROM mycelium.engine_runs WHERE room = p_room AND id = p_run;
  IF r.room IS NULL OR r.kind <> 'aligner' OR r.state <> 'open' THEN
    RETURN NULL;
  END IF;
  cast_ := ARRAY(SELECT jsonb_array_elements_text(coalesce(r.flow -> 'cast', '[]')));
  SELECT array_remove(ARRAY(SELECT mycelium.normalize_handle(m) FROM unnest(x.members) m)
                      || mycelium.normalize_handle(x.owner), NULL)
    INTO now_in FROM mycelium.rooms x WHERE x.name = p_room;
  gone := ARRAY(SELECT h FROM jsonb_array_elements_text(coalesce(r.flow -> 'enrolled', '[]')) h
                WHERE NOT h = ANY (coalesce(now_in, '{}')));
  IF cardinality(gone) > 0 THEN
    said := said || format('%s left the room', (SELECT string_agg('@' || h, ', ') FROM unnest(gone) h));
  END IF;
  SELECT * INTO ro FROM mycelium.rosters WHERE room = r.room AND episode = r.episode;
  IF ro.room IS NULL THEN
    said := said || 'the thread''s roster was thawed'::text;
  ELSE
    gone := ARRAY(SELECT h FROM unnest(cast_) h WHERE NOT h = ANY (ro.members));
    IF cardinality(gone) > 0 THEN
      said := said || format('%s taken off the roster', (SELECT string_agg('@' || h, ', ') FROM unnest(gone) h));
    END IF;
    gone := ARRAY(SELECT h FROM unnest(ro.members) h WHERE NOT h = ANY (cast_));
    IF cardinality(gone) > 0 THEN
      said := said || format('%s added to the roster', (SELECT string_agg('@' || h, ', ') FROM unnest(gone) h));
    END IF;
    IF ro.frozen_by <> r.engine THEN
      said := said || format('the roster frozen again by @%s', ro.frozen_by);
    END IF;
  END IF;
  IF cardinality(said) = 0 THEN
    RETURN NULL;
  END IF;
  RETURN 'the negotiation''s membership changed: ' || array_to_string(said, '; ');
END
$$;


-- A membership change makes the negotiations it touches due now and moves their seq, so the
-- aligner sees it at once and a step computed before it is refused (read again, then aborted).
CREATE OR REPLACE FUNCTION mycelium.negotiation_membership_changed(p_room text, p_episode text)
RETURNS void LANGUAGE sql AS $$
  UPDATE mycelium.engine_runs r SET deadline = now(), seq = r.seq + 1, updated_at = now()
  WHERE r.room = p_room AND (p_episode IS NULL OR r.episode = p_episode) AND r.state = 'open'
    AND r.kind = 'aligner' AND mycelium.negotiation_departure(r.room, r.id) IS NOT NULL
$$;


-- A change to a thread's roster by anyone but the engine of the negotiation going there.
CREATE OR REPLACE FUNCTION mycelium.rosters_abort_negotiation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.members = OLD.members AND NEW.frozen_by = OLD.frozen_by THEN
    RETURN NULL;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM mycelium.engine_runs r WHERE r.room = OLD.room AND r.episode = OLD.episode
                 AND r.state = 'open' AND r.kind = 'aligner' AND NOT mycelium.acting_as_engine(r.engine)) THEN
    RETURN NULL;
  END IF;
  PERFORM mycelium.negotiation_membership_changed(OLD.room, OLD.episode);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER rosters_abort_negotiation AFTER UPDATE OR DELETE ON mycelium.rosters
  FOR EACH ROW EXECUTE FUNCTION mycelium.rosters_abort_negotiation();


-- A room's members changed (someone left or was removed): the negotiations a member of it was in.
CREATE OR REPLACE FUNCTION mycelium.rooms_abort_negotiation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.members IS NOT DISTINCT FROM OLD.members AND NEW.owner IS NOT DISTINCT FROM OLD.owner THEN
    RETURN NULL;
  END IF;
  PERFORM mycelium.negotiation_membership_changed(NEW.name, NULL);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER rooms_abort_negotiation AFTER UPDATE ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_abort_negotiation();


-- The record of a negotiation as upstream writes log/episodes/<short_id>.md: the header (quality
-- and satisfaction as the aligner measured them, the agreement, the team prior it left), the
-- opening positions, the term clarifications, and the move log (one JSON line per move).
CREATE OR REPLACE FUNCTION mycelium.negotiation_record(p_room text, p_run bigint) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT format(E'# Episode %s\n\n- topic: `urn:concept:mycelium:%s`\n- outcome: **%s**\n- participants: %s\n%s%s%s- within: `%s`\n%s\n## Opening Positions\n\n%s\n\n%s## Trace\n\n```jsonl\n%s\n```\n',
           mycelium.episode_urn(r.room, r.short_id), r.room, r.state,
           (SELECT string_agg(h, ', ') FROM jsonb_array_elements_text(r.flow -> 'cast') AS c (h)),
           CASE WHEN r.metrics ? 'mpc' THEN format(E'- quality: MPC %s · GAR %s · SCR %s · provenance weight %s\n',
                  r.metrics ->> 'mpc', r.metrics ->> 'gar', r.metrics ->> 'scr', r.metrics ->> 'provenance_weight')
                ELSE '' END,
           CASE WHEN r.metrics ? 'min_satisfaction'
                THEN format(E'- satisfaction: min %s (least-happy of %s agents, relative to opening asks)\n',
                            r.metrics ->> 'min_satisfaction',
                            (SELECT count(*) FROM jsonb_object_keys(r.metrics -> 'satisfaction')))
                ELSE '' END,
           coalesce((SELECT format(E'- assignments: %s\n', string_agg(format('`%s=%s`', k, v), ', '))
                     FROM jsonb_each_text(r.assignments) AS a (k, v)), '')
             || coalesce((SELECT format(E'- work: %s\n', string_agg(format('`%s`', k), ', '))
                          FROM unnest(mycelium.compiled_work(r.room, r.id)) AS w (k) HAVING count(*) > 0), ''),
           r.episode,
           CASE WHEN r.state = 'converged' AND r.pending ? 'topic'
                THEN format(E'- memory: `l9/rule_update/%s`\n', r.pending ->> 'topic') ELSE '' END,
           coalesce((SELECT string_agg(format('- %s: %s%s', o.key, coalesce(nullif(o.value ->> 'text', ''), '(no words)'),
                                              CASE WHEN jsonb_typeof(o.value -> 'offer') = 'object'
                                                   THEN format(' (offer: %s)', (SELECT string_agg(k || '=' || v, ', ')
                                                        FROM jsonb_each_text(o.value -> 'offer') AS t (k, v)))
                                                   ELSE '' END), E'\n')
                     FROM jsonb_each(r.pending -> 'openings') AS o), '(none)'),
           CASE WHEN jsonb_typeof(r.pending -> 'terms') = 'array' THEN
             format(E'## Term Clarifications\n\n%s\n\n',
                    (SELECT string_agg(format('- %s: %s', t ->> 'term', (SELECT string_agg(h || ' means ' || m, '; ')
                                              FROM jsonb_each_text(t -> 'readings') AS x (h, m))), E'\n')
                     FROM jsonb_array_elements(r.pending -> 'terms') AS t)
                    || coalesce((SELECT E'\n' || string_agg(format('- %s clarifies: %s', k, v), E'\n')
                                 FROM jsonb_each_text(r.pending -> 'clarifications') AS c (k, v)), ''))
             ELSE '' END,
           coalesce((SELECT string_agg(t.entry::text, E'\n' ORDER BY t.turn) FROM mycelium.engine_trace t
                     WHERE t.room = r.room AND t.run_id = r.id), ''))
  FROM mycelium.engine_runs r WHERE r.room = p_room AND r.id = p_run
$$;


-- The record of any run, as log/episodes/<short_id> holds it: a negotiation's, or a flow's.
CREATE OR REPLACE FUNCTION mycelium.run_record(p_room text, p_run bigint) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN r.kind = 'aligner' THEN mycelium.negotiation_record(p_room, p_run)
              ELSE mycelium.episode_record(p_room, p_run) END
  FROM mycelium.engine_runs r WHERE r.room = p_room AND r.id = p_run
$$;


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

CREATE OR REPLACE TRIGGER engine_runs_compile_inserted AFTER INSERT ON mycelium.engine_runs
  FOR EACH ROW WHEN (NEW.state = 'converged' AND NEW.assignments IS NOT NULL AND NEW.assignments <> '{}')
  EXECUTE FUNCTION mycelium.engine_runs_enqueue_compile();

CREATE OR REPLACE TRIGGER engine_runs_compile_converged AFTER UPDATE OF state, assignments ON mycelium.engine_runs
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
-- The synthesizer (mycelium.engines.synthesizer): what one of its summons distils. The room's prose
-- is read here for the engine answering the summon, and for nobody else (held_summon: the worker
-- holding the summon, acting as that engine), so behind the token gate the synthesizer reads the
-- private room it was summoned in while no other caller reads a room through it.

-- The synthesis so far and the transcript after its cursor, for summon p_summon held by p_worker:
-- {version (NULL: none yet), text, after (the cursor: the last position read, from the memory's
-- frontmatter; 0 with p_all or none), messages: [{position, sender, text}]}. The messages are the
-- room's prose (messages and replies, every thread, amendments folded in) after the cursor up to
-- the summon, without the synthesizer's own posts nor the messages that summon it; p_limit at most.
CREATE OR REPLACE FUNCTION mycelium.synthesis_input(
  p_room text, p_summon bigint, p_worker text, p_all boolean, p_limit integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  s mycelium.engine_summons := mycelium.held_summon(p_room, p_summon, p_worker);
  m mycelium.memories;
  after bigint := 0;
BEGIN
  IF s.kind <> 'synthesizer' THEN
    PERFORM mycelium.refuse(422, 'not_a_synthesizer', format('@%s is a %s, not a synthesizer', s.engine, s.kind));
  END IF;
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = 'context/synthesis';
  IF FOUND AND NOT coalesce(p_all, false) AND jsonb_typeof(m.meta -> 'cursor') = 'number'
     AND (m.meta ->> 'cursor') ~ '^\d+$' THEN
    after := (m.meta ->> 'cursor')::bigint;
  END IF;
  RETURN jsonb_build_object(
    'version', m.version,
    'text', CASE WHEN coalesce(p_all, false) THEN NULL ELSE m.value ->> 'text' END,
    'after', after,
    'messages', coalesce((
      SELECT jsonb_agg(jsonb_build_object('position', t.position, 'sender', t.sender, 'text', t.text)
                       ORDER BY t.position)
      FROM (SELECT x.position, mycelium.normalize_handle(x.sender) AS sender, x.text
            FROM mycelium.timeline x
            WHERE x.room = p_room AND x.position > after AND x.position <= s.position
              AND x.kind IN ('intent', 'exchange', 'commit') AND x.payload_type IN ('message', 'reply')
              AND x.sender <> 'system' AND mycelium.normalize_handle(x.sender) <> s.engine
              AND NOT (s.engine = ANY (x.mentions))
            ORDER BY x.position LIMIT greatest(coalesce(p_limit, 0), 0)) t), '[]'));
END
$$;


-- Why a value does not fit a setting, or NULL when it does.
CREATE OR REPLACE FUNCTION mycelium.setting_problem(k mycelium.setting_kinds, p_value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN jsonb_typeof(p_value) IS DISTINCT FROM k.value_type
      THEN format('%s takes a %s, not %s', k.name, k.value_type, coalesce(p_value::text, 'nothing'))
    WHEN k.min_value IS NOT NULL AND (p_value #>> '{}')::double precision < k.min_value
      THEN format('%s is at least %s', k.name, k.min_value)
    WHEN k.max_value IS NOT NULL AND (p_value #>> '{}')::double precision > k.max_value
      THEN format('%s is at most %s', k.name, k.max_value)
  END
$$;


-- Like require_room: refuse (404, naming the known settings) a name the catalogue does not hold.
CREATE OR REPLACE FUNCTION mycelium.require_setting(p_name text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM mycelium.setting_kinds WHERE name = p_name) THEN
    PERFORM mycelium.refuse(404, 'unknown_setting',
      format('there is no setting %L (known: %s)', p_name,
             (SELECT string_agg(name, ', ' ORDER BY name) FROM mycelium.setting_kinds)),
      jsonb_build_object('name', p_name,
                         'known', (SELECT jsonb_agg(name ORDER BY name) FROM mycelium.setting_kinds)));
  END IF;
END
$$;


-- Every config row names a known setting, in a room that exists, and holds a value that fits it
-- (psql included; write_setting relies on this check for what it writes).
CREATE OR REPLACE FUNCTION mycelium.config_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  k mycelium.setting_kinds;
  problem text;
BEGIN
  SELECT * INTO k FROM mycelium.setting_kinds WHERE name = NEW.name;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(422, 'unknown_setting', format('there is no setting %L', NEW.name),
                            jsonb_build_object('name', NEW.name));
  END IF;
  IF NEW.room <> '' THEN
    PERFORM mycelium.require_room(NEW.room);
  END IF;
  problem := mycelium.setting_problem(k, NEW.value);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_setting', problem,
                            jsonb_build_object('name', NEW.name, 'value', NEW.value, 'type', k.value_type));
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER config_check BEFORE INSERT OR UPDATE ON mycelium.config
  FOR EACH ROW EXECUTE FUNCTION mycelium.config_check();


CREATE OR REPLACE FUNCTION mycelium.settings_of(p_room text DEFAULT '') RETURNS SETOF mycelium.setting
LANGUAGE sql STABLE AS $$
  SELECT k.name,
         coalesce(r.value, h.value, k.default_value),
         CASE WHEN r.value IS NOT NULL THEN 'room' WHEN h.value IS NOT NULL THEN 'hub' ELSE 'default' END,
         h.value, r.value, k.value_type, k.default_value, k.min_value, k.max_value, k.description,
         coalesce(r.updated_by, h.updated_by), coalesce(r.updated_at, h.updated_at)
  FROM mycelium.setting_kinds k
  LEFT JOIN mycelium.config h ON h.room = '' AND h.name = k.name
  LEFT JOIN mycelium.config r ON coalesce(p_room, '') <> '' AND r.room = p_room AND r.name = k.name
  ORDER BY k.name
$$;


-- Write one setting for a room, or hub-wide with p_room '' or NULL; a NULL value clears it (the
-- room then follows the hub, the hub its default). Returns the setting as it now applies there.
CREATE OR REPLACE FUNCTION mycelium.write_setting(p_name text, p_value jsonb, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS SETOF mycelium.setting LANGUAGE plpgsql AS $$
DECLARE
  room text := coalesce(p_room, '');
BEGIN
  PERFORM mycelium.operator_only('write_setting');
  PERFORM mycelium.require_setting(p_name);
  -- a write's room and value are checked by the config table's trigger; a clear deletes, which
  -- that trigger never sees
  IF room <> '' AND (p_value IS NULL OR p_value = 'null'::jsonb) THEN
    PERFORM mycelium.require_room(room);
  END IF;
  PERFORM mycelium.set_config(p_name, nullif(p_value, 'null'::jsonb), room, mycelium.author(p_by));
  RETURN QUERY SELECT * FROM mycelium.settings_of(room) s WHERE s.name = p_name;
END
$$;


-- ---------------------------------------------------------------------------------------------
-- Heartbeats, the report, forgetting.

-- A process reports its loops: p_loops is a JSON array of objects with the loop's name ("loop"),
-- "state", "leader", "backend_pid", "interval_seconds", "last_success_at", "last_error",
-- "last_error_at", "warning" (a problem of a loop that still runs), "failures" and "stuck". A worker already marked stopped stays stopped.
CREATE OR REPLACE FUNCTION mycelium.beat_worker(
  p_worker uuid, p_kind text, p_host text, p_pid integer, p_started_at timestamptz, p_loops jsonb
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  IF jsonb_typeof(p_loops) IS DISTINCT FROM 'array' THEN
    PERFORM mycelium.refuse(422, 'invalid_loops', 'loops is a JSON array of loop reports');
  END IF;
  INSERT INTO mycelium.worker_loops AS w (
    worker_id, loop, kind, host, pid, started_at, state, leader, backend_pid, interval_seconds,
    last_success_at, last_error, last_error_at, warning, failures, stuck, heartbeat_at)
  SELECT p_worker, l.loop, p_kind, p_host, p_pid, p_started_at, l.state, coalesce(l.leader, false),
         l.backend_pid, l.interval_seconds, l.last_success_at, left(l.last_error, 2000), l.last_error_at,
         left(l.warning, 2000), coalesce(l.failures, 0), coalesce(l.stuck, false), now()
  FROM jsonb_to_recordset(p_loops) AS l (
    loop text, state text, leader boolean, backend_pid integer, interval_seconds double precision,
    last_success_at timestamptz, last_error text, last_error_at timestamptz, warning text,
    failures integer, stuck boolean)
  ON CONFLICT (worker_id, loop) DO UPDATE
    SET state = excluded.state, leader = excluded.leader, backend_pid = excluded.backend_pid,
        interval_seconds = excluded.interval_seconds, last_success_at = excluded.last_success_at,
        last_error = excluded.last_error, last_error_at = excluded.last_error_at,
        warning = excluded.warning, failures = excluded.failures, stuck = excluded.stuck, heartbeat_at = excluded.heartbeat_at
    WHERE w.state <> 'stopped';
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;


-- A process that shuts down marks its loops stopped (and leading nothing).
CREATE OR REPLACE FUNCTION mycelium.stop_worker(p_worker uuid) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  UPDATE mycelium.worker_loops
  SET state = 'stopped', leader = false, backend_pid = NULL, stuck = false, heartbeat_at = now()
  WHERE worker_id = p_worker;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;


-- Every loop of every process the table knows, with whether its process is alive (not stopped, and
-- beaten within p_alive_within) and whether it leads: it says so, its process is alive and its
-- connection still holds an advisory lock (a killed leader's row stops counting at once).
CREATE OR REPLACE FUNCTION mycelium.worker_report(p_alive_within interval DEFAULT '15 seconds')
RETURNS TABLE (
  worker_id uuid, loop text, kind text, host text, pid integer, started_at timestamptz, state text,
  leader boolean, interval_seconds double precision, last_success_at timestamptz, last_error text,
  last_error_at timestamptz, warning text, failures integer, stuck boolean, heartbeat_at timestamptz,
  alive boolean
) LANGUAGE sql STABLE AS $$
  SELECT w.worker_id, w.loop, w.kind, w.host, w.pid, w.started_at, w.state,
         w.leader AND a.alive AND EXISTS (
           SELECT 1 FROM pg_locks l
           WHERE l.pid = w.backend_pid AND l.locktype = 'advisory' AND l.granted),
         w.interval_seconds, w.last_success_at, w.last_error, w.last_error_at, w.warning, w.failures,
         w.stuck AND a.alive, w.heartbeat_at, a.alive
  FROM mycelium.worker_loops w
  CROSS JOIN LATERAL (SELECT w.state <> 'stopped' AND w.heartbeat_at >= now() - p_alive_within AS alive) a
  ORDER BY w.started_at, w.worker_id, w.loop
$$;


-- Remove the rows of processes nobody has beaten for p_older_than (stopped or dead); how many went.
CREATE OR REPLACE FUNCTION mycelium.forget_stale_workers(p_older_than interval DEFAULT '10 minutes')
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  DELETE FROM mycelium.worker_loops WHERE heartbeat_at < now() - p_older_than;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;


-- The vector indexers share the memories without a vector: each claims a batch with a session
-- advisory lock per memory, which its connection holds while it embeds (no row lock and no open
-- transaction, so writers of those memories never wait on an embedder) and gives back once the
-- vectors are stored. A claim is re-read after its lock is taken: an indexer that stored a
-- vector and let go of it after this scan began has left nothing to do. An indexer that dies
-- loses its connection and with it its claims.
CREATE OR REPLACE FUNCTION mycelium.vector_claim_key(p_room text, p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
  SELECT hashtextextended('mycelium.vector/' || p_room || '/' || p_key, 0)
$$;


CREATE OR REPLACE FUNCTION mycelium.claim_missing_vectors(p_limit integer DEFAULT 32)
RETURNS TABLE (room text, key text, version integer, content text) LANGUAGE plpgsql AS $$
DECLARE
  m record;
  n integer := 0;
BEGIN
  FOR m IN
    SELECT x.room, x.key FROM mycelium.memories x WHERE x.embedding IS NULL ORDER BY x.room, x.key
  LOOP
    EXIT WHEN n >= p_limit;
    CONTINUE WHEN NOT pg_try_advisory_lock(mycelium.vector_claim_key(m.room, m.key));
    SELECT x.room, x.key, x.version, coalesce(x.content_text, x.value ->> 'text', x.value::text)
    INTO room, key, version, content
    FROM mycelium.memories x
    WHERE x.room = m.room AND x.key = m.key AND x.embedding IS NULL;
    IF FOUND THEN
      n := n + 1;
      RETURN NEXT;
    ELSE
      PERFORM pg_advisory_unlock(mycelium.vector_claim_key(m.room, m.key));
    END IF;
  END LOOP;
END
$$;


-- Give back claims taken by claim_missing_vectors (on the same connection); how many were held.
CREATE OR REPLACE FUNCTION mycelium.release_vector_claims(p_rooms text[], p_keys text[])
RETURNS integer LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE pg_advisory_unlock(mycelium.vector_claim_key(c.room, c.key)))::integer
  FROM unnest(p_rooms, p_keys) AS c (room, key)
$$;


CREATE OR REPLACE FUNCTION mycelium.mint_join_code(
  p_room text, p_handle text, p_code_hash bytea, p_ttl_seconds integer DEFAULT 600
) RETURNS TABLE (room text, handle text, expires_at timestamptz) LANGUAGE plpgsql AS $$
DECLARE
  who text := mycelium.author(p_handle, 'handle');
  found mycelium.join_codes;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF who IS NULL OR btrim(who) = '' THEN
    PERFORM mycelium.refuse(422, 'invalid_handle', 'a join code is minted for a handle');
  END IF;
  IF p_ttl_seconds IS NULL OR p_ttl_seconds NOT BETWEEN 1 AND 86400 THEN
    PERFORM mycelium.refuse(422, 'invalid_ttl', 'a join code lives between 1 second and a day');
  END IF;
  DELETE FROM mycelium.join_codes j WHERE j.expires_at < now() - interval '1 day';
  INSERT INTO mycelium.join_codes (code_hash, room, handle, created_by, expires_at)
  VALUES (p_code_hash, p_room, mycelium.normalize_handle(who), mycelium.actor(),
          now() + make_interval(secs => p_ttl_seconds))
  RETURNING * INTO found;
  PERFORM mycelium.audit('join.mint', p_room, found.handle,
                         jsonb_build_object('expires_at', found.expires_at));
  RETURN QUERY SELECT found.room, found.handle, found.expires_at;
END
$$;


-- Redeem a code once: the handle becomes a member of the room. Unknown, used and expired codes get
-- the same answer, so nothing is learnt by guessing.
CREATE OR REPLACE FUNCTION mycelium.redeem_join_code(p_code_hash bytea)
RETURNS TABLE (room text, handle text) LANGUAGE plpgsql AS $$
DECLARE
  found mycelium.join_codes;
BEGIN
  UPDATE mycelium.join_codes j SET redeemed_at = now(), redeemed_by = mycelium.actor()
  WHERE j.code_hash = p_code_hash AND j.redeemed_at IS NULL AND j.expires_at > now()
  RETURNING * INTO found;
  IF found.code_hash IS NULL THEN
    PERFORM mycelium.refuse(400, 'join_code_invalid',
                            'that join code isn''t valid: it may have been used or expired');
  END IF;
  UPDATE mycelium.rooms r SET members = array_append(r.members, found.handle), updated_at = now()
  WHERE r.name = found.room AND NOT found.handle = ANY (r.members) AND r.owner IS DISTINCT FROM found.handle;
  PERFORM mycelium.audit('join.redeem', found.room, found.handle, '{}');
  RETURN QUERY SELECT found.room, found.handle;
END
$$;


-- The hub's first key, unless another process registered one first (then that one is answered).
CREATE OR REPLACE FUNCTION mycelium.ensure_hub_key(p_kid text, p_public_jwk jsonb, p_sealed bytea)
RETURNS SETOF mycelium.hub_keys LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('mycelium.hub_keys'));
  IF NOT EXISTS (SELECT 1 FROM mycelium.hub_keys WHERE retired_at IS NULL) THEN
    INSERT INTO mycelium.hub_keys (kid, public_jwk, sealed_private) VALUES (p_kid, p_public_jwk, p_sealed);
    PERFORM mycelium.audit('auth.key_registered', NULL, p_kid, '{}');
  END IF;
  RETURN QUERY SELECT * FROM mycelium.hub_keys WHERE retired_at IS NULL ORDER BY created_at DESC LIMIT 1;
END
$$;


-- A new signing key; every other one retired (tokens they signed verify until they expire).
CREATE OR REPLACE FUNCTION mycelium.rotate_hub_key(p_kid text, p_public_jwk jsonb, p_sealed bytea)
RETURNS SETOF mycelium.hub_keys LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('rotate_hub_key');
  PERFORM pg_advisory_xact_lock(hashtext('mycelium.hub_keys'));
  UPDATE mycelium.hub_keys SET retired_at = now() WHERE retired_at IS NULL;
  INSERT INTO mycelium.hub_keys (kid, public_jwk, sealed_private) VALUES (p_kid, p_public_jwk, p_sealed);
  PERFORM mycelium.audit('auth.key_rotated', NULL, p_kid, '{}');
  RETURN QUERY SELECT * FROM mycelium.hub_keys WHERE kid = p_kid;
END
$$;


-- The canonical text an entry's hash covers (every field but the hashes, in this order).
CREATE OR REPLACE FUNCTION mycelium.audit_preimage(e mycelium.audit_log) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT concat_ws(E'\n', 'mycelium.audit/v1', e.id::text,
                   to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), e.action,
                   coalesce(e.actor, ''), coalesce(e.actor_kind, ''), coalesce(e.principal, ''),
                   coalesce(e.principal_role, ''), coalesce(e.room, ''), coalesce(e.target, ''),
                   e.detail::text)
$$;


-- Append one entry (the chain is one line: appends take turns on a transaction lock).
CREATE OR REPLACE FUNCTION mycelium.audit(p_action text, p_room text, p_target text, p_detail jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  e mycelium.audit_log;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('mycelium.audit_log'));
  e.id := nextval(pg_get_serial_sequence('mycelium.audit_log', 'id'));
  e.at := clock_timestamp();
  e.action := p_action;
  e.actor := nullif(current_setting('mycelium.actor', true), '');
  e.actor_kind := nullif(current_setting('mycelium.actor_kind', true), '');
  e.principal := mycelium.principal();
  e.principal_role := nullif(current_setting('mycelium.principal_role', true), '');
  e.room := p_room;
  e.target := p_target;
  e.detail := coalesce(p_detail, '{}');
  SELECT hash INTO e.prev_hash FROM mycelium.audit_log ORDER BY id DESC LIMIT 1;
  e.hash := sha256(convert_to(coalesce(encode(e.prev_hash, 'hex'), '') || E'\n' || mycelium.audit_preimage(e),
                              'UTF8'));
  INSERT INTO mycelium.audit_log OVERRIDING SYSTEM VALUE SELECT e.*;
  RETURN e.id;
END
$$;


-- Every entry whose hash or link does not hold (none: the chain is intact).
CREATE OR REPLACE FUNCTION mycelium.verify_audit_chain()
RETURNS TABLE (id bigint, problem text) LANGUAGE sql STABLE AS $$
  WITH chain AS (
    SELECT a, lag(a.hash) OVER (ORDER BY a.id) AS before, lag(a.id) OVER (ORDER BY a.id) AS before_id
    FROM mycelium.audit_log a
  )
  SELECT (c.a).id, CASE
      WHEN (c.a).prev_hash IS DISTINCT FROM c.before THEN 'does not follow the entry before it'
      ELSE 'content does not match its hash' END
  FROM chain c
  WHERE (c.a).prev_hash IS DISTINCT FROM c.before
     OR (c.a).hash <> sha256(convert_to(coalesce(encode((c.a).prev_hash, 'hex'), '') || E'\n'
                                        || mycelium.audit_preimage(c.a), 'UTF8'))
  ORDER BY 1
$$;


CREATE OR REPLACE FUNCTION mycelium.audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'audit_append_only', 'the audit trail is append-only: entries are never changed or removed');
  RETURN NULL;
END
$$;


CREATE OR REPLACE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON mycelium.audit_log
FOR EACH ROW EXECUTE FUNCTION mycelium.audit_append_only();

CREATE OR REPLACE TRIGGER audit_no_truncate BEFORE TRUNCATE ON mycelium.audit_log
FOR EACH STATEMENT EXECUTE FUNCTION mycelium.audit_append_only();


-- What the privileged actions change, recorded.
CREATE OR REPLACE FUNCTION mycelium.audit_room_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.audit('room.delete', OLD.name, OLD.name,
                         jsonb_build_object('owner', OLD.owner, 'is_public', OLD.is_public));
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER audit_room_deleted AFTER DELETE ON mycelium.rooms
FOR EACH ROW EXECUTE FUNCTION mycelium.audit_room_deleted();


CREATE OR REPLACE FUNCTION mycelium.audit_setting_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM mycelium.audit('settings.clear', nullif(OLD.room, ''), OLD.name, jsonb_build_object('was', OLD.value));
  ELSIF TG_OP = 'INSERT' OR OLD.value IS DISTINCT FROM NEW.value THEN
    PERFORM mycelium.audit('settings.write', nullif(NEW.room, ''), NEW.name,
                           jsonb_build_object('value', NEW.value,
                                              'was', CASE WHEN TG_OP = 'UPDATE' THEN OLD.value END));
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER audit_setting_written AFTER INSERT OR UPDATE OR DELETE ON mycelium.config
FOR EACH ROW EXECUTE FUNCTION mycelium.audit_setting_written();


CREATE OR REPLACE FUNCTION mycelium.audit_transition_operator() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.operator_resolution IS NOT NULL AND OLD.operator_resolution IS NULL THEN
    PERFORM mycelium.audit('transition.release', NULL, NEW.request_id,
                           jsonb_build_object('verified', NEW.operator_resolution, 'by', NEW.resolved_by,
                                              'reason', NEW.resolution_reason,
                                              'from_outcome', NEW.released_from_outcome));
  END IF;
  IF NEW.worker_dead_asserted_at IS DISTINCT FROM OLD.worker_dead_asserted_at
     AND NEW.worker_dead_asserted_at IS NOT NULL THEN
    PERFORM mycelium.audit('transition.worker_dead', NULL, NEW.request_id,
                           jsonb_build_object('owner', NEW.owner, 'by', NEW.worker_dead_asserted_by));
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER audit_transition_operator AFTER UPDATE ON mycelium.transitions
FOR EACH ROW WHEN (NEW.operator_resolution IS DISTINCT FROM OLD.operator_resolution
                   OR NEW.worker_dead_asserted_at IS DISTINCT FROM OLD.worker_dead_asserted_at)
EXECUTE FUNCTION mycelium.audit_transition_operator();


CREATE OR REPLACE FUNCTION mycelium.audit_receipt_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM mycelium.audit('receipts.key_registered', NULL, NEW.key_id,
                           jsonb_build_object('public_key', encode(NEW.public_key, 'hex')));
  ELSIF NEW.retired_at IS NOT NULL AND OLD.retired_at IS NULL THEN
    PERFORM mycelium.audit('receipts.key_retired', NULL, NEW.key_id, '{}');
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER audit_receipt_key AFTER INSERT OR UPDATE ON mycelium.receipt_keys
FOR EACH ROW EXECUTE FUNCTION mycelium.audit_receipt_key();


-- A forced release, as the board's released notice records it (assignments_after_write decides).
CREATE OR REPLACE FUNCTION mycelium.audit_forced_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.audit('lease.force_release', NEW.room, NEW.payload ->> 'key',
                         jsonb_build_object('holder', NEW.payload ->> 'holder', 'by', NEW.payload ->> 'by',
                                            'note', NEW.payload ->> 'note'));
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER audit_forced_release AFTER INSERT ON mycelium.messages
FOR EACH ROW WHEN (NEW.payload_type = 'notice' AND NEW.payload ->> 'subkind' = 'released'
                   AND NEW.payload ->> 'forced' = 'true')
EXECUTE FUNCTION mycelium.audit_forced_release();
-- Private rooms, enforced by the database. With the token gate on (the hub-wide setting auth.gate,
-- which a gated hub writes at start), a private room and every row of it are visible only to its
-- owner, its members and operators, whoever asks:
--
--   * the principal is what the verb gateway sets for each transaction of a gated request
--     (mycelium.principal, mycelium.principal_role, transaction-local); the app role's credentials
--     are trusted as the gateway's, so a replica asserts who asks, and the database decides what
--     that principal may see;
--   * reads the app role makes of the tables are filtered by row-level security on every table
--     with a room (the list is taken from the catalogue when this file is applied, so a new table
--     is covered without being named here); mycelium_auditor reads everything;
--   * verbs run with their owner's rights: require_room (rooms.sql) answers 404 room_not_found
--     for a room the principal may not see, and a trigger on every such table refuses a write into
--     one the same way (a non-member cannot even tell the room exists);
--   * with no principal (psql as the app role, a replica with a bug) a closed gate shows public
--     rooms only; the hub's own loops act as the operator they are.
-- With the gate off (the default) row-level security is off on those tables, so their reads plan
-- as they always have (a policy keeps an index from serving a qual PostgreSQL does not know to be
-- leakproof, such as a trigram LIKE); writing auth.gate turns it on or off (apply_privacy).

CREATE OR REPLACE FUNCTION mycelium.principal() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT nullif(current_setting('mycelium.principal', true), '')
$$;


-- Is this an administrator's own session (the owner or a superuser in psql, a migration), rather
-- than the app role's (every hub replica sets role mycelium_app; an app login is a member of it
-- alone)? The role setting is the session's even inside a function that runs as its owner.
CREATE OR REPLACE FUNCTION mycelium.administrator_session() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN current_setting('role') <> 'mycelium_app'
     AND (NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_admin')
          OR pg_has_role(session_user, 'mycelium_admin', 'MEMBER'));
END
$$;


-- Is the token gate closed: the hub-wide auth.gate on?
CREATE OR REPLACE FUNCTION mycelium.private_rooms_closed() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
BEGIN
  RETURN coalesce((SELECT value = 'true'::jsonb FROM mycelium.config WHERE name = 'auth.gate' AND room = ''),
                  false);
END
$$;


-- Does a room admit a handle (NULL: nobody declared)? Public rooms admit anyone; a private one its
-- owner and its members.
CREATE OR REPLACE FUNCTION mycelium.room_admits(r mycelium.rooms, who text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT r.is_public OR coalesce(r.owner = who OR who = ANY (r.members), false)
$$;


-- Does the gate leave every room open to the one asking? (No gate, an operator, or an
-- administrator's own session with no principal declared.)
CREATE OR REPLACE FUNCTION mycelium.rooms_open() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
BEGIN
  RETURN coalesce(current_setting('mycelium.principal_role', true), '') = 'operator'
      OR NOT mycelium.private_rooms_closed()
      OR (mycelium.principal() IS NULL AND mycelium.administrator_session());
END
$$;


-- The private rooms the one asking may not see ('{}' when rooms_open()). Policies call it once per
-- statement, as (SELECT mycelium.hidden_rooms()).
CREATE OR REPLACE FUNCTION mycelium.hidden_rooms() RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
DECLARE
  who text := mycelium.principal();
BEGIN
  IF mycelium.rooms_open() THEN
    RETURN '{}';
  END IF;
  RETURN coalesce((SELECT array_agg(r.name) FROM mycelium.rooms r WHERE NOT mycelium.room_admits(r, who)), '{}');
END
$$;


-- May the one asking see p_room? (A room that does not exist is not hidden: its absence is
-- answered as it always is.) One look at the room's own row.
CREATE OR REPLACE FUNCTION mycelium.room_visible(p_room text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
DECLARE
  who text := mycelium.principal();
BEGIN
  RETURN p_room IS NULL
      OR coalesce((SELECT mycelium.room_admits(r, who) FROM mycelium.rooms r WHERE r.name = p_room), true)
      OR mycelium.rooms_open();
END
$$;


-- The write guard: a write into a room the principal may not see is refused as if the room did not
-- exist. (Writes without a principal are the hub's own or an open hub's.) A room found visible is
-- remembered for the rest of the transaction (with the principal it was found visible to), so the
-- several rows one verb writes in a room cost one look at it; the room is read from the row's own
-- column (a trigger function is compiled per table, so NEW.room names each table's column).
CREATE OR REPLACE FUNCTION mycelium.guard_room_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  who text := mycelium.principal();
  target text;
BEGIN
  IF who IS NULL OR current_setting('mycelium.principal_role', true) = 'operator' THEN
    RETURN coalesce(NEW, OLD);
  END IF;
  IF TG_TABLE_NAME = 'rooms' THEN
    IF TG_OP = 'INSERT' THEN
      RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
      target := OLD.name;
    ELSE
      target := NEW.name;
    END IF;
  ELSIF TG_OP = 'DELETE' THEN
    target := OLD.room;
  ELSE
    target := NEW.room;
  END IF;
  IF target IS NULL OR current_setting('mycelium.room_seen', true) = who || E'\n' || target THEN
    RETURN coalesce(NEW, OLD);
  END IF;
  IF NOT mycelium.room_visible(target) THEN
    PERFORM mycelium.refuse(404, 'room_not_found', format('Room %L not found', target),
                            jsonb_build_object('room', target));
  END IF;
  PERFORM set_config('mycelium.room_seen', who || E'\n' || target, true);
  RETURN coalesce(NEW, OLD);
END
$$;


-- The tables this file protects: every base table of the schema with a room (rooms by its name),
-- but config: the settings are no secret of a room, and writing auth.gate there is what turns the
-- protection on (a table cannot be altered by a trigger of a statement that uses it).
CREATE OR REPLACE FUNCTION mycelium.room_scoped_tables() RETURNS TABLE (table_name text, room_column text)
LANGUAGE sql STABLE AS $$
  SELECT c.relname::text, a.attname::text
  FROM pg_class c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('r', 'p')
    AND ((c.relname = 'rooms' AND a.attname = 'name') OR (c.relname <> 'rooms' AND a.attname = 'room'))
    AND c.relname <> 'config'
  ORDER BY 1
$$;


-- Row-level security on the protected tables as auth.gate says: on while the gate is closed, off
-- otherwise. Called when the setting is written, and after every upgrade.
CREATE OR REPLACE FUNCTION mycelium.apply_privacy() RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  t record;
  closed boolean := mycelium.private_rooms_closed();
BEGIN
  FOR t IN SELECT * FROM mycelium.room_scoped_tables() LOOP
    IF closed IS DISTINCT FROM (SELECT relrowsecurity FROM pg_class
                                WHERE oid = format('mycelium.%I', t.table_name)::regclass) THEN
      EXECUTE format('ALTER TABLE mycelium.%I %s ROW LEVEL SECURITY', t.table_name,
                     CASE WHEN closed THEN 'ENABLE' ELSE 'DISABLE' END);
    END IF;
  END LOOP;
  RETURN closed;
END
$$;


CREATE OR REPLACE FUNCTION mycelium.config_gate_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (CASE WHEN TG_OP = 'DELETE' THEN OLD.name ELSE NEW.name END) = 'auth.gate' THEN
    PERFORM mycelium.apply_privacy();
  END IF;
  RETURN NULL;
END
$$;


CREATE OR REPLACE TRIGGER config_gate_changed AFTER INSERT OR UPDATE OR DELETE ON mycelium.config
FOR EACH ROW EXECUTE FUNCTION mycelium.config_gate_changed();


-- The policies and guards on every protected table (a table added later gets them at the end of
-- the upgrade that adds it).
DO $privacy$
DECLARE
  t record;
BEGIN
  FOR t IN SELECT * FROM mycelium.room_scoped_tables() LOOP
    EXECUTE format('DROP POLICY IF EXISTS room_visible ON mycelium.%I', t.table_name);
    EXECUTE format('DROP POLICY IF EXISTS auditor_reads ON mycelium.%I', t.table_name);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_app') THEN
      EXECUTE format($p$CREATE POLICY room_visible ON mycelium.%I FOR SELECT TO mycelium_app
                        USING ((SELECT mycelium.rooms_open()) OR NOT %I = ANY ((SELECT mycelium.hidden_rooms())::text[]))$p$,
                     t.table_name, t.room_column);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mycelium_auditor') THEN
      EXECUTE format('CREATE POLICY auditor_reads ON mycelium.%I FOR SELECT TO mycelium_auditor USING (true)',
                     t.table_name);
    END IF;
    EXECUTE format('CREATE OR REPLACE TRIGGER guard_room_write BEFORE INSERT OR UPDATE OR DELETE ON mycelium.%I '
                   'FOR EACH ROW EXECUTE FUNCTION mycelium.guard_room_write()', t.table_name);
  END LOOP;
  PERFORM mycelium.apply_privacy();
END
$privacy$;
-- The schema as a catalogue of named definitions, and its fingerprint.
--
-- One row per object of schema mycelium that decides behaviour: relations with their privileges
-- (each access list in a stable order: the order grants were made in changes nothing),
-- columns (position, type, nullability, default, generation), constraints, indexes, functions (the
-- full definition with its attributes, digested, and privileges), triggers, views, policies,
-- domains, types and sequences, and comments. Two databases with the same catalogue behave the
-- same; the tests compare a database migrated from an earlier release with a fresh one this way, and
-- /health reports the fingerprint, so replicas can tell they are on the same schema.

CREATE OR REPLACE FUNCTION mycelium.schema_catalogue()
RETURNS TABLE (kind text, name text, definition text) LANGUAGE sql STABLE AS $$
  SELECT 'relation', c.relname, c.relkind::text || ' ' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(c.relacl) a), '')
                                || CASE WHEN c.relrowsecurity THEN ' rls' ELSE '' END
  FROM pg_class c
  WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  UNION ALL
  SELECT 'column', c.relname || '.' || a.attname,
         row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ' '
         || format_type(a.atttypid, a.atttypmod)
         || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
         || CASE a.attgenerated WHEN 's' THEN ' generated ' ELSE ' default ' END
         || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
         || coalesce(' ' || (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(a.attacl) a), '')
  FROM pg_class c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'c', 'f')
  UNION ALL
  SELECT 'constraint', coalesce(c.relname, t.typname) || '.' || k.conname, pg_get_constraintdef(k.oid)
  FROM pg_constraint k
  LEFT JOIN pg_class c ON c.oid = k.conrelid
  LEFT JOIN pg_type t ON t.oid = k.contypid
  WHERE k.connamespace = 'mycelium'::regnamespace
  UNION ALL
  SELECT 'index', c.relname, pg_get_indexdef(c.oid)
  FROM pg_class c WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('i', 'I')
  UNION ALL
  SELECT 'function', p.oid::regprocedure::text,
         md5(pg_get_functiondef(p.oid)) || ' ' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), '')
  FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace AND p.prokind IN ('f', 'p', 'w')
  UNION ALL
  SELECT 'function', p.oid::regprocedure::text, 'aggregate ' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), '')
  FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace AND p.prokind = 'a'
  UNION ALL
  SELECT 'trigger', c.relname || '.' || g.tgname, pg_get_triggerdef(g.oid)
         || CASE g.tgenabled WHEN 'D' THEN ' disabled' ELSE '' END
  FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
  WHERE c.relnamespace = 'mycelium'::regnamespace AND NOT g.tgisinternal
  UNION ALL
  SELECT 'view', c.relname, md5(pg_get_viewdef(c.oid))
  FROM pg_class c WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind IN ('v', 'm')
  UNION ALL
  SELECT 'policy', p.tablename || '.' || p.policyname,
         concat_ws(' ', p.permissive, p.roles::text, p.cmd, p.qual, p.with_check)
  FROM pg_policies p WHERE p.schemaname = 'mycelium'
  UNION ALL
  SELECT 'type', t.typname,
         t.typtype::text || ' ' || CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
                                         || CASE WHEN t.typnotnull THEN ' not null' ELSE '' END
                                         || coalesce(' default ' || t.typdefault, '')
                                    ELSE '' END
  FROM pg_type t
  WHERE t.typnamespace = 'mycelium'::regnamespace AND t.typtype IN ('d', 'e', 'c')
    AND (t.typtype <> 'c' OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
  UNION ALL
  SELECT 'sequence', c.relname,
         concat_ws(' ', format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcycle)
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
  WHERE c.relnamespace = 'mycelium'::regnamespace
  UNION ALL
  SELECT 'comment', d.classoid::regclass::text || ' ' || coalesce(
           (SELECT relname FROM pg_class WHERE oid = d.objoid AND d.classoid = 'pg_class'::regclass)
             || coalesce('.' || (SELECT attname FROM pg_attribute WHERE attrelid = d.objoid AND attnum = d.objsubid
                                 AND d.objsubid > 0), ''),
           (SELECT oid::regprocedure::text FROM pg_proc WHERE oid = d.objoid AND d.classoid = 'pg_proc'::regclass),
           d.objoid::text),
         md5(d.description)
  FROM pg_description d
  WHERE (d.classoid = 'pg_class'::regclass
         AND d.objoid IN (SELECT oid FROM pg_class WHERE relnamespace = 'mycelium'::regnamespace))
     OR (d.classoid = 'pg_proc'::regclass
         AND d.objoid IN (SELECT oid FROM pg_proc WHERE pronamespace = 'mycelium'::regnamespace))
  UNION ALL
  SELECT 'schema', n.nspname, coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(n.nspacl) a), '')
  FROM pg_namespace n WHERE n.nspname = 'mycelium'
$$;

COMMENT ON FUNCTION mycelium.schema_catalogue() IS
  'Every behaviour-deciding object of schema mycelium as (kind, name, definition) rows.';


CREATE OR REPLACE FUNCTION mycelium.schema_fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT encode(sha256(convert_to(
           string_agg(kind || ' ' || name || ' ' || definition, E'\n' ORDER BY kind, name, definition),
           'UTF8')), 'hex')
  FROM mycelium.schema_catalogue()
$$;

COMMENT ON FUNCTION mycelium.schema_fingerprint() IS
  'A digest of mycelium.schema_catalogue(): equal on two databases with the same schema.';
