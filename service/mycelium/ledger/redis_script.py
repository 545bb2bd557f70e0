"""The ledger's verbs as Lua scripts run inside Redis: one script per verb, each the steps of
:mod:`mycelium.ledger.rows` on the row's key, so the gate and the write it decides are one atomic
step on the server, on the server's clock (``TIME``). A script answers with JSON text: the row (and
for a claim the gate, the action and whether it repaired), or ``{"refuse": code, "message": …}``.

The gate below is the contract's (contracts/transition-gates.json); tests/ledger/test_gate_contract.py
runs :data:`ENUMERATE` over every combination and compares it with the contract and the SQL gate.
"""

from __future__ import annotations

PRELUDE = r"""
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local KEY = KEYS[1]
local A = cjson.decode(ARGV[1])
for k, v in pairs(A) do if v == cjson.null then A[k] = nil end end
local RANK = {not_crossed = 0, maybe_crossed = 1, crossed = 2}
local SAME_KEY = 'retry_only_with_same_provider_idempotency_key'

local function ms(s) return math.floor(s * 1000 + 0.5) end
local function lease_end(ttl) if ttl ~= nil and ttl > 0 then return NOW + ms(ttl) end return nil end
local function load() local s = redis.call('GET', KEY) if not s then return nil end return cjson.decode(s) end
local function put(row) row.updated_at = NOW redis.call('SET', KEY, cjson.encode(row)) end
local function copy(row) local c = {} for k, v in pairs(row) do c[k] = v end return c end
local function blank(s) return s == nil or string.match(s, '^%s*$') ~= nil end
local function ok(row) return cjson.encode({row = row}) end
local function refuse(code, message, row)
  return cjson.encode({refuse = code, message = message, row = row})
end

local function state(row)
  if row.terminal_outcome ~= 'IN_FLIGHT' then return row.terminal_outcome end
  if row.lease_until == nil then return 'IN_FLIGHT_UNBOUNDED' end
  if NOW >= row.lease_until then return 'EXPIRED' end
  return 'IN_FLIGHT_HELD'
end

local function gate(cls, spend, retry, boundary, st, key_param, key_ttl, validity, match, repair)
  if repair then return 'REPAIR' end
  if st == 'COMPLETED' then return 'RETURN' end
  if st == 'IN_FLIGHT_HELD' or st == 'IN_FLIGHT_UNBOUNDED' then return 'POLL' end
  if cls == 'read' then
    if st == 'BLOCKED' or st == 'UNKNOWN' then return 'SOFT_BLOCK' end
    return 'RECLAIM'
  end
  if st == 'BLOCKED' then return 'HARD_BLOCK' end
  local keyed = cls == 'idempotent_mutate' or cls == 'keyed_mutate'
  if st == 'UNKNOWN' then
    if key_param and key_ttl and retry == SAME_KEY and keyed and match == 'same' and validity == 'VALID' then
      return 'ALLOW'
    end
    return 'HARD_BLOCK'
  end
  if st == 'EXPIRED' then
    if boundary ~= 'not_crossed' or spend ~= 'multi_use' then return 'HARD_BLOCK' end
    if retry == 'safe_retry' then return 'ALLOW' end
    return 'HARD_BLOCK'
  end
  if st == 'FAILED_BEFORE_EFFECT' then
    if boundary ~= 'not_crossed' then return 'HARD_BLOCK' end
    if retry == 'never_retry_automatically' or retry == 'manual_reconciliation_required' then
      return 'HARD_BLOCK'
    end
    if retry == SAME_KEY then
      if not keyed then return 'HARD_BLOCK' end
      if not key_param then return 'ALLOW' end
      if match ~= 'same' or (key_ttl and validity == 'EXPIRED') then return 'HARD_BLOCK' end
    end
    return 'ALLOW'
  end
  return 'HARD_BLOCK'
end

local function action(g, st, settled, can_reconcile, reconciled, blind, defer, death_missing)
  if g == 'REPAIR' then return 'repair' end
  if g == 'RETURN' then return 'return' end
  if g == 'POLL' then return 'poll' end
  if g == 'RECLAIM' then
    if st == 'EXPIRED' and death_missing then return 'poll' end
    return 'run'
  end
  if g == 'SOFT_BLOCK' then if defer then return 'soft_block' end return 'run' end
  if g == 'ALLOW' and st == 'UNKNOWN' then
    if settled then return 'run' end
    if can_reconcile and not reconciled then return 'reconcile' end
    if blind then return 'hard_block' end
    return 'run'
  end
  if g == 'ALLOW' then
    if st == 'EXPIRED' and death_missing then return 'poll' end
    return 'run'
  end
  if settled then return 'run' end
  if can_reconcile and not reconciled then return 'reconcile' end
  return 'hard_block'
end

local function lost(verb, need_lease)
  local row = load()
  if row == nil then return refuse('transition_not_found', 'no transition ' .. A.request_id) end
  if row.fence ~= A.fence or row.owner ~= A.owner then
    return refuse('fence_lost', string.format(
      '%s lost: %s is now held by %s at fence %d (you hold fence %d as %s)',
      verb, A.request_id, row.owner, row.fence, A.fence, A.owner), row)
  end
  if row.terminal_outcome ~= 'IN_FLIGHT' then
    return refuse('not_in_flight', string.format('%s refused: %s is %s, not IN_FLIGHT', verb, A.request_id,
      row.terminal_outcome), row)
  end
  if need_lease and row.lease_until ~= nil and row.lease_until <= NOW then
    return refuse('lease_expired', string.format(
      '%s refused: the lease on %s already expired; reclaim or reconcile instead',
      verb, A.request_id), row)
  end
  return refuse('transition_moved',
    string.format('%s refused: %s changed meanwhile', verb, A.request_id), row)
end

local function held()
  local row = load()
  if row ~= nil and row.owner == A.owner and row.fence == A.fence and row.terminal_outcome == 'IN_FLIGHT' then
    return row
  end
  return nil
end
"""

