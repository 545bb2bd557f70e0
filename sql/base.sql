-- Schema, refusals and hub-wide facts.
--
-- Every verb refuses with SQLSTATE 'MYnnn' where nnn is the HTTP status the refusal means
-- (MY404 not found, MY409 conflict, MY422 unprocessable, ...). MESSAGE is the sentence a person
-- reads; DETAIL is a JSON object {"error": <stable code>, ...extra fields}. psql shows both; the hub
-- turns them into {"error", "message", ...} bodies with that status.

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
