"""Each defect found upstream (research/runtime.md §22) has a test here that would catch it."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from mycelium import LedgerPollTimeoutError, ToolTransitionBinding, ledger, task_ledger
from mycelium.ledger.binding import ToolTransitionBinding as Binding
from mycelium.ledger.identity import identify
from tests.ledger.conftest import claim, expire, outcome


# §22.1 — livelock: death-signal mode must never hold back a retry of a FAILED_BEFORE_EFFECT row.
async def test_a_failed_retry_safe_call_is_retried_at_once_even_when_death_evidence_is_required(make_ledger):
    led = make_ledger(presumed_dead_after=3600, poll_timeout=2.0)
    runs = []

    @ledger(
        action_ledger=led,
        transition_binding=ToolTransitionBinding.for_tool(side_effect_class="idempotent_mutate"),
    )
    async def set_status(order: str) -> str:
        runs.append(order)
        if len(runs) == 1:
            raise RuntimeError("upstream 503")
        return "set"

    with pytest.raises(RuntimeError):
        await set_status("o-1", tool_call_id="c1")
    assert await asyncio.wait_for(set_status("o-1", tool_call_id="c1"), timeout=5) == "set"
    assert runs == ["o-1", "o-1"]


async def test_death_evidence_is_required_only_to_reclaim_an_expired_lease(admin_conn):
    await claim(admin_conn, "r", "w:1", cls="idempotent_mutate", lease_ttl=0.001)
    await expire(admin_conn, "r")
    waiting = await claim(admin_conn, "r", "w:2", cls="idempotent_mutate", presumed_dead_after=3600)
    assert (waiting["gate"], waiting["action"]) == ("ALLOW", "poll")
    await admin_conn.execute("SELECT 1 FROM mycelium.mark_worker_dead('w:1', 'ann', 'node drained', true)")
    taken = await claim(admin_conn, "r", "w:2", cls="idempotent_mutate", presumed_dead_after=3600)
    assert (taken["action"], taken["fence"]) == ("run", 2)


# §22.2 — the gate decided on an earlier read, then a claim that overwrote FAILED_AFTER_EFFECT.
async def test_a_claim_waiting_on_the_row_lock_gates_the_committed_outcome_not_a_stale_one(
    db_dsn, admin_conn
):
    await claim(admin_conn, "r", "w:1", cls="idempotent_mutate", lease_ttl=0.001)
    await expire(admin_conn, "r")  # a stale read now says EXPIRED + not_crossed: "reclaim"
    a = await asyncpg.connect(db_dsn)
    b = await asyncpg.connect(db_dsn)
    try:
        tx = a.transaction()
        await tx.start()
        await a.execute("SELECT 1 FROM mycelium.advance_boundary('r', 'w:1', 1, 'crossed')")
        await a.execute("SELECT 1 FROM mycelium.fail('r', 'w:1', 1, 'charged, then the parser threw')")
        racing = asyncio.create_task(claim(b, "r", "w:2", cls="idempotent_mutate"))
        await asyncio.sleep(0.2)
        assert not racing.done(), "the racing claim must wait for the row lock"
        await tx.commit()
        row = await racing
    finally:
        await a.close()
        await b.close()
    assert (row["gate"], row["action"]) == ("HARD_BLOCK", "hard_block")
    stored = await outcome(admin_conn, "r")
    assert (stored["terminal_outcome"], stored["fence"]) == ("FAILED_AFTER_EFFECT", 1)


# §22.7 — the task ledger wrote completions with unguarded upserts, and a crashed task stayed in flight.
async def test_a_crashed_task_expires_and_a_stale_worker_cannot_overwrite_its_successor(make_ledger, store):
    led = make_ledger(lease_ttl=0.2, lease_renew_interval=0)
    runs = []
    release_first, first_started = asyncio.Event(), asyncio.Event()

    @task_ledger(action_ledger=led, wait=True)
    async def process_invoice(invoice_id: str) -> dict:
        runs.append(invoice_id)
        if len(runs) == 1:
            first_started.set()
            await release_first.wait()  # a worker that hangs past its lease
            return {"by": "stale"}
        return {"by": "successor"}

    stale = asyncio.create_task(process_invoice(invoice_id="inv-1", task_id="invoice-1"))
    await first_started.wait()
    second = await process_invoice(invoice_id="inv-1", task_id="invoice-1")
    assert second == {"by": "successor"}
    release_first.set()
    assert await stale == {"by": "stale"}  # the caller still gets its own result
    row = await store.get("invoice-1")
    assert (row.terminal_outcome, row.result, row.fence, row.kind) == (
        "COMPLETED",
        {"by": "successor"},
        2,
        "task",
    )
    assert await process_invoice(invoice_id="inv-1", task_id="invoice-1") == {"by": "successor"}
    assert len(runs) == 2


# §22.4 — lease expiry and key TTLs decided on the client's wall clock.
async def test_a_client_whose_clock_runs_hours_ahead_still_sees_the_live_lease(
    make_ledger, monkeypatch, store
):
    led = make_ledger(poll_timeout=0.3)
    started, finish = asyncio.Event(), asyncio.Event()
    runs = []
    binding = ToolTransitionBinding.for_tool(side_effect_class="idempotent_mutate")

    @ledger(action_ledger=led, transition_binding=binding)
    async def sync_crm(contact: str) -> str:
        runs.append(contact)
        started.set()
        await finish.wait()
        return "synced"

    first = asyncio.create_task(sync_crm("c-1", tool_call_id="t"))
    await started.wait()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 10 * 3600)
    with pytest.raises(LedgerPollTimeoutError):
        await sync_crm("c-1", tool_call_id="t")
    monkeypatch.setattr(time, "time", real)
    finish.set()
    assert await first == "synced" and runs == ["c-1"]
    ident = identify(
        sync_crm.__wrapped__, "sync_crm", binding.with_agent("agent-1", "v1"), ("c-1",), {"tool_call_id": "t"}
    )
    row = await store.get(ident.request_id)
    assert row.terminal_outcome == "COMPLETED"


# §22.5 — keys that depend on how the call was spelled.
def test_positional_keyword_and_int_float_spellings_of_one_call_share_a_key():
    def charge(amount: float, recipient: str, memo: str = "") -> None: ...

    b = Binding.for_tool(
        agent_id="a",
        policy_version="1",
        side_effect_class="keyed_mutate",
        provider_idempotency_key_param="memo",
    )
    keys = {
        identify(charge, "charge", b, args, kwargs).transition_key
        for args, kwargs in [
            ((10, "acct"), {}),
            ((), {"amount": 10.0, "recipient": "acct"}),
            ((10.0,), {"recipient": "acct"}),
            ((10, "acct", "k-1"), {}),
            ((), {"amount": 10, "recipient": "acct", "memo": "k-2"}),
        ]
    }
    assert len(keys) == 1
    other = identify(charge, "charge", b, (11, "acct"), {}).transition_key
    assert other not in keys
    assert identify(charge, "charge", b, (10, "acct"), {"tool_call_id": "c9"}).transition_key not in keys
