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
-- Closed sets and bounded texts as domains. A domain's check is compiled once per session and runs
-- only for the columns a statement assigns; a table CHECK is re-read from the catalog and compiled
-- again by every INSERT and UPDATE (with ~25 of them, most of the cost of a verb).

CREATE DOMAIN mycelium.transition_kind AS text CHECK (VALUE IN ('tool', 'task'));
CREATE DOMAIN mycelium.effect_class AS text
  CHECK (VALUE IN ('read', 'idempotent_mutate', 'keyed_mutate', 'non_idempotent_mutate', 'irreversible'));
CREATE DOMAIN mycelium.spendability AS text CHECK (VALUE IN ('multi_use', 'single_use', 'non_replayable'));
CREATE DOMAIN mycelium.retry_permission AS text CHECK (VALUE IN ('safe_retry',
  'retry_only_with_same_provider_idempotency_key', 'manual_reconciliation_required', 'never_retry_automatically'));
CREATE DOMAIN mycelium.capability AS text CHECK (VALUE IN ('idempotent', 'queryable', 'blind'));
CREATE DOMAIN mycelium.effect_boundary AS text CHECK (VALUE IN ('not_crossed', 'maybe_crossed', 'crossed'));
CREATE DOMAIN mycelium.transition_outcome AS text CHECK (VALUE IN ('IN_FLIGHT', 'COMPLETED',
  'FAILED_BEFORE_EFFECT', 'FAILED_AFTER_EFFECT', 'BLOCKED', 'UNKNOWN'));
CREATE DOMAIN mycelium.effect_phase AS text
  CHECK (VALUE IN ('INTENDED', 'ATTEMPTING', 'COMMITTED', 'ABORTED', 'UNKNOWN'));
CREATE DOMAIN mycelium.reconcile_status AS text CHECK (VALUE IN ('COMPLETED', 'NOT_EXECUTED', 'UNKNOWN'));
CREATE DOMAIN mycelium.operator_resolution AS text CHECK (VALUE IN ('completed', 'not_executed'));

CREATE DOMAIN mycelium.request_key AS text CHECK (btrim(VALUE) <> '' AND length(VALUE) <= 512);
CREATE DOMAIN mycelium.ledger_name AS text CHECK (btrim(VALUE) <> '' AND length(VALUE) <= 256);
CREATE DOMAIN mycelium.ledger_label AS text CHECK (length(VALUE) <= 256);
CREATE DOMAIN mycelium.provider_ref AS text CHECK (length(VALUE) <= 1024);
CREATE DOMAIN mycelium.json_object AS jsonb CHECK (jsonb_typeof(VALUE) = 'object');
CREATE DOMAIN mycelium.fence_token AS bigint CHECK (VALUE >= 1);
CREATE DOMAIN mycelium.attempt_count AS integer CHECK (VALUE >= 1);
CREATE DOMAIN mycelium.key_ttl AS interval CHECK (VALUE >= interval '0');

-- ---------------------------------------------------------------------------------------------
-- The table.

CREATE TABLE mycelium.transitions (
  request_id mycelium.request_key PRIMARY KEY,
  kind mycelium.transition_kind NOT NULL DEFAULT 'tool',
  transition_key mycelium.ledger_name NOT NULL,
  idempotency_key text,
  tool mycelium.ledger_name NOT NULL,
  agent_id mycelium.ledger_label NOT NULL,
  policy_version mycelium.ledger_label NOT NULL,
  scope mycelium.json_object NOT NULL DEFAULT '{}',
  dispatch_id text,
  args_hash text,
  side_effect_class mycelium.effect_class NOT NULL,
  spendability mycelium.spendability NOT NULL,
  retry_permission mycelium.retry_permission NOT NULL,
  capability mycelium.capability NOT NULL,
  side_effect_boundary mycelium.effect_boundary NOT NULL DEFAULT 'not_crossed',
  terminal_outcome mycelium.transition_outcome NOT NULL DEFAULT 'IN_FLIGHT',
  effect_phase mycelium.effect_phase NOT NULL DEFAULT 'INTENDED',
  external_operation_ref mycelium.provider_ref,
  provider_key_param text,
  provider_idempotency_key mycelium.provider_ref,
  provider_key_first_attempt_at timestamptz,
  provider_key_ttl mycelium.key_ttl,
  owner mycelium.ledger_name NOT NULL,
  fence mycelium.fence_token NOT NULL DEFAULT 1,
  attempts mycelium.attempt_count NOT NULL DEFAULT 1,
  lease_until timestamptz,
  last_heartbeat_at timestamptz,
  result jsonb,
  error text,
  receipt_ref text,
  reconcile_status mycelium.reconcile_status,
  reconciled_at timestamptz,
  operator_resolution mycelium.operator_resolution,
  resolved_by text,
  resolution_reason text,
  resolved_at timestamptz,
  released_from_outcome text,
  worker_dead_asserted_by text,
  worker_dead_asserted_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now(),
  result_text text
);

