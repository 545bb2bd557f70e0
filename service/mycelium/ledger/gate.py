"""The resolution gate in Python, for the stores that keep their rows in this process or on this host.

The same decision tables as the SQL gate (sql/transitions.sql transition_gate and claim_action), whose
specification is contracts/transition-gates.json; tests/ledger/test_gate_contract.py enumerates every
combination against the contract, this module, the SQL and the Redis script.
"""

from __future__ import annotations

MUTATING = ("idempotent_mutate", "keyed_mutate", "non_idempotent_mutate", "irreversible")
CLASSES = ("read", *MUTATING)

_ALIASES = {
    "read_only": "read",
    "idempotent_write": "idempotent_mutate",
    "external_api_mutation": "keyed_mutate",
    "non_idempotent_write": "non_idempotent_mutate",
    "payment": "non_idempotent_mutate",
    "email": "non_idempotent_mutate",
    "subagent": "non_idempotent_mutate",
    "onchain_action": "irreversible",
}
_RETRY = {
    "read": "safe_retry",
    "idempotent_mutate": "safe_retry",
    "keyed_mutate": "retry_only_with_same_provider_idempotency_key",
    "non_idempotent_mutate": "manual_reconciliation_required",
    "irreversible": "never_retry_automatically",
}
_SPEND = {
    "read": "multi_use",
    "idempotent_mutate": "multi_use",
    "keyed_mutate": "single_use",
    "non_idempotent_mutate": "single_use",
    "irreversible": "non_replayable",
}
SAME_KEY = "retry_only_with_same_provider_idempotency_key"
BOUNDARY_RANK = {"not_crossed": 0, "maybe_crossed": 1, "crossed": 2}


def side_effect_class(name: str | None) -> str | None:
    """The canonical class of a class name or legacy alias; None when unknown."""
    if name is None:
        return None
    key = name.strip().lower()
    return key if key in CLASSES else _ALIASES.get(key)


def default_retry_permission(cls: str) -> str:
    return _RETRY[cls]


def default_spendability(cls: str) -> str:
    return _SPEND[cls]


def capability_floor(cls: str, key_param: bool, reconciler: bool) -> str:
    if cls in ("read", "idempotent_mutate"):
        return "idempotent"
    if cls == "keyed_mutate" and (key_param or reconciler):
        return "queryable"
    if cls == "non_idempotent_mutate" and reconciler:
        return "queryable"
    return "blind"


def transition_state(outcome: str, lease_until: float | None, now: float) -> str:
    """The stored outcome resolved with the lease (lease_until and now on the store's clock)."""
    if outcome != "IN_FLIGHT":
        return outcome
    if lease_until is None:
        return "IN_FLIGHT_UNBOUNDED"
    return "EXPIRED" if now >= lease_until else "IN_FLIGHT_HELD"


def transition_gate(
    cls: str,
    spendability: str,
    retry: str,
    boundary: str,
    state: str,
    key_param: bool,
    key_ttl: bool,
    key_validity: str,
    key_match: str,
    needs_repair: bool,
) -> str:
    """ALLOW, RETURN, POLL, RECLAIM, REPAIR, SOFT_BLOCK or HARD_BLOCK for a redispatch."""
    if needs_repair:
        return "REPAIR"
    if state == "COMPLETED":
        return "RETURN"
    if state in ("IN_FLIGHT_HELD", "IN_FLIGHT_UNBOUNDED"):
        return "POLL"
    if cls == "read":
        return "SOFT_BLOCK" if state in ("BLOCKED", "UNKNOWN") else "RECLAIM"
    if state == "BLOCKED":
        return "HARD_BLOCK"
    if state == "UNKNOWN":
        same_key_retry = (
            key_param
            and key_ttl
            and retry == SAME_KEY
            and cls in ("idempotent_mutate", "keyed_mutate")
            and key_match == "same"
            and key_validity == "VALID"
        )
        return "ALLOW" if same_key_retry else "HARD_BLOCK"
    if state == "EXPIRED":
        if boundary != "not_crossed" or spendability != "multi_use":
            return "HARD_BLOCK"
        return "ALLOW" if retry == "safe_retry" else "HARD_BLOCK"
    if state == "FAILED_BEFORE_EFFECT":
        if boundary != "not_crossed" or retry in (
            "never_retry_automatically",
            "manual_reconciliation_required",
        ):
            return "HARD_BLOCK"
        if retry == SAME_KEY:
            if cls not in ("idempotent_mutate", "keyed_mutate"):
                return "HARD_BLOCK"
            if not key_param:
                return "ALLOW"
            if key_match != "same" or (key_ttl and key_validity == "EXPIRED"):
                return "HARD_BLOCK"
        return "ALLOW"
    return "HARD_BLOCK"  # FAILED_AFTER_EFFECT


def claim_action(
    gate: str,
    state: str,
    settled: bool,
    can_reconcile: bool,
    reconciled: bool,
    blind: bool,
    defer: bool,
    death_missing: bool,
) -> str:
    """What the claim does after the gate: repair, return, poll, run, reconcile, soft_block, hard_block."""
    if gate == "REPAIR":
        return "repair"
    if gate == "RETURN":
        return "return"
    if gate == "POLL":
        return "poll"
    if gate == "RECLAIM":
        return "poll" if state == "EXPIRED" and death_missing else "run"
    if gate == "SOFT_BLOCK":
        return "soft_block" if defer else "run"
    if gate == "ALLOW" and state == "UNKNOWN":
        if settled:
            return "run"
        if can_reconcile and not reconciled:
            return "reconcile"
        return "hard_block" if blind else "run"
    if gate == "ALLOW":
        return "poll" if state == "EXPIRED" and death_missing else "run"
    if settled:
        return "run"
    return "reconcile" if can_reconcile and not reconciled else "hard_block"
