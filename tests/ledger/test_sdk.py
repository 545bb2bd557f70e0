"""The SDK's behaviour end to end on a real database: markers, reconcilers, soft blocks, auto-renew."""

from __future__ import annotations

import asyncio

import pytest

from mycelium import (
    LedgerHardBlockError,
    LedgerPollTimeoutError,
    LedgerSoftBlockError,
    ReconcileResult,
    ToolTransitionBinding,
    ledger,
    ledger_sync,
    mark_crossed,
    record_external_operation,
    side_effect,
)
from mycelium.ledger.identity import identify

NIM = ToolTransitionBinding.for_tool(side_effect_class="non_idempotent_mutate")


class Charges:
    """A fake provider that counts what it really did."""

    def __init__(self) -> None:
        self.made: list[str] = []


async def row_of(store, fn, binding, *args, **kwargs):
    ident = identify(fn.__wrapped__, fn.__name__, binding.with_agent("agent-1", "v1"), args, kwargs)
    return await store.get(ident.request_id)


async def held_by_renewal_alone(store, fn, binding, *args, **kwargs) -> None:
    """Past twice the lease, the running call still holds it, and a peer polls rather than reclaims."""
    await asyncio.sleep(1.5)
    row = await row_of(store, fn, binding, *args, **kwargs)
    assert (row.terminal_outcome, row.fence) == ("IN_FLIGHT", 1)
    with pytest.raises(LedgerPollTimeoutError):
        await fn(*args, **kwargs)


async def test_a_crash_inside_side_effect_is_ambiguous_and_the_redispatch_hard_blocks(make_ledger, store):
    led, charges = make_ledger(), Charges()

    @ledger(action_ledger=led, transition_binding=NIM)
    async def send_email(to: str) -> str:
        async with side_effect():
            charges.made.append(to)
            raise ConnectionError("socket closed before the reply")

    with pytest.raises(ConnectionError):
        await send_email("a@x", tool_call_id="c1")
    with pytest.raises(LedgerHardBlockError, match="manual reconciliation"):
        await send_email("a@x", tool_call_id="c1")
    row = await row_of(store, send_email, NIM, "a@x", tool_call_id="c1")
    assert (row.terminal_outcome, row.side_effect_boundary) == ("UNKNOWN", "maybe_crossed")
    assert charges.made == ["a@x"]


async def test_a_failure_before_any_marker_is_failed_before_effect_and_after_mark_crossed_failed_after(
    make_ledger, store
):
    led = make_ledger()
    idem = ToolTransitionBinding.for_tool(side_effect_class="idempotent_mutate")
    calls = []

    @ledger_sync(action_ledger=led, transition_binding=idem)
    def upsert(key: str, crossed: bool) -> str:
        calls.append(key)
        if crossed:
            mark_crossed()
        raise ValueError("bad reply")

    with pytest.raises(ValueError):
        await asyncio.to_thread(upsert, "k1", False)
    with pytest.raises(ValueError):
        await asyncio.to_thread(upsert, "k2", True)
    before = await row_of(store, upsert, idem, "k1", False)
    after = await row_of(store, upsert, idem, "k2", True)
    assert (before.terminal_outcome, before.side_effect_boundary) == ("FAILED_BEFORE_EFFECT", "not_crossed")
    assert (after.terminal_outcome, after.side_effect_boundary) == ("FAILED_AFTER_EFFECT", "crossed")
    with pytest.raises(ValueError):  # a retry-safe failure before the effect runs again
        await asyncio.to_thread(upsert, "k1", False)
    with pytest.raises(LedgerHardBlockError):  # after the effect it never does
        await asyncio.to_thread(upsert, "k2", True)
    assert calls == ["k1", "k2", "k1"]


class Provider:
    def __init__(self, answer):
        self.answer, self.asked = answer, 0

    def reconcile(self, entry):
        self.asked += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "runs", "outcome"),
    [
        (ReconcileResult.completed({"charged": "pi_1"}), 1, "COMPLETED"),
        (ReconcileResult.not_executed(), 2, "COMPLETED"),
        (ReconcileResult.unknown(), 1, "UNKNOWN"),
        (RuntimeError("provider API down"), 1, "UNKNOWN"),
    ],
)
async def test_a_reconciler_settles_an_ambiguous_call_or_fails_closed(
    make_ledger, store, answer, runs, outcome
):
    led = make_ledger()
    reconciler = Provider(answer)
    made = []

    @ledger(action_ledger=led, transition_binding=NIM, reconciler=reconciler)
    async def pay(amount: int) -> dict:
        made.append(amount)
        async with side_effect():
            record_external_operation("pi_1")
            if len(made) == 1:
                raise TimeoutError("no reply")
        return {"charged": "pi_new"}

    with pytest.raises(TimeoutError):
        await pay(5, tool_call_id="c")
    if outcome == "UNKNOWN":
        with pytest.raises(LedgerHardBlockError, match="pi_1"):
            await pay(5, tool_call_id="c")
    else:
        expected = {"charged": "pi_1"} if answer.status == "COMPLETED" else {"charged": "pi_new"}
        assert await pay(5, tool_call_id="c") == expected
        assert await pay(5, tool_call_id="c") == expected
    assert len(made) == runs and reconciler.asked == 1
    assert (await row_of(store, pay, NIM, 5, tool_call_id="c")).terminal_outcome == outcome