CLAIM = r"""
local cls = A.side_effect_class
local row = load()
if row == nil then
  row = {
    request_id = A.request_id, kind = A.kind, transition_key = A.transition_key,
    idempotency_key = A.idempotency_key or A.request_id, tool = A.tool, agent_id = A.agent_id,
    policy_version = A.policy_version, scope_text = A.scope_text, dispatch_id = A.dispatch_id,
    args_hash = A.args_hash, side_effect_class = cls, spendability = A.spendability,
    retry_permission = A.retry_permission, capability = A.capability, side_effect_boundary = 'not_crossed',
    terminal_outcome = 'IN_FLIGHT', effect_phase = 'INTENDED', provider_key_param = A.key_param,
    provider_idempotency_key = A.incoming_key, provider_key_ttl = A.key_ttl_ms, owner = A.owner,
    fence = 1, attempts = 1, lease_until = lease_end(A.lease_ttl), last_heartbeat_at = NOW,
    created_at = NOW, started_at = NOW
  }
  if A.incoming_key ~= nil then row.provider_key_first_attempt_at = NOW end
  put(row)
  return cjson.encode({gate = 'ALLOW', action = 'run', repaired = false, row = row})
end
if row.transition_key ~= A.transition_key or row.tool ~= A.tool or row.kind ~= A.kind then
  return refuse('identity_conflict', string.format("request id '%s' already names a different call (tool %s, "
    .. "transition key %s); an explicit request id is reused only for the same call", A.request_id, row.tool,
    row.transition_key))
end
local repaired, st, g, act, stored_key = false, nil, nil, nil, nil
while true do
  st = state(row)
  local first_at = row.provider_key_first_attempt_at or row.started_at
  local validity = 'UNTRACKED'
  if A.key_ttl_ms ~= nil then
    if NOW - first_at >= A.key_ttl_ms then validity = 'EXPIRED' else validity = 'VALID' end
  end
  stored_key = row.provider_idempotency_key
  local match = 'missing'
  if A.incoming_key ~= nil and stored_key ~= nil then
    if A.incoming_key == stored_key then match = 'same' else match = 'different' end
  end
  g = gate(cls, A.spendability, A.retry_permission, row.side_effect_boundary, st, A.key_param ~= nil,
           A.key_ttl_ms ~= nil, validity, match, blank(row.idempotency_key))
  local settled = row.operator_resolution == 'not_executed' or row.reconcile_status == 'NOT_EXECUTED'
  local death_missing = A.presumed_dead_after ~= nil and row.worker_dead_asserted_at == nil
    and NOW - (row.last_heartbeat_at or row.started_at) < ms(A.presumed_dead_after)
  act = action(g, st, settled, A.has_reconciler and not blank(row.external_operation_ref), A.reconciled,
               A.capability == 'blind', A.defer_read_unknown, death_missing)
  if act ~= 'repair' then break end
  row.idempotency_key = row.request_id
  put(row)
  repaired = true
end
if act == 'run' then
  local first = nil
  if A.incoming_key ~= nil then
    if A.incoming_key == stored_key then
      first = row.provider_key_first_attempt_at or row.started_at
    else
      first = NOW
    end
  end
  for _, k in ipairs({'finished_at', 'result_text', 'error', 'receipt_ref', 'external_operation_ref',
      'reconcile_status', 'reconciled_at', 'operator_resolution', 'worker_dead_asserted_by',
      'worker_dead_asserted_at'}) do row[k] = nil end
  row.fence = row.fence + 1
  row.attempts = row.attempts + 1
  row.owner = A.owner
  row.terminal_outcome = 'IN_FLIGHT'
  row.side_effect_boundary = 'not_crossed'
  row.effect_phase = 'INTENDED'
  row.lease_until = lease_end(A.lease_ttl)
  row.last_heartbeat_at = NOW
  row.started_at = NOW
  row.side_effect_class = cls
  row.spendability = A.spendability
  row.retry_permission = A.retry_permission
  row.capability = A.capability
  row.scope_text = A.scope_text
  row.dispatch_id = A.dispatch_id or row.dispatch_id
  row.args_hash = A.args_hash or row.args_hash
  row.provider_key_param = A.key_param
  row.provider_key_ttl = A.key_ttl_ms
  row.provider_idempotency_key = A.incoming_key
  row.provider_key_first_attempt_at = first
  put(row)
elseif act == 'hard_block' and st == 'EXPIRED' then
  row.terminal_outcome = 'BLOCKED'
  row.lease_until = nil
  row.finished_at = NOW
  if row.side_effect_boundary == 'not_crossed' then
    row.effect_phase = 'ABORTED'
    row.error = 'stale in-flight lease with not_crossed boundary; reclaim only if a reconciler or an '
      .. 'operator '
      .. 'proves NOT_EXECUTED'
  else
    row.effect_phase = 'UNKNOWN'
    row.error = 'stale in-flight lease with boundary ' .. row.side_effect_boundary
      .. ': the effect may have happened'
  end
  put(row)
end
return cjson.encode({gate = g, action = act, repaired = repaired, row = row})
"""

