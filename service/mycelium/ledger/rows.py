"""The ledger's verbs on a row held as a plain dict: what the in-memory and file stores run under
their lock, and what the Redis script does inside Redis (ledger/redis_verbs.lua, the same steps).

The rules are the SQL verbs' (sql/transitions.sql): the gate under the lock, compare and swap on owner
+ fence, the fence only grows, the boundary only moves forward, COMPLETED is final. A row is JSON-able:
timestamps are integer milliseconds on the store's clock, ``result_text`` and ``scope_text`` hold the
JSON text as the caller's encoder wrote it (so a result comes back with its keys in their order).
Absent keys are empty (None).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mycelium.ledger import gate as g
from mycelium.ledger.errors import LedgerError, ledger_error
from mycelium.ledger.record import Claim, ClaimRequest, Transition

Row = dict[str, Any]
Get = Callable[[str], Row | None]
Put = Callable[[str, Row], None]

STALE_NOT_CROSSED = (
    "stale in-flight lease with not_crossed boundary; reclaim only if a reconciler or an operator "
    "proves NOT_EXECUTED"
)


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def lease_end(now: int, ttl: float | None) -> int | None:
    return now + ms(ttl) if ttl is not None and ttl > 0 else None


def refuse(code: str, message: str, row: Row | None = None, now: int | None = None) -> LedgerError:
    details = {}
    if row is not None:
        details = {
            "request_id": row["request_id"],
            "terminal_outcome": row["terminal_outcome"],
            "state": g.transition_state(row["terminal_outcome"], row.get("lease_until"), now or 0),
            "side_effect_boundary": row["side_effect_boundary"],
            "owner": row["owner"],
            "fence": row["fence"],
            "external_operation_ref": row.get("external_operation_ref"),
        }
    return ledger_error(code, message, details)


def _lost(
    get: Get, rid: str, owner: str, fence: int, verb: str, now: int, need_lease: bool = False
) -> LedgerError:
    """A compare-and-swap found nothing to change: say exactly why."""
    row = get(rid)
    if row is None:
        return refuse("transition_not_found", f"no transition {rid!r}")
    if row["fence"] != fence or row["owner"] != owner:
        return refuse(
            "fence_lost",
            f"{verb} lost: {rid} is now held by {row['owner']} at fence {row['fence']} "
            f"(you hold fence {fence} as {owner})",
            row,
            now,
        )
    if row["terminal_outcome"] != "IN_FLIGHT":
        return refuse(
            "not_in_flight", f"{verb} refused: {rid} is {row['terminal_outcome']}, not IN_FLIGHT", row, now
        )
    if need_lease and row.get("lease_until") is not None and row["lease_until"] <= now:
        return refuse(
            "lease_expired",
            f"{verb} refused: the lease on {rid} already expired; reclaim or reconcile instead",
            row,
            now,
        )
    return refuse("transition_moved", f"{verb} refused: {rid} changed meanwhile", row, now)


def _held(row: Row | None, owner: str, fence: int) -> bool:
    return (
        row is not None
        and row["owner"] == owner
        and row["fence"] == fence
        and row["terminal_outcome"] == "IN_FLIGHT"
    )


def claim(get: Get, put: Put, req: ClaimRequest, now: int) -> tuple[str, str, bool, Row]:
    """claim_transition: gate the stored row (if any) and act on it; returns gate, action, repaired, row."""
    cls = g.side_effect_class(req.side_effect_class)
    if cls is None:
        raise refuse("invalid_side_effect_class", f"unknown side_effect_class {req.side_effect_class!r}")
    if not (req.request_id or "").strip():
        raise refuse("missing_request_id", "a claim names its request id")
    if not (req.owner or "").strip():
        raise refuse("missing_owner", "a claim names its owner (host:pid of the worker)")
    spend = req.spendability or g.default_spendability(cls)
    retry = req.retry_permission or g.default_retry_permission(cls)
    cap = req.capability or g.capability_floor(cls, req.key_param is not None, req.has_reconciler)
    key_ttl_ms = ms(req.key_ttl) if req.key_ttl is not None else None
    scope_text = json.dumps(req.scope or {})
    row = get(req.request_id)
    if row is None:
        row = {
            "request_id": req.request_id,
            "kind": req.kind,
            "transition_key": req.transition_key,
            "idempotency_key": req.idempotency_key or req.request_id,
            "tool": req.tool,
            "agent_id": req.agent_id or "",
            "policy_version": req.policy_version or "",
            "scope_text": scope_text,
            "dispatch_id": req.dispatch_id,
            "args_hash": req.args_hash,
            "side_effect_class": cls,
            "spendability": spend,
            "retry_permission": retry,
            "capability": cap,
            "side_effect_boundary": "not_crossed",
            "terminal_outcome": "IN_FLIGHT",
            "effect_phase": "INTENDED",
            "provider_key_param": req.key_param,
            "provider_idempotency_key": req.incoming_key,
            "provider_key_first_attempt_at": now if req.incoming_key is not None else None,
            "provider_key_ttl": key_ttl_ms,
            "owner": req.owner,
            "fence": 1,
            "attempts": 1,
            "lease_until": lease_end(now, req.lease_ttl),
            "last_heartbeat_at": now,
            "created_at": now,
            "started_at": now,
            "updated_at": now,
        }
        put(req.request_id, row)
        return "ALLOW", "run", False, row
    if row["transition_key"] != req.transition_key or row["tool"] != req.tool or row["kind"] != req.kind:
        raise refuse(
            "identity_conflict",
            f"request id {req.request_id!r} already names a different call (tool {row['tool']}, "
            f"transition key {row['transition_key']}); an explicit request id is reused only for the "
            "same call",
        )
    repaired = False
    while True:
        st = g.transition_state(row["terminal_outcome"], row.get("lease_until"), now)
        first_at = row.get("provider_key_first_attempt_at") or row["started_at"]
        if key_ttl_ms is None:
            validity = "UNTRACKED"
        else:
            validity = "EXPIRED" if now - first_at >= key_ttl_ms else "VALID"
        stored_key = row.get("provider_idempotency_key")
        if req.incoming_key is None or stored_key is None:
            key_match = "missing"
        else:
            key_match = "same" if req.incoming_key == stored_key else "different"
        gate = g.transition_gate(
            cls,
            spend,
            retry,
            row["side_effect_boundary"],
            st,
            req.key_param is not None,
            req.key_ttl is not None,
            validity,
            key_match,
            not (row.get("idempotency_key") or "").strip(),
        )
        settled = (
            row.get("operator_resolution") == "not_executed" or row.get("reconcile_status") == "NOT_EXECUTED"
        )
        death_missing = (
            req.presumed_dead_after is not None
            and row.get("worker_dead_asserted_at") is None
            and now - (row.get("last_heartbeat_at") or row["started_at"]) < ms(req.presumed_dead_after)
        )
        action = g.claim_action(
            gate,
            st,
            settled,
            req.has_reconciler and bool((row.get("external_operation_ref") or "").strip()),
            req.reconciled,
            cap == "blind",
            req.defer_read_unknown,
            death_missing,
        )
        if action != "repair":
            break
        row = {**row, "idempotency_key": row["request_id"], "updated_at": now}
        put(req.request_id, row)
        repaired = True
    if action == "run":
        if req.incoming_key is None:
            first = None
        elif req.incoming_key == stored_key:
            first = row.get("provider_key_first_attempt_at") or row["started_at"]
        else:
            first = now
        row = {
            **{k: v for k, v in row.items() if k not in _CLEARED_BY_CLAIM},
            "fence": row["fence"] + 1,
            "attempts": row["attempts"] + 1,
            "owner": req.owner,
            "terminal_outcome": "IN_FLIGHT",
            "side_effect_boundary": "not_crossed",
            "effect_phase": "INTENDED",
            "lease_until": lease_end(now, req.lease_ttl),
            "last_heartbeat_at": now,
            "started_at": now,
            "side_effect_class": cls,
            "spendability": spend,
            "retry_permission": retry,
            "capability": cap,
            "scope_text": scope_text,
            "dispatch_id": req.dispatch_id or row.get("dispatch_id"),
            "args_hash": req.args_hash or row.get("args_hash"),
            "provider_key_param": req.key_param,
            "provider_key_ttl": key_ttl_ms,
            "provider_idempotency_key": req.incoming_key,
            "provider_key_first_attempt_at": first,
            "updated_at": now,
        }
        put(req.request_id, row)
    elif action == "hard_block" and st == "EXPIRED":
        crossed = row["side_effect_boundary"]
        row = {
            **row,
            "terminal_outcome": "BLOCKED",
            "lease_until": None,
            "finished_at": now,
            "updated_at": now,
            "effect_phase": "ABORTED" if crossed == "not_crossed" else "UNKNOWN",
            "error": STALE_NOT_CROSSED
            if crossed == "not_crossed"
            else f"stale in-flight lease with boundary {crossed}: the effect may have happened",
        }
        put(req.request_id, row)
    return gate, action, repaired, row


_CLEARED_BY_CLAIM = frozenset(
    {
        "finished_at",
        "result_text",
        "error",
        "receipt_ref",
        "external_operation_ref",
        "reconcile_status",
        "reconciled_at",
        "operator_resolution",
        "worker_dead_asserted_by",
        "worker_dead_asserted_at",
    }
)


def _update(
    get: Get,
    put: Put,
    rid: str,
    owner: str,
    fence: int,
    verb: str,
    now: int,
    changes: Callable[[Row], Row | None],
    need_lease: bool = False,
) -> Row:
    """Apply ``changes`` to the row held by owner + fence (None from it: the swap does not apply)."""
    row = get(rid)
    new = changes(row) if _held(row, owner, fence) else None
    if new is None:
        raise _lost(get, rid, owner, fence, verb, now, need_lease)
    new["updated_at"] = now
    put(rid, new)
    return new


def renew_lease(get: Get, put: Put, rid: str, owner: str, fence: int, ttl: float, now: int) -> Row:
    if ttl is None or ttl <= 0:
        raise refuse("invalid_lease_ttl", "a lease is renewed for a positive number of seconds")

    def change(row: Row) -> Row | None:
        if row.get("lease_until") is not None and row["lease_until"] <= now:
            return None
        return {**row, "lease_until": lease_end(now, ttl), "last_heartbeat_at": now}

    return _update(get, put, rid, owner, fence, "renew_lease", now, change, need_lease=True)


def advance_boundary(get: Get, put: Put, rid: str, owner: str, fence: int, boundary: str, now: int) -> Row:
    rank = g.BOUNDARY_RANK.get(boundary)
    if rank is None:
        raise refuse("invalid_boundary", f"unknown side_effect_boundary {boundary!r}")

    def change(row: Row) -> Row | None:
        stored = row["side_effect_boundary"]
        lease = row.get("lease_until")
        if boundary == "maybe_crossed" and stored == "not_crossed" and lease is not None and lease <= now:
            return None
        return {
            **row,
            "side_effect_boundary": boundary if rank > g.BOUNDARY_RANK[stored] else stored,
            "effect_phase": "ATTEMPTING" if rank > 0 else row["effect_phase"],
        }

    return _update(
        get, put, rid, owner, fence, "advance_boundary", now, change, need_lease=boundary == "maybe_crossed"
    )


def record_external_operation(
    get: Get, put: Put, rid: str, owner: str, fence: int, ref: str, now: int
) -> Row:
    if not ref or not ref.strip() or any(ord(c) < 32 or ord(c) == 127 for c in ref):
        raise refuse("invalid_external_ref", "an external operation ref is a non-blank single line")
    row = get(rid)
    if (
        row is None
        or row["owner"] != owner
        or row["fence"] != fence
        or row["terminal_outcome"] not in ("IN_FLIGHT", "BLOCKED", "UNKNOWN")
    ):
        raise _lost(get, rid, owner, fence, "record_external_operation", now)
    row = {**row, "external_operation_ref": ref, "updated_at": now}
    put(rid, row)
    return row


def complete(get: Get, put: Put, rid: str, owner: str, fence: int, result_text: str, now: int) -> Row:
    return _update(
        get,
        put,
        rid,
        owner,
        fence,
        "complete",
        now,
        lambda row: {
            **{k: v for k, v in row.items() if k != "error"},
            "terminal_outcome": "COMPLETED",
            "side_effect_boundary": "crossed",
            "effect_phase": "COMMITTED",
            "result_text": result_text,
            "lease_until": None,
            "finished_at": now,
        },
    )


def fail(
    get: Get,
    put: Put,
    rid: str,
    owner: str,
    fence: int,
    error: str | None,
    after_effect: bool | None,
    now: int,
) -> Row:
    row = get(rid)
    if _held(row, owner, fence) and after_effect is False and row["side_effect_boundary"] != "not_crossed":
        raise refuse(
            "boundary_crossed",
            f"{rid} is past the side-effect boundary ({row['side_effect_boundary']}): it cannot fail "
            '"before the effect"',
            row,
            now,
        )

    def change(row: Row) -> Row:
        b = row["side_effect_boundary"]
        if after_effect:
            outcome = "FAILED_AFTER_EFFECT"
        else:
            outcome = {"not_crossed": "FAILED_BEFORE_EFFECT", "maybe_crossed": "UNKNOWN"}.get(
                b, "FAILED_AFTER_EFFECT"
            )
        return {
            **row,
            "terminal_outcome": outcome,
            "side_effect_boundary": "crossed" if after_effect else b,
            "effect_phase": "ABORTED" if not after_effect and b == "not_crossed" else "UNKNOWN",
            "error": None if error is None else error[:8000],
            "lease_until": None,
            "finished_at": now,
        }

    return _update(get, put, rid, owner, fence, "fail", now, change)


def mark_outcome(
    get: Get, put: Put, rid: str, owner: str, fence: int, outcome: str, error: str | None, now: int
) -> Row:
    verb = "mark_blocked" if outcome == "BLOCKED" else "mark_unknown"
    return _update(
        get,
        put,
        rid,
        owner,
        fence,
        verb,
        now,
        lambda row: {
            **row,
            "terminal_outcome": outcome,
            "lease_until": None,
            "finished_at": now,
            "error": None if error is None else error[:8000],
            "effect_phase": "ABORTED"
            if row["side_effect_boundary"] == "not_crossed" and outcome == "BLOCKED"
            else "UNKNOWN",
        },
    )


def apply_reconcile_result(
    get: Get, put: Put, rid: str, fence: int, status: str, result_text: str, by: str | None, now: int
) -> Row:
    if status not in ("COMPLETED", "NOT_EXECUTED", "UNKNOWN"):
        raise refuse(
            "invalid_reconcile_status",
            f"a reconcile result is COMPLETED, NOT_EXECUTED or UNKNOWN, not {status!r}",
        )
    row = get(rid)
    if row is None:
        raise refuse("transition_not_found", f"no transition {rid!r}")
    st = g.transition_state(row["terminal_outcome"], row.get("lease_until"), now)
    if row["fence"] != fence or st not in (
        "EXPIRED",
        "BLOCKED",
        "UNKNOWN",
        "FAILED_AFTER_EFFECT",
        "FAILED_BEFORE_EFFECT",
    ):
        raise refuse(
            "transition_moved",
            f"reconcile result for {rid} at fence {fence} refused: the row is {st} at fence {row['fence']}",
            row,
            now,
        )
    if status == "COMPLETED":
        row = {
            **row,
            "terminal_outcome": "COMPLETED",
            "side_effect_boundary": "crossed",
            "effect_phase": "COMMITTED",
            "result_text": result_text,
            "lease_until": None,
            "finished_at": now,
            "reconcile_status": "COMPLETED",
            "reconciled_at": now,
            "resolved_by": by or row.get("resolved_by"),
        }
    else:
        row = {**row, "reconcile_status": status, "reconciled_at": now}
        if st == "EXPIRED" and status == "NOT_EXECUTED":
            row.update(terminal_outcome="BLOCKED", lease_until=None, finished_at=now)
    row["updated_at"] = now
    put(rid, row)
    return row


def release(
    get: Get,
    put: Put,
    rid: str,
    verified: str,
    by: str,
    reason: str,
    result_text: str,
    expected_fence: int | None,
    now: int,
) -> Row:
    if verified not in ("completed", "not_executed"):
        raise refuse(
            "invalid_release",
            f"a release states what was verified: completed or not_executed, not {verified!r}",
        )
    if not (by or "").strip() or not (reason or "").strip():
        raise refuse("release_unattributed", "a release names who verified it (by) and why (reason)")
    row = get(rid)
    if row is None:
        raise refuse("transition_not_found", f"no transition {rid!r}")
    st = g.transition_state(row["terminal_outcome"], row.get("lease_until"), now)
    if expected_fence is not None and row["fence"] != expected_fence:
        raise refuse(
            "fence_lost", f"release refused: {rid} is at fence {row['fence']}, not {expected_fence}", row, now
        )
    if st == "COMPLETED":
        raise refuse("release_refused", f"{rid} is already COMPLETED", row, now)
    if st in ("IN_FLIGHT_HELD", "IN_FLIGHT_UNBOUNDED"):
        raise refuse(
            "release_refused",
            f"{rid} is in flight under a live lease (owner {row['owner']}); wait for it, or for the "
            "lease to expire",
            row,
            now,
        )
    if row.get("operator_resolution") is not None:
        raise refuse(
            "already_resolved",
            f"{rid} was already released ({row['operator_resolution']} by {row.get('resolved_by')}); "
            "a release is one-shot",
            row,
            now,
        )
    done = verified == "completed"
    row = {
        **row,
        "operator_resolution": verified,
        "resolved_by": by,
        "resolution_reason": reason,
        "resolved_at": now,
        "released_from_outcome": st,
        "terminal_outcome": "COMPLETED"
        if done
        else "BLOCKED"
        if st == "EXPIRED"
        else row["terminal_outcome"],
        "side_effect_boundary": "crossed" if done else row["side_effect_boundary"],
        "effect_phase": "COMMITTED" if done else row["effect_phase"],
        "result_text": result_text if done else row.get("result_text"),
        "lease_until": None,
        "finished_at": row.get("finished_at") or now,
        "updated_at": now,
    }
    put(rid, row)
    return row


# -- rows as the ledger sees them --------------------------------------------------------------------

_MS_FIELDS = (
    "provider_key_first_attempt_at",
    "lease_until",
    "last_heartbeat_at",
    "reconciled_at",
    "resolved_at",
    "worker_dead_asserted_at",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
)


def _when(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, UTC)


def to_transition(row: Row) -> Transition:
    values = {
        k: v for k, v in row.items() if k not in ("result_text", "scope_text") and not k.startswith("_")
    }
    for name in _MS_FIELDS:
        if name in values:
            values[name] = _when(values[name])
    if values.get("provider_key_ttl") is not None:
        values["provider_key_ttl"] = values["provider_key_ttl"] / 1000
    text = row.get("result_text")
    values["result"] = None if text is None else json.loads(text)
    values["scope"] = json.loads(row["scope_text"]) if row.get("scope_text") else {}
    return Transition.from_mapping(values)


def to_claim(answer: tuple[str, str, bool, Row], with_row: bool = True) -> Claim:
    gate, action, repaired, row = answer
    if not with_row and action == "run":
        return Claim(gate, action, repaired, None, row["fence"])
    return Claim(gate, action, repaired, to_transition(row))