async def test_without_a_ref_or_without_a_reconciler_an_ambiguous_call_hard_blocks(make_ledger):
    led = make_ledger()
    asked = Provider(ReconcileResult.not_executed())

    @ledger(action_ledger=led, transition_binding=NIM, reconciler=asked)
    async def no_ref(x: int) -> None:
        async with side_effect():
            raise TimeoutError

    @ledger(action_ledger=led, transition_binding=NIM)
    async def no_reconciler(x: int) -> None:
        async with side_effect():
            record_external_operation("msg-1")
            raise TimeoutError

    for tool in (no_ref, no_reconciler):
        with pytest.raises(TimeoutError):
            await tool(1, tool_call_id="c")
        with pytest.raises(LedgerHardBlockError):
            await tool(1, tool_call_id="c")
    assert asked.asked == 0


async def test_an_ambiguous_read_is_retried_by_default_and_deferred_on_request(make_ledger, store):
    led = make_ledger()
    read = ToolTransitionBinding.for_tool(side_effect_class="read")
    calls = []

    async def body(q: str) -> str:
        calls.append(q)
        if len(calls) == 1:
            async with side_effect():
                raise TimeoutError
        return "hits"

    retrying = ledger(action_ledger=led, transition_binding=read)(body)
    with pytest.raises(TimeoutError):
        await retrying("q", tool_call_id="c")
    assert await retrying("q", tool_call_id="c") == "hits"

    calls.clear()

    async def search(q: str) -> str:
        return await body(q)

    deferring = ledger(action_ledger=led, transition_binding=read, defer_read_only_unknown=True)(search)
    with pytest.raises(TimeoutError):
        await deferring("q", tool_call_id="d")
    with pytest.raises(LedgerSoftBlockError):
        await deferring("q", tool_call_id="d")


async def test_the_lease_is_renewed_while_a_long_body_runs(make_ledger, store):
    led = make_ledger(lease_ttl=0.6, lease_renew_interval=0.1, poll_timeout=0.5)
    started, finish = asyncio.Event(), asyncio.Event()
    binding = ToolTransitionBinding.for_tool(side_effect_class="idempotent_mutate")

    @ledger(action_ledger=led, transition_binding=binding)
    async def long_job(n: int) -> str:
        started.set()
        await finish.wait()
        return "done"

    first = asyncio.create_task(long_job(1, tool_call_id="c"))
    await started.wait()
    await held_by_renewal_alone(store, long_job, binding, 1, tool_call_id="c")
    finish.set()
    assert await first == "done"
    assert (await row_of(store, long_job, binding, 1, tool_call_id="c")).fence == 1


async def test_a_long_body_is_renewed_though_shorter_calls_began_and_ended_around_it(make_ledger, store):
    # one timer serves every running body of a ledger: here it is first set for a short call that
    # ends long before its renewal was due, and must still come round for the long body
    led = make_ledger(lease_ttl=0.6, lease_renew_interval=0.1, poll_timeout=0.3)
    short_started, long_started, finish = asyncio.Event(), asyncio.Event(), asyncio.Event()
    binding = ToolTransitionBinding.for_tool(side_effect_class="idempotent_mutate")

    @ledger(action_ledger=led, transition_binding=binding)
    async def job(n: int) -> str:
        if n == 0:
            short_started.set()
            await long_started.wait()
            return "short"
        if n > 1:
            return "quick"
        if long_started.is_set():
            return "ran twice"  # a peer reclaimed a lapsed lease
        long_started.set()
        await finish.wait()
        return "long"

    short = asyncio.create_task(job(0, tool_call_id="s"))
    await short_started.wait()
    long = asyncio.create_task(job(1, tool_call_id="l"))
    assert await short == "short"
    for i in range(5):  # more short calls come and go while the long body runs
        assert await job(2 + i, tool_call_id=f"q{i}") == "quick"
    await held_by_renewal_alone(store, job, binding, 1, tool_call_id="l")
    finish.set()
    assert await long == "long"


