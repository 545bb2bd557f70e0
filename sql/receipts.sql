-- Receipts: an auditable, per-agent hash chain of every terminal transition and every release.
--
--   * a receipt is appended by the database in the same statement that makes a transition terminal
--     (or releases it), so no terminal outcome exists without its receipt;
--   * the chain is computed here on insert: hash = sha256(prev_hash_hex || '\n' || preimage), where
--     the preimage is a length-prefixed rendering of the receipt's fields (receipt_preimage below;
--     mycelium/ledger/receipts.py renders the same bytes offline);
--   * receipts and their signatures are append-only, even for the table owner (UPDATE, DELETE and
--     TRUNCATE are refused by triggers); verify_receipt_chain() reports every break, e.g. one made by
--     a superuser who switched the triggers off;
--   * PostgreSQL cannot sign with Ed25519: the hub signs each receipt's hash as it appears (key id
--     recorded, public keys in receipt_keys). A receipt waits in receipts_unsigned until signed, and
--     the verifier reports every receipt without a signature, so none stays unsigned silently. (No
--     NOTIFY here: it would serialise every commit on the notify queue; the signer polls the queue.)

CREATE TABLE mycelium.receipts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  receipt_id text NOT NULL CONSTRAINT receipt_id_is_rcpt_id CHECK (receipt_id = 'rcpt-' || id),
  agent_id text NOT NULL,
  seq bigint NOT NULL CHECK (seq >= 1),
  kind text NOT NULL CHECK (kind IN ('tool', 'task', 'release')),
  action text NOT NULL,
  request_id text NOT NULL,
  transition_key text NOT NULL,
  side_effect_class text NOT NULL,
  policy_version text NOT NULL,
  inputs_hash text,
  outputs_hash text,
  outcome text NOT NULL,
  boundary text NOT NULL,
  fence bigint NOT NULL,
  external_operation_ref text,
  error text,
  verified text CHECK (verified IN ('completed', 'not_executed')),
  resolved_by text,
  resolution_reason text,
  started_at timestamptz NOT NULL,
  finished_at timestamptz,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  prev_hash bytea,
  hash bytea NOT NULL,
  UNIQUE (agent_id, seq)
);
CREATE INDEX receipts_by_request ON mycelium.receipts (request_id);

COMMENT ON TABLE mycelium.receipts IS
  'Append-only per-agent hash chain of terminal transitions and releases (hash computed on insert).';

-- The head of each agent's chain: its last seq and hash (locked while a receipt is appended).
CREATE TABLE mycelium.receipt_heads (
  agent_id text PRIMARY KEY,
  seq bigint NOT NULL,
  hash bytea NOT NULL
);

