-- Receipts: an auditable hash chain, per agent and lane, of every terminal transition and every release.
--
--   * lanes: one agent's receipts form RECEIPT_LANES (= 32) parallel chains, keyed (agent_id, lane).
--     Appends to one chain are serialised (each waits for the previous append's commit), so a single
--     chain per agent capped a fleet of workers sharing one agent id at one chain's commit rate. The
--     lane is a stable hash of the request id (receipt_lane_of: the low bits of hashtextextended, the
--     function hash partitioning relies on), so every receipt of one transition (its completion, a
--     later release) lands in one lane. The lane is stored on every receipt and is part of its
--     preimage, so the lane count can change later without breaking a chain, and a receipt cannot be
--     moved to another lane unnoticed;
--   * a receipt is appended by the database in the statement that makes a transition terminal (or
--     releases it), so no terminal outcome exists without its receipt: the transitions' guard trigger
--     (transitions.sql), which runs on every write however it is made, inserts it and points the row
--     at it (receipt_ref). The chain's lock is taken there, in the verb's last statement, and held
--     through the commit;
--   * each chain is computed here on insert: hash = sha256(prev_hash_hex || '\n' || preimage), where
--     the preimage is a length-prefixed rendering of the receipt's fields (receipt_preimage below;
--     mycelium/ledger/receipts.py renders the same bytes offline);
--   * receipts and their signatures are append-only, even for the table owner (UPDATE, DELETE and
--     TRUNCATE are refused by triggers); verify_receipt_chain() reports every break, e.g. one made by
--     a superuser who switched the triggers off;
--   * PostgreSQL cannot sign with Ed25519: the hub signs each receipt's hash as it appears (key id
--     recorded, public keys in receipt_keys). What waits for a signature is derived, not queued: one
--     chain's receipts become visible in seq order (an append waits for the previous one's commit),
--     so the receipts past a chain's (agent and lane) signed-through mark are its unsigned ones. The
--     verifier reports every receipt without a signature, so none stays unsigned silently. (No NOTIFY
--     here: it would serialise every commit on the notify queue; the signer polls.)

CREATE DOMAIN mycelium.receipt_kind AS text CHECK (VALUE IN ('tool', 'task', 'release'));
CREATE DOMAIN mycelium.receipt_seq AS bigint CHECK (VALUE >= 1);
CREATE DOMAIN mycelium.receipt_lane AS smallint CHECK (VALUE >= 0);

-- The lane of a request id: RECEIPT_LANES = 32 (a power of two: the hash's low five bits). Raising it
-- later is safe: receipts already written keep their stored lane, and a release finds the lane of the
-- transition's earlier receipt (transitions_guard).
CREATE OR REPLACE FUNCTION mycelium.receipt_lane_of(p_request_id text) RETURNS smallint LANGUAGE sql IMMUTABLE AS $$
  SELECT (hashtextextended(p_request_id, 0) & 31)::smallint
$$;

CREATE TABLE mycelium.receipts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  receipt_id text NOT NULL CONSTRAINT receipt_id_is_rcpt_id CHECK (receipt_id = 'rcpt-' || id::text),
  agent_id text NOT NULL,
  lane mycelium.receipt_lane NOT NULL,
  seq mycelium.receipt_seq NOT NULL,
  kind mycelium.receipt_kind NOT NULL,
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
  verified mycelium.operator_resolution,
  resolved_by text,
  resolution_reason text,
  started_at timestamptz NOT NULL,
  finished_at timestamptz,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  prev_hash bytea,
  hash bytea NOT NULL,
  UNIQUE (agent_id, lane, seq)
);

-- Indexes: the id (exports page by it, signatures refer to it) and (agent_id, lane, seq) (one chain in
-- order: the verifier and the signer walk it). Nothing reads receipts by request id (a transition
-- points at its latest receipt through receipt_ref), so no third index is kept up on every append.
COMMENT ON TABLE mycelium.receipts IS
  'Append-only hash chains (per agent and lane) of terminal transitions and releases (hash computed on insert).';