RENEW = r"""
local row = held()
if row == nil or (row.lease_until ~= nil and row.lease_until <= NOW) then return lost('renew_lease', true) end
row.lease_until = lease_end(A.lease_ttl)
row.last_heartbeat_at = NOW
put(row)
return ok(row)
"""

ADVANCE = r"""
local rank = RANK[A.boundary]
local row = held()
if row == nil or (A.boundary == 'maybe_crossed' and row.side_effect_boundary == 'not_crossed'
    and row.lease_until ~= nil and row.lease_until <= NOW) then
  return lost('advance_boundary', A.boundary == 'maybe_crossed')
end
if rank > RANK[row.side_effect_boundary] then row.side_effect_boundary = A.boundary end
if rank > 0 then row.effect_phase = 'ATTEMPTING' end
put(row)
return ok(row)
"""

RECORD = r"""
local row = load()
if row == nil or row.owner ~= A.owner or row.fence ~= A.fence or not (row.terminal_outcome == 'IN_FLIGHT'
    or row.terminal_outcome == 'BLOCKED' or row.terminal_outcome == 'UNKNOWN') then
  return lost('record_external_operation', false)
end
row.external_operation_ref = A.ref
put(row)
return ok(row)
"""

COMPLETE = r"""
local row = held()
if row == nil then return lost('complete', false) end
row.terminal_outcome = 'COMPLETED'
row.side_effect_boundary = 'crossed'
row.effect_phase = 'COMMITTED'
row.result_text = A.result_text
row.error = nil
row.lease_until = nil
row.finished_at = NOW
put(row)
return ok(row)
"""

FAIL = r"""
local row = held()
if row == nil then return lost('fail', false) end
local b = row.side_effect_boundary
if A.after_effect == false and b ~= 'not_crossed' then
  return refuse('boundary_crossed', string.format('%s is past the side-effect boundary (%s): it cannot fail '
    .. '"before the effect"', A.request_id, b), row)
end
if A.after_effect then row.terminal_outcome = 'FAILED_AFTER_EFFECT' row.side_effect_boundary = 'crossed'
elseif b == 'not_crossed' then row.terminal_outcome = 'FAILED_BEFORE_EFFECT'
elseif b == 'maybe_crossed' then row.terminal_outcome = 'UNKNOWN'
else row.terminal_outcome = 'FAILED_AFTER_EFFECT' end
if not A.after_effect and b == 'not_crossed' then
  row.effect_phase = 'ABORTED'
else
  row.effect_phase = 'UNKNOWN'
end
row.error = A.error
row.lease_until = nil
row.finished_at = NOW
put(row)
return ok(row)
"""

