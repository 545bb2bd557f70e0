-- The audit trail of privileged actions: one append-only, hash-chained table, written by triggers
-- on what the actions change (so an action taken from psql is recorded exactly like one through
-- the hub), verifiable in SQL like the receipts:
--
--   hash = sha256(prev_hash_hex || E'\n' || audit_preimage(entry)),   prev_hash of the first is NULL
--
-- Recorded: a room deleted, a setting written or cleared, a transition released by an operator, a
-- worker asserted dead, a receipt key registered or retired, a lease released by force (as its
-- released notice says), join codes minted and redeemed and the hub's member-token keys
-- (sql/joins.sql). Each entry names the actor the gateway
-- declared and the verified principal behind it (when the token gate is on).

CREATE TABLE mycelium.audit_log (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  action text NOT NULL CONSTRAINT audit_action_shape CHECK (action ~ '^[a-z_]+\.[a-z_]+$'),
  actor text,
  actor_kind text,
  principal text,
  principal_role text,
  room text,
  target text,
  detail jsonb NOT NULL DEFAULT '{}',
  prev_hash bytea,
  hash bytea NOT NULL CONSTRAINT audit_hash_length CHECK (length(hash) = 32)
);
COMMENT ON TABLE mycelium.audit_log IS
  'Privileged actions, append-only and hash-chained (verify_audit_chain()).';

-- The canonical text an entry's hash covers (every field but the hashes, in this order).
CREATE OR REPLACE FUNCTION mycelium.audit_preimage(e mycelium.audit_log) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT concat_ws(E'\n', 'mycelium.audit/v1', e.id::text,
                   to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), e.action,
                   coalesce(e.actor, ''), coalesce(e.actor_kind, ''), coalesce(e.principal, ''),
                   coalesce(e.principal_role, ''), coalesce(e.room, ''), coalesce(e.target, ''),
                   e.detail::text)
$$;
COMMENT ON FUNCTION mycelium.audit_preimage IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.verify_audit_chain IS 'public read';

CREATE OR REPLACE FUNCTION mycelium.audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'audit_append_only', 'the audit trail is append-only: entries are never changed or removed');
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER t10_audit_append_only BEFORE UPDATE OR DELETE ON mycelium.audit_log
FOR EACH ROW EXECUTE FUNCTION mycelium.audit_append_only();
CREATE OR REPLACE TRIGGER t05_audit_no_truncate BEFORE TRUNCATE ON mycelium.audit_log
FOR EACH STATEMENT EXECUTE FUNCTION mycelium.audit_append_only();

-- What the privileged actions change, recorded.
CREATE OR REPLACE FUNCTION mycelium.audit_room_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.audit('room.delete', OLD.name, OLD.name,
                         jsonb_build_object('owner', OLD.owner, 'is_public', OLD.is_public));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t70_audit_room_deleted AFTER DELETE ON mycelium.rooms
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
CREATE OR REPLACE TRIGGER t70_audit_setting_written AFTER INSERT OR UPDATE OR DELETE ON mycelium.config
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
CREATE OR REPLACE TRIGGER t70_audit_transition_operator AFTER UPDATE ON mycelium.transitions
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
CREATE OR REPLACE TRIGGER t70_audit_receipt_key AFTER INSERT OR UPDATE ON mycelium.receipt_keys
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
CREATE OR REPLACE TRIGGER t70_audit_forced_release AFTER INSERT ON mycelium.messages
FOR EACH ROW WHEN (NEW.payload_type = 'notice' AND NEW.payload ->> 'subkind' = 'released'
                   AND NEW.payload ->> 'forced' = 'true')
EXECUTE FUNCTION mycelium.audit_forced_release();