-- The head of each chain (agent and lane): its last seq and hash, and the hash before that (the row
-- is the chain's lock while a receipt is appended).
CREATE TABLE mycelium.receipt_heads (
  agent_id text NOT NULL,
  lane smallint NOT NULL,
  seq bigint NOT NULL,
  hash bytea NOT NULL,
  prev_hash bytea,
  PRIMARY KEY (agent_id, lane)
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

-- How far each chain (agent and lane) is signed without a gap (written by sign_receipts only).
CREATE TABLE mycelium.receipts_signed_through (
  agent_id text NOT NULL,
  lane smallint NOT NULL,
  seq bigint NOT NULL,
  PRIMARY KEY (agent_id, lane)
);

-- ---------------------------------------------------------------------------------------------
-- The canonical rendering (the offline verifier renders the same bytes).

CREATE OR REPLACE FUNCTION mycelium.receipt_ts(p timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;
COMMENT ON FUNCTION mycelium.receipt_ts IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.receipt_preimage_before_seq IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.receipt_preimage_after_seq IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.receipt_seq_field(p_seq bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT 'seq:' || length(p_seq::text) || ':' || p_seq::text || E'\n'
$$;
COMMENT ON FUNCTION mycelium.receipt_seq_field IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.receipt_preimage(r mycelium.receipts) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT mycelium.receipt_preimage_before_seq(r) || mycelium.receipt_seq_field(r.seq)
         || mycelium.receipt_preimage_after_seq(r)
$$;
COMMENT ON FUNCTION mycelium.receipt_preimage IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.receipt_hash(p_prev bytea, r mycelium.receipts) RETURNS bytea LANGUAGE sql STABLE AS $$
  SELECT sha256(convert_to(coalesce(encode(p_prev, 'hex'), '') || E'\n' || mycelium.receipt_preimage(r), 'UTF8'))
$$;
COMMENT ON FUNCTION mycelium.receipt_hash IS 'public inlined';

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
CREATE OR REPLACE TRIGGER t20_receipts_before_insert BEFORE INSERT ON mycelium.receipts
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_before_insert();

CREATE OR REPLACE FUNCTION mycelium.receipts_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: %s refused', TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t10_receipts_append_only BEFORE UPDATE OR DELETE ON mycelium.receipts
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_append_only();
CREATE OR REPLACE TRIGGER t05_receipts_no_truncate BEFORE TRUNCATE ON mycelium.receipts
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.receipts_append_only();
CREATE OR REPLACE TRIGGER t10_receipt_signatures_append_only BEFORE UPDATE OR DELETE ON mycelium.receipt_signatures
  FOR EACH ROW EXECUTE FUNCTION mycelium.receipts_append_only();
CREATE OR REPLACE TRIGGER t05_receipt_signatures_no_truncate BEFORE TRUNCATE ON mycelium.receipt_signatures
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
COMMENT ON FUNCTION mycelium.register_receipt_key IS 'public write';

-- Rotation: every other key stops signing from now on (their old signatures stay valid).
CREATE OR REPLACE FUNCTION mycelium.retire_receipt_keys(p_except text) RETURNS SETOF mycelium.receipt_keys
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('retire_receipt_keys');
  RETURN QUERY UPDATE mycelium.receipt_keys SET retired_at = now()
               WHERE key_id <> p_except AND retired_at IS NULL RETURNING *;
END
$$;
COMMENT ON FUNCTION mycelium.retire_receipt_keys IS 'public write';

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
COMMENT ON FUNCTION mycelium.unsigned_receipt_batch IS 'public read';

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
COMMENT ON FUNCTION mycelium.sign_receipts IS 'public write';

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
COMMENT ON FUNCTION mycelium.verify_receipt_chain IS 'public read';

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