MARK = r"""
local row = held()
if row == nil then return lost(A.verb, false) end
row.terminal_outcome = A.outcome
row.lease_until = nil
row.finished_at = NOW
row.error = A.error
if row.side_effect_boundary == 'not_crossed' and A.outcome == 'BLOCKED' then row.effect_phase = 'ABORTED'
else row.effect_phase = 'UNKNOWN' end
put(row)
return ok(row)
"""

RECONCILE = r"""
local row = load()
if row == nil then return refuse('transition_not_found', 'no transition ' .. A.request_id) end
local st = state(row)
if row.fence ~= A.fence or not (st == 'EXPIRED' or st == 'BLOCKED' or st == 'UNKNOWN'
    or st == 'FAILED_AFTER_EFFECT' or st == 'FAILED_BEFORE_EFFECT') then
  return refuse('transition_moved', string.format(
    'reconcile result for %s at fence %d refused: the row is %s at fence %d',
    A.request_id, A.fence, st, row.fence), row)
end
if A.status == 'COMPLETED' then
  row.terminal_outcome = 'COMPLETED'
  row.side_effect_boundary = 'crossed'
  row.effect_phase = 'COMMITTED'
  row.result_text = A.result_text
  row.lease_until = nil
  row.finished_at = NOW
  row.reconcile_status = 'COMPLETED'
  row.reconciled_at = NOW
  row.resolved_by = A.by or row.resolved_by
else
  row.reconcile_status = A.status
  row.reconciled_at = NOW
  if st == 'EXPIRED' and A.status == 'NOT_EXECUTED' then
    row.terminal_outcome = 'BLOCKED'
    row.lease_until = nil
    row.finished_at = NOW
  end
end
put(row)
return ok(row)
"""

RELEASE = r"""
local row = load()
if row == nil then return refuse('transition_not_found', 'no transition ' .. A.request_id) end
local st = state(row)
if A.expected_fence ~= nil and row.fence ~= A.expected_fence then
  return refuse('fence_lost', string.format(
    'release refused: %s is at fence %d, not %d', A.request_id, row.fence,
    A.expected_fence), row)
end
if st == 'COMPLETED' then return refuse('release_refused', A.request_id .. ' is already COMPLETED', row) end
if st == 'IN_FLIGHT_HELD' or st == 'IN_FLIGHT_UNBOUNDED' then
  return refuse('release_refused', string.format(
    '%s is in flight under a live lease (owner %s); wait for it, or '
    .. 'for the lease to expire', A.request_id, row.owner), row)
end
if row.operator_resolution ~= nil then
  return refuse('already_resolved', string.format('%s was already released (%s by %s); a release is one-shot',
    A.request_id, row.operator_resolution, tostring(row.resolved_by)), row)
end
row.operator_resolution = A.verified
row.resolved_by = A.by
row.resolution_reason = A.reason
row.resolved_at = NOW
row.released_from_outcome = st
if A.verified == 'completed' then
  row.terminal_outcome = 'COMPLETED'
  row.side_effect_boundary = 'crossed'
  row.effect_phase = 'COMMITTED'
  row.result_text = A.result_text
elseif st == 'EXPIRED' then
  row.terminal_outcome = 'BLOCKED'
end
row.lease_until = nil
row.finished_at = row.finished_at or NOW
put(row)
return ok(row)
"""

GET = r"""
return ok(load())
"""

# For the contract test: the gate of every case in ARGV[1] (a JSON array of the gate's ten inputs).
ENUMERATE = r"""
local out = {}
for i, c in ipairs(A.cases) do
  out[i] = gate(c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10])
end
return cjson.encode(out)
"""

VERBS = {
    "claim": CLAIM,
    "renew_lease": RENEW,
    "advance_boundary": ADVANCE,
    "record_external_operation": RECORD,
    "complete": COMPLETE,
    "fail": FAIL,
    "mark": MARK,
    "apply_reconcile_result": RECONCILE,
    "release": RELEASE,
    "get": GET,
    "enumerate": ENUMERATE,
}


def script(verb: str) -> str:
    """The whole Lua script of one verb."""
    return PRELUDE + VERBS[verb]