-- Listings operators need. The in-flight index is keyed on finished_at IS NULL (equivalent, by the
-- guard's in_flight_is_unfinished rule below) rather than on the outcome, so the planner can never pick it for the verbs' own
-- compare-and-swap updates (which name terminal_outcome = 'IN_FLIGHT' and must go by primary key).
CREATE INDEX transitions_in_flight ON mycelium.transitions (started_at) WHERE finished_at IS NULL;
CREATE INDEX transitions_by_agent ON mycelium.transitions (agent_id, created_at DESC);
CREATE INDEX transitions_by_tool ON mycelium.transitions (tool, created_at DESC);
CREATE INDEX transitions_unresolved ON mycelium.transitions (terminal_outcome, updated_at DESC)
  WHERE terminal_outcome NOT IN ('IN_FLIGHT', 'COMPLETED');

COMMENT ON TABLE mycelium.transitions IS
  'One row per tool call or task: the transition envelope and its durable record. Written only by the verbs.';
COMMENT ON COLUMN mycelium.transitions.fence IS
  'Fencing token: +1 on every claim; every mutator compares and swaps on owner + fence.';
COMMENT ON COLUMN mycelium.transitions.result_text IS
  'The result as the caller''s JSON text (keys in their order), beside result; NULL when not sent.';
COMMENT ON COLUMN mycelium.transitions.lease_until IS
  'NULL: unbounded. An IN_FLIGHT row past its lease (database clock) is EXPIRED.';

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
CREATE OR REPLACE TRIGGER t10_transitions_guard BEFORE UPDATE OR DELETE ON mycelium.transitions
  FOR EACH ROW EXECUTE FUNCTION mycelium.transitions_guard();
-- An insert calls the guard unless the row is one it would pass unchanged: written by a verb, the
-- fence, creation and update times as the guard sets them, no receipt, in flight and unreleased (then
-- no consistency rule can fail). A claim's insert is such a row; the condition, evaluated by the
-- executor, costs a fraction of a call into the trigger function. Anything unknown (a NULL) calls it.
CREATE OR REPLACE TRIGGER t20_transitions_guard_insert BEFORE INSERT ON mycelium.transitions
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
CREATE OR REPLACE TRIGGER t05_transitions_no_truncate BEFORE TRUNCATE ON mycelium.transitions
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

-- ---------------------------------------------------------------------------------------------
-- claim_transition: lock, gate, act, in one transaction.

CREATE TYPE mycelium.claim AS (gate text, action text, repaired boolean, transition mycelium.transitions);

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
COMMENT ON FUNCTION mycelium.claim_transition IS
  'public write: Claim a transition: under the row lock, evaluate the gate and act (run, return, poll, reconcile, soft_block, hard_block).';

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
COMMENT ON FUNCTION mycelium.renew_lease IS 'public write';

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
COMMENT ON FUNCTION mycelium.advance_boundary IS 'public write';

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
COMMENT ON FUNCTION mycelium.record_external_operation IS 'public write';

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
COMMENT ON FUNCTION mycelium.complete_ack IS 'public write';

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
COMMENT ON FUNCTION mycelium.complete IS 'public write';

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
COMMENT ON FUNCTION mycelium.fail IS 'public write';

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
COMMENT ON FUNCTION mycelium.mark_unknown IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.mark_blocked(p_request_id text, p_owner text, p_fence bigint, p_error text DEFAULT NULL)
RETURNS mycelium.transitions LANGUAGE sql AS $$
  SELECT mycelium.mark_outcome(p_request_id, p_owner, p_fence, 'BLOCKED', p_error, 'mark_blocked')
$$;
COMMENT ON FUNCTION mycelium.mark_blocked IS 'public write';

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
COMMENT ON FUNCTION mycelium.repair IS 'public write';

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
COMMENT ON FUNCTION mycelium.apply_reconcile_result IS 'public write';

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
COMMENT ON FUNCTION mycelium.release IS 'public write';

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
COMMENT ON FUNCTION mycelium.mark_worker_dead IS 'public write';