async def test_a_sync_body_keeps_its_lease_while_it_runs(make_ledger, store):
    import threading

    led = make_ledger(lease_ttl=0.6, lease_renew_interval=0.1, poll_timeout=0.3)
    started, finish = threading.Event(), threading.Event()
    binding = ToolTransitionBinding.for_tool(side_effect_class="idempotent_mutate")

    @ledger_sync(action_ledger=led, transition_binding=binding)
    def job(n: int) -> str:
        if started.is_set():
            return "ran twice"  # a peer reclaimed a lapsed lease
        started.set()
        finish.wait(30)
        return "done"

    first = asyncio.create_task(asyncio.to_thread(job, 1, tool_call_id="c"))
    assert await asyncio.to_thread(started.wait, 30)
    await asyncio.sleep(1.5)  # over twice the lease: only renewal keeps it held
    with pytest.raises(LedgerPollTimeoutError):
        await asyncio.to_thread(job, 1, tool_call_id="c")  # a peer polls; it does not reclaim
    finish.set()
    assert await first == "done"


async def test_without_renewal_the_lease_lapses_and_a_retry_safe_peer_takes_over(make_ledger, store):
    led = make_ledger(lease_ttl=0.3, lease_renew_interval=0)
    started, finish = asyncio.Event(), asyncio.Event()
    binding = ToolTransitionBinding.for_tool(side_effect_class="idempotent_mutate")
    runs = []

    @ledger(action_ledger=led, transition_binding=binding)
    async def job(n: int) -> str:
        runs.append(n)
        if len(runs) == 1:
            started.set()
            await finish.wait()
            return "first"
        return "second"

    first = asyncio.create_task(job(1, tool_call_id="c"))
    await started.wait()
    assert await job(1, tool_call_id="c") == "second"
    finish.set()
    assert await first == "first"
    row = await row_of(store, job, binding, 1, tool_call_id="c")
    assert (row.fence, row.result) == (2, "second")


async def test_a_keyed_retry_runs_with_the_same_provider_key_and_hard_blocks_with_another(make_ledger):
    led = make_ledger()
    keyed = ToolTransitionBinding.for_tool(
        side_effect_class="keyed_mutate", provider_idempotency_key_param="idempotency_key"
    )
    calls = []

    @ledger(action_ledger=led, transition_binding=keyed)
    async def charge(amount: int, idempotency_key: str | None = None) -> str:
        calls.append(idempotency_key)
        if len(calls) == 1:
            raise ValueError("card declined before any charge")
        return f"charged with {idempotency_key}"

    with pytest.raises(ValueError):
        await charge(10, idempotency_key="k1", tool_call_id="c")
    with pytest.raises(LedgerHardBlockError):  # the same transition, another key: would not be deduped
        await charge(10, idempotency_key="k2", tool_call_id="c")
    with pytest.raises(LedgerHardBlockError):
        await charge(10, tool_call_id="c")
    assert await charge(10, idempotency_key="k1", tool_call_id="c") == "charged with k1"
    assert calls == ["k1", "k1"]


async def test_a_task_running_elsewhere_is_pending_and_a_completed_task_returns_its_result(make_ledger):
    from mycelium import TaskLedgerPendingError, task_ledger

    led = make_ledger()
    started, finish = asyncio.Event(), asyncio.Event()

    @task_ledger(action_ledger=led)
    async def nightly(report: str) -> str:
        started.set()
        await finish.wait()
        return f"{report} done"

    first = asyncio.create_task(nightly("sales", task_id="nightly-1"))
    await started.wait()
    with pytest.raises(TaskLedgerPendingError):
        await nightly("sales", task_id="nightly-1")
    finish.set()
    assert await first == "sales done"
    assert await nightly("anything", task_id="nightly-1") == "sales done"


class AsyncProvider:
    def __init__(self, answer: ReconcileResult, delay: float = 0.0) -> None:
        self.answer, self.delay, self.asked = answer, delay, 0

    async def reconcile_async(self, entry):
        self.asked += 1
        await asyncio.sleep(self.delay)
        return self.answer


@pytest.mark.parametrize(("delay", "settles"), [(0.0, True), (5.0, False)])
async def test_an_async_reconciler_is_preferred_and_a_slow_one_times_out_into_a_hard_block(
    make_ledger, delay, settles
):
    led = make_ledger(reconcile_timeout=0.2)
    provider = AsyncProvider(ReconcileResult.completed({"sent": "msg-1"}), delay)
    runs = []

    @ledger(action_ledger=led, transition_binding=NIM, reconciler=provider)
    async def send(to: str) -> dict:
        runs.append(to)
        async with side_effect():
            record_external_operation("msg-1")
            raise ConnectionError("reply lost")

    with pytest.raises(ConnectionError):
        await send("a@x", tool_call_id="c")
    if settles:
        assert await send("a@x", tool_call_id="c") == {"sent": "msg-1"}
    else:
        with pytest.raises(LedgerHardBlockError):
            await send("a@x", tool_call_id="c")
    assert runs == ["a@x"] and provider.asked == 1
