"""Every store decides like the SQL gate: rows put into each reachable state through the verbs, then
claimed again by another worker, on memory, file, Redis and Postgres; the answers are the contract's
(mycelium.ledger.gate, itself checked against the contract and the SQL in test_gate_contract.py)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from mycelium.ledger import gate
from mycelium.ledger.errors import (
    LedgerIdentityConflictError,
    LedgerLeaseExpiredError,
    LedgerOutcomeAlreadySetError,
)
from mycelium.ledger.record import ClaimRequest
from mycelium.ledger.stores import storage_for

BACKENDS = ["memory", "file", "redis", "postgres"]

STATES = [
    ("IN_FLIGHT_HELD", b) for b in ("not_crossed", "maybe_crossed", "crossed")
] + [("IN_FLIGHT_UNBOUNDED", b) for b in ("not_crossed", "maybe_crossed", "crossed")] + [
    ("EXPIRED", b) for b in ("not_crossed", "maybe_crossed", "crossed")
] + [("BLOCKED", b) for b in ("not_crossed", "maybe_crossed", "crossed")] + [
    ("COMPLETED", "crossed"),
    ("FAILED_BEFORE_EFFECT", "not_crossed"),
    ("FAILED_AFTER_EFFECT", "crossed"),
    ("UNKNOWN", "maybe_crossed"),
    ("UNKNOWN", "crossed"),
]


def store_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    if kind == "memory":
        return "memory:"
    if kind == "file":
        return (tmp_path / "ledger").as_uri()
    if kind == "redis":
        return request.getfixturevalue("redis_url")
    return request.getfixturevalue("db_dsn")


@pytest.fixture(params=BACKENDS)
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, request.param, tmp_path)


@pytest.fixture
async def any_store(any_url: str):
    s = storage_for(any_url)
    try:
        yield s
    finally:
        await s.aclose()
        await asyncio.to_thread(s.close)


def request_for(rid: str, cls: str, owner: str, lease: float = 60.0, **kw: Any) -> ClaimRequest:
    return ClaimRequest(
        request_id=rid, transition_key="k-" + rid, tool="pay", owner=owner, side_effect_class=cls,
        agent_id="agent-1", lease_ttl=lease, **kw,
    )


async def put_in_state(store: Any, rid: str, cls: str, state: str, boundary: str) -> None:
    lease = {"IN_FLIGHT_UNBOUNDED": 0.0, "EXPIRED": 0.2}.get(state, 60.0)
    c = await store.claim(request_for(rid, cls, "w:1", lease))
    assert (c.action, c.fence) == ("run", 1)
    for b in ("maybe_crossed", "crossed")[: gate.BOUNDARY_RANK[boundary]]:
        await store.advance_boundary(rid, "w:1", 1, b)
    if state == "COMPLETED":
        await store.complete(rid, "w:1", 1, {"paid": rid})
    elif state == "FAILED_BEFORE_EFFECT":
        await store.fail(rid, "w:1", 1, "boom")
    elif state == "FAILED_AFTER_EFFECT":
        await store.fail(rid, "w:1", 1, "boom", True)
    elif state == "UNKNOWN":
        await store.mark_unknown(rid, "w:1", 1, "lost")
    elif state == "BLOCKED":
        await store.mark_blocked(rid, "w:1", 1, "parked")


async def test_every_store_gates_each_reachable_state_of_each_class_as_the_contract(any_store):
    cases = list(itertools.product(gate.CLASSES, STATES))
    for i, (cls, (state, boundary)) in enumerate(cases):
        await put_in_state(any_store, f"r{i}", cls, state, boundary)
    await asyncio.sleep(0.25)  # the EXPIRED rows' leases lapse (on each store's own clock)
    wrong = []
    for i, (cls, (state, boundary)) in enumerate(cases):
        claim = await any_store.claim(request_for(f"r{i}", cls, "w:2"))
        expected_gate = gate.transition_gate(
            cls, gate.default_spendability(cls), gate.default_retry_permission(cls), boundary, state,
            False, False, "UNTRACKED", "missing", False,
        )
        expected_action = gate.claim_action(
            expected_gate, state, False, False, False, gate.capability_floor(cls, False, False) == "blind",
            False, False,
        )
        row = claim.transition
        after = {"run": ("IN_FLIGHT", 2, "w:2"), "hard_block": ("BLOCKED" if state == "EXPIRED" else state, 1,
                                                                 "w:1")}.get(expected_action)
        if (claim.gate, claim.action) != (expected_gate, expected_action) or (
            after and (row.terminal_outcome, row.fence, row.owner) != after
        ):
            wrong.append((cls, state, boundary, claim.gate, claim.action, row.terminal_outcome, row.fence))
        if expected_action == "return":
            assert row.result == {"paid": f"r{i}"}
    assert not wrong, f"{len(wrong)} of {len(cases)} differ from the contract, first: {wrong[:3]}"


async def test_a_same_key_retry_of_an_unknown_keyed_call_runs_only_with_the_same_valid_key(any_store):
    keyed = {"key_param": "idem", "key_ttl": 3600.0}
    for rid, second_key, expected in (("same", "K1", "run"), ("other", "K2", "hard_block")):
        await any_store.claim(request_for(rid, "keyed_mutate", "w:1", incoming_key="K1", **keyed))
        await any_store.advance_boundary(rid, "w:1", 1, "maybe_crossed")
        await any_store.fail(rid, "w:1", 1, "timeout")
        claim = await any_store.claim(request_for(rid, "keyed_mutate", "w:2", incoming_key=second_key, **keyed))
        assert claim.action == expected, rid
    row = await any_store.get("same")
    assert (row.fence, row.provider_idempotency_key, row.provider_key_first_attempt_at is not None) == (
        2, "K1", True
    )


async def test_every_store_fences_refuses_and_resolves_as_the_sql_verbs(any_store):
    s = any_store
    await s.claim(request_for("r", "non_idempotent_mutate", "w:1", 0.2))
    with pytest.raises(LedgerIdentityConflictError):
        await s.claim(ClaimRequest("r", "another-key", "pay", "w:2", "non_idempotent_mutate"))
    await asyncio.sleep(0.25)
    with pytest.raises(LedgerLeaseExpiredError):
        await s.renew_lease("r", "w:1", 1, 30)
    with pytest.raises(LedgerLeaseExpiredError):
        await s.advance_boundary("r", "w:1", 1, "maybe_crossed")
    parked = await s.claim(request_for("r", "non_idempotent_mutate", "w:2"))
    assert (parked.action, parked.transition.terminal_outcome) == ("hard_block", "BLOCKED")
    with pytest.raises(LedgerOutcomeAlreadySetError):
        await s.complete("r", "w:1", 1, {"late": True})  # the first owner's lease lapsed and was parked
    released = await s.release("r", "not_executed", "ann", "checked the provider: nothing was sent")
    assert released.operator_resolution == "not_executed"
    rerun = await s.claim(request_for("r", "non_idempotent_mutate", "w:2"))
    assert (rerun.action, rerun.fence) == ("run", 2)
    with pytest.raises(LedgerOutcomeAlreadySetError):
        await s.complete("r", "w:1", 1, None)  # a stale fence
    await s.complete("r", "w:2", 2, {"z": 1, "a": 2})
    assert (await s.get("r")).result == {"z": 1, "a": 2}
    # reconciliation: a reconciler that answers COMPLETED settles an ambiguous row
    await s.claim(request_for("q", "non_idempotent_mutate", "w:1"))
    await s.advance_boundary("q", "w:1", 1, "maybe_crossed")
    await s.record_external_operation("q", "w:1", 1, "op-1")
    await s.fail("q", "w:1", 1, "crashed")
    asked = await s.claim(request_for("q", "non_idempotent_mutate", "w:2", has_reconciler=True))
    assert asked.action == "reconcile" and asked.transition.external_operation_ref == "op-1"
    settled = await s.apply_reconcile_result("q", 1, "COMPLETED", {"b": 1, "a": 0}, "ProviderReconciler")
    assert settled.terminal_outcome == "COMPLETED"
    back = await s.claim(request_for("q", "non_idempotent_mutate", "w:3"))
    assert back.action == "return" and back.transition.result == {"b": 1, "a": 0}
    assert await s.get("nope") is None


async def test_no_store_repeats_upstream_s_livelock_or_its_stale_gate(any_store):
    """runtime.md §22: a failed retry-safe call re-runs even when death evidence is required (the death
    signal applies to an expired lease only), and the gate is taken on the row as it is at the claim:
    a row that failed after its effect since a worker last looked is never overwritten."""
    s = any_store
    await s.claim(request_for("d", "idempotent_mutate", "w:1"))
    await s.fail("d", "w:1", 1, "boom")
    again = await s.claim(request_for("d", "idempotent_mutate", "w:2", presumed_dead_after=3600))
    assert (again.action, again.fence) == ("run", 2)
    await s.claim(request_for("e", "non_idempotent_mutate", "w:1", 0.2))
    await s.fail("e", "w:1", 1, "after", True)  # FAILED_AFTER_EFFECT
    await asyncio.sleep(0.25)
    late = await s.claim(request_for("e", "non_idempotent_mutate", "w:2"))
    assert (late.action, late.transition.terminal_outcome, late.transition.fence) == (
        "hard_block", "FAILED_AFTER_EFFECT", 1
    )