CREATE TABLE mycelium.receipt_keys (
  key_id text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
  algorithm text NOT NULL DEFAULT 'ed25519' CHECK (algorithm = 'ed25519'),
  public_key bytea NOT NULL UNIQUE CHECK (length(public_key) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  retired_at timestamptz
);

CREATE TABLE mycelium.receipt_signatures (
  id bigint PRIMARY KEY REFERENCES mycelium.receipts (id),
  key_id text NOT NULL REFERENCES mycelium.receipt_keys (key_id),
  signature bytea NOT NULL CHECK (length(signature) = 64),
  signed_at timestamptz NOT NULL DEFAULT now()
);

-- Receipts still waiting for the hub's signature (a work queue, not a record).
CREATE TABLE mycelium.receipts_unsigned (
  id bigint PRIMARY KEY
);

-- ---------------------------------------------------------------------------------------------
-- The canonical rendering (the offline verifier renders the same bytes).

CREATE FUNCTION mycelium.receipt_ts(p timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- Field order is part of the format (mycelium.ledger.receipts.RECEIPT_FIELDS): each field is
-- "<name>:<length>:<value>\n", or "<name>:-\n" for NULL; timestamps in UTC with microseconds.
-- Written with built-ins only and declared STABLE like to_char, so the planner inlines it.
CREATE FUNCTION mycelium.receipt_preimage(r mycelium.receipts) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT 'mycelium.receipt/v1' || E'\n'
    || 'receipt_id' || coalesce(':' || length(r.receipt_id) || ':' || r.receipt_id, ':-') || E'\n'
    || 'agent_id' || coalesce(':' || length(r.agent_id) || ':' || r.agent_id, ':-') || E'\n'
    || 'seq' || coalesce(':' || length(r.seq::text) || ':' || r.seq::text, ':-') || E'\n'
    || 'kind' || coalesce(':' || length(r.kind) || ':' || r.kind, ':-') || E'\n'
    || 'action' || coalesce(':' || length(r.action) || ':' || r.action, ':-') || E'\n'
    || 'request_id' || coalesce(':' || length(r.request_id) || ':' || r.request_id, ':-') || E'\n'
    || 'transition_key' || coalesce(':' || length(r.transition_key) || ':' || r.transition_key, ':-') || E'\n'
    || 'side_effect_class' || coalesce(':' || length(r.side_effect_class) || ':' || r.side_effect_class, ':-') || E'\n'
    || 'policy_version' || coalesce(':' || length(r.policy_version) || ':' || r.policy_version, ':-') || E'\n'
    || 'inputs_hash' || coalesce(':' || length(r.inputs_hash) || ':' || r.inputs_hash, ':-') || E'\n'
    || 'outputs_hash' || coalesce(':' || length(r.outputs_hash) || ':' || r.outputs_hash, ':-') || E'\n'
    || 'outcome' || coalesce(':' || length(r.outcome) || ':' || r.outcome, ':-') || E'\n'
    || 'boundary' || coalesce(':' || length(r.boundary) || ':' || r.boundary, ':-') || E'\n'
    || 'fence' || coalesce(':' || length(r.fence::text) || ':' || r.fence::text, ':-') || E'\n'
    || 'external_operation_ref' || coalesce(':' || length(r.external_operation_ref) || ':' || r.external_operation_ref, ':-') || E'\n'
    || 'error' || coalesce(':' || length(r.error) || ':' || r.error, ':-') || E'\n'
    || 'verified' || coalesce(':' || length(r.verified) || ':' || r.verified, ':-') || E'\n'
    || 'resolved_by' || coalesce(':' || length(r.resolved_by) || ':' || r.resolved_by, ':-') || E'\n'
    || 'resolution_reason' || coalesce(':' || length(r.resolution_reason) || ':' || r.resolution_reason, ':-') || E'\n'
    || 'started_at' || coalesce(':' || length(to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) || ':' || to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), ':-') || E'\n'
    || 'finished_at' || coalesce(':' || length(to_char(r.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) || ':' || to_char(r.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), ':-') || E'\n'
    || 'recorded_at' || coalesce(':' || length(to_char(r.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) || ':' || to_char(r.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), ':-') || E'\n'
$$;

CREATE FUNCTION mycelium.receipt_hash(p_prev bytea, r mycelium.receipts) RETURNS bytea LANGUAGE sql STABLE AS $$
  SELECT sha256(convert_to(coalesce(encode(p_prev, 'hex'), '') || E'\n' || mycelium.receipt_preimage(r), 'UTF8'))
$$;

-- ---------------------------------------------------------------------------------------------
-- Appending: the chain is computed here, whoever inserts.

CREATE FUNCTION mycelium.receipts_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  head mycelium.receipt_heads;
BEGIN
  -- the agent's head row is the chain's lock: appends to one chain happen one at a time
  SELECT * INTO head FROM mycelium.receipt_heads WHERE agent_id = NEW.agent_id FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO mycelium.receipt_heads (agent_id, seq, hash) VALUES (NEW.agent_id, 0, '\x')
    ON CONFLICT (agent_id) DO NOTHING;
    SELECT * INTO head FROM mycelium.receipt_heads WHERE agent_id = NEW.agent_id FOR UPDATE;
  END IF;
  NEW.seq := head.seq + 1;
  NEW.prev_hash := CASE WHEN head.seq = 0 THEN NULL ELSE head.hash END;
  NEW.recorded_at := now();
  NEW.receipt_id := 'rcpt-' || NEW.id;
  NEW.hash := mycelium.receipt_hash(NEW.prev_hash, NEW);
  UPDATE mycelium.receipt_heads SET seq = NEW.seq, hash = NEW.hash WHERE agent_id = NEW.agent_id;
  INSERT INTO mycelium.receipts_unsigned (id) VALUES (NEW.id);
  RETURN NEW;
END
$$;
CREATE TRIGGER receipts_before_insert BEFORE INSERT ON mycelium.receipts
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_before_insert();

CREATE FUNCTION mycelium.receipts_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: %s refused', TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;
CREATE TRIGGER receipts_append_only BEFORE UPDATE OR DELETE ON mycelium.receipts
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_append_only();
CREATE TRIGGER receipts_no_truncate BEFORE TRUNCATE ON mycelium.receipts
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.receipts_append_only();
CREATE TRIGGER receipt_signatures_append_only BEFORE UPDATE OR DELETE ON mycelium.receipt_signatures
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_append_only();
CREATE TRIGGER receipt_signatures_no_truncate BEFORE TRUNCATE ON mycelium.receipt_signatures
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.receipts_append_only();

-- Every terminal transition and every release appends a receipt, in the statement that makes it.
-- (Fires after transitions_guard: triggers run in name order.)
CREATE FUNCTION mycelium.transitions_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  released boolean := NEW.operator_resolution IS NOT NULL
                      AND NEW.operator_resolution IS DISTINCT FROM OLD.operator_resolution;
  rid bigint;
BEGIN
  IF NOT released AND (NEW.terminal_outcome = 'IN_FLIGHT' OR NEW.terminal_outcome = OLD.terminal_outcome) THEN
    RETURN NEW;
  END IF;
  rid := nextval('mycelium.receipts_id_seq');
  NEW.receipt_ref := 'rcpt-' || rid;
  INSERT INTO mycelium.receipts (
    id, receipt_id, agent_id, seq, kind, action, request_id, transition_key, side_effect_class, policy_version,
    inputs_hash, outputs_hash, outcome, boundary, fence, external_operation_ref, error, verified,
    resolved_by, resolution_reason, started_at, finished_at, hash)
  OVERRIDING SYSTEM VALUE
  VALUES (
    rid, NEW.receipt_ref, NEW.agent_id, 1, CASE WHEN released THEN 'release' ELSE NEW.kind END, NEW.tool,
    NEW.request_id, NEW.transition_key, NEW.side_effect_class, NEW.policy_version, NEW.args_hash,
    CASE WHEN NEW.result IS NOT NULL THEN encode(sha256(convert_to(NEW.result::text, 'UTF8')), 'hex') END,
    NEW.terminal_outcome, NEW.side_effect_boundary, NEW.fence, NEW.external_operation_ref, NEW.error,
    CASE WHEN released THEN NEW.operator_resolution END,
    CASE WHEN released THEN NEW.resolved_by END, CASE WHEN released THEN NEW.resolution_reason END,
    NEW.started_at, NEW.finished_at, '\x');
  RETURN NEW;
END
$$;
CREATE TRIGGER transitions_receipt BEFORE UPDATE ON mycelium.transitions
  FOR EACH ROW EXECUTE FUNCTION mycelium.transitions_receipt();

-- ---------------------------------------------------------------------------------------------
-- Keys and signatures (written by the hub, which holds the private key).

CREATE FUNCTION mycelium.register_receipt_key(p_key_id text, p_public_key bytea)
RETURNS mycelium.receipt_keys LANGUAGE plpgsql AS $$
DECLARE k mycelium.receipt_keys;
BEGIN
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
CREATE FUNCTION mycelium.retire_receipt_keys(p_except text) RETURNS SETOF mycelium.receipt_keys
LANGUAGE sql AS $$
  UPDATE mycelium.receipt_keys SET retired_at = now()
  WHERE key_id <> p_except AND retired_at IS NULL RETURNING *
$$;

CREATE FUNCTION mycelium.unsigned_receipt_batch(p_limit integer DEFAULT 500)
RETURNS TABLE (id bigint, hash bytea) LANGUAGE sql STABLE AS $$
  SELECT r.id, r.hash FROM mycelium.receipts_unsigned u JOIN mycelium.receipts r ON r.id = u.id
  ORDER BY u.id LIMIT p_limit
$$;

-- Store signatures computed by the key holder over each receipt's hash. A key must be registered
-- and active; a receipt is signed once.
CREATE FUNCTION mycelium.sign_receipts(p_key_id text, p_ids bigint[], p_signatures bytea[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
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
  DELETE FROM mycelium.receipts_unsigned WHERE id = ANY (p_ids);
  RETURN n;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Verification (in SQL; signatures are checked by `mycelium receipts verify`, which has the keys).

-- Every break of one agent's chain (or of every chain, p_agent NULL): a receipt whose content no
-- longer matches its hash, a link to the wrong predecessor, a gap in the sequence, a head that
-- points past the last receipt (a deleted tail). No rows means the chain is intact.
CREATE FUNCTION mycelium.verify_receipt_chain(p_agent text DEFAULT NULL)
RETURNS TABLE (agent_id text, seq bigint, receipt_id text, problem text) LANGUAGE sql STABLE AS $$
  WITH ordered AS (
    SELECT r.agent_id, r.seq, r.receipt_id, r.prev_hash,
           r.hash = mycelium.receipt_hash(r.prev_hash, r) AS hash_ok,
           lag(r.hash) OVER w AS prior_hash, lag(r.seq) OVER w AS prior_seq
    FROM mycelium.receipts r
    WHERE p_agent IS NULL OR r.agent_id = p_agent
    WINDOW w AS (PARTITION BY r.agent_id ORDER BY r.seq)
  )
  SELECT o.agent_id, o.seq, o.receipt_id, p.problem
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
  SELECT h.agent_id, h.seq, NULL, format('head is at seq %s but the last receipt is %s (receipts deleted)',
                                         h.seq, coalesce(m.last_seq, 0))
  FROM mycelium.receipt_heads h
  LEFT JOIN (SELECT r.agent_id, max(r.seq) AS last_seq, (array_agg(r.hash ORDER BY r.seq DESC))[1] AS last_hash
             FROM mycelium.receipts r GROUP BY r.agent_id) m ON m.agent_id = h.agent_id
  WHERE (p_agent IS NULL OR h.agent_id = p_agent)
    AND (m.last_seq IS DISTINCT FROM h.seq OR m.last_hash IS DISTINCT FROM h.hash)
  ORDER BY 1, 2
$$;

-- ---------------------------------------------------------------------------------------------
-- Views for the common audits.

-- Side effects per tool per day: effects that happened (or may have) on side-effecting tools.
CREATE VIEW mycelium.side_effects_per_tool_per_day AS
  SELECT (r.recorded_at AT TIME ZONE 'UTC')::date AS day, r.agent_id, r.action AS tool,
         count(*) FILTER (WHERE r.outcome = 'COMPLETED') AS completed,
         count(*) FILTER (WHERE r.outcome = 'FAILED_AFTER_EFFECT') AS failed_after_effect,
         count(*) FILTER (WHERE r.outcome IN ('UNKNOWN', 'BLOCKED') AND r.boundary <> 'not_crossed') AS ambiguous
  FROM mycelium.receipts r
  WHERE r.side_effect_class <> 'read' AND r.kind <> 'release'
  GROUP BY 1, 2, 3;

-- Hard blocks awaiting a human: side-effecting transitions parked in an ambiguous or blocked state
-- that nobody has released yet.
CREATE VIEW mycelium.hard_blocks_awaiting_human AS
  SELECT t.request_id, t.agent_id, t.tool, t.terminal_outcome, t.side_effect_boundary,
         t.external_operation_ref, t.error, t.owner, t.fence, t.finished_at,
         now() - t.finished_at AS waiting
  FROM mycelium.transitions t
  WHERE t.side_effect_class <> 'read'
    AND t.terminal_outcome IN ('BLOCKED', 'UNKNOWN', 'FAILED_AFTER_EFFECT')
    AND t.operator_resolution IS NULL
    AND coalesce(t.reconcile_status, '') <> 'NOT_EXECUTED';

-- Reconciled transitions: what a provider lookup settled, and how.
CREATE VIEW mycelium.reconciled_transitions AS
  SELECT t.request_id, t.agent_id, t.tool, t.reconcile_status, t.reconciled_at, t.terminal_outcome,
         t.external_operation_ref, t.fence, t.receipt_ref
  FROM mycelium.transitions t
  WHERE t.reconcile_status IS NOT NULL;

-- Receipts as the offline verifier reads them (timestamps rendered exactly as hashed).
CREATE VIEW mycelium.receipt_export AS
  SELECT r.id, r.receipt_id, r.agent_id, r.seq, r.kind, r.action, r.request_id, r.transition_key,
         r.side_effect_class, r.policy_version, r.inputs_hash, r.outputs_hash, r.outcome, r.boundary, r.fence,
         r.external_operation_ref, r.error, r.verified, r.resolved_by, r.resolution_reason,
         mycelium.receipt_ts(r.started_at) AS started_at, mycelium.receipt_ts(r.finished_at) AS finished_at,
         mycelium.receipt_ts(r.recorded_at) AS recorded_at,
         encode(r.prev_hash, 'hex') AS prev_hash, encode(r.hash, 'hex') AS hash,
         s.key_id, encode(s.signature, 'hex') AS signature, r.recorded_at AS recorded_at_ts
  FROM mycelium.receipts r LEFT JOIN mycelium.receipt_signatures s ON s.id = r.id;
