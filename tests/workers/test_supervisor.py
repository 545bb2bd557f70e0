"""The supervisor, in one process on a real database: a failing loop backs off and shows as failing
until it recovers, a loop that stops making progress shows as stuck, a lead passes when its holder
stops, and a stopped process marks its rows stopped."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from mycelium.hub import Hub
from mycelium.verbs import HUB_PROCESS
from mycelium.workers.loop import STUCK_INTERVALS, Loop, LoopContext, backoff_seconds
from mycelium.workers.supervisor import LEASE_SECONDS
from tests.workers.conftest import lock_holders


async def forever() -> None:
    await asyncio.Event().wait()


async def eventually(check, timeout: float = 15.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s (last: {got!r})")
        await asyncio.sleep(step)


@pytest.fixture
def make_hub(db_dsn, settings_for):
    """Start a hub (no HTTP) running the given loops; each test stops what it started."""
    async def make(*loops: Loop) -> Hub:
        hub = Hub(settings_for(db_dsn, embedder="none"), loops=list(loops))
        await hub.start()
        return hub

    return make


def test_the_backoff_doubles_from_a_second_and_is_capped():
    for failures, base in ((1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (40, 30.0)):
        for _ in range(20):
            assert base * 0.9 <= backoff_seconds(failures) <= base * 1.1


@pytest.mark.slow
async def test_a_failing_loop_backs_off_and_shows_as_failing_until_it_succeeds(make_hub, admin_conn):
    attempts: list[float] = []

    async def flaky(ctx: LoopContext) -> None:
        attempts.append(time.monotonic())
        if len(attempts) <= 3:
            raise OSError(f"disk full ({len(attempts)})")
        ctx.succeeded()
        await forever()

    hub = await make_hub(Loop("flaky", flaky, interval=60.0))
    try:
        status = hub.supervisor.statuses["flaky"]

        async def failing_twice():
            row = await admin_conn.fetchrow("SELECT * FROM mycelium.worker_loops WHERE loop = 'flaky'")
            return row if row and row["failures"] == 2 else None

        row = await eventually(failing_twice)
        assert (row["state"], row["last_error"]) == ("failing", "OSError: disk full (2)")
        assert row["last_success_at"] is None and row["last_error_at"] is not None
        assert row["worker_id"] == hub.supervisor.worker_id and row["kind"] == "hub"

        async def recovered():
            return status.state == "running" and status.failures == 0
        await eventually(recovered)
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert gaps[0] >= 0.85 and gaps[1] >= 1.75 and gaps[2] >= 3.5, gaps
        assert status.last_error == "OSError: disk full (3)" and status.last_success_at is not None
        row = await eventually(lambda: admin_conn.fetchrow(
            "SELECT * FROM mycelium.worker_loops WHERE loop = 'flaky' AND state = 'running'"))
        assert row["failures"] == 0 and row["last_error"] == "OSError: disk full (3)"
    finally:
        await hub.stop()
    assert await admin_conn.fetchval("SELECT state FROM mycelium.worker_loops WHERE loop = 'flaky'") == "stopped"


async def test_a_loop_that_stops_succeeding_is_stuck(make_hub, admin_conn):
    async def hangs(ctx: LoopContext) -> None:
        ctx.succeeded()
        await forever()  # a query that never returns, an embedder that never answers

    hub = await make_hub(Loop("hangs", hangs, interval=0.2))
    try:
        status = hub.supervisor.statuses["hangs"]
        await eventually(lambda: asyncio.sleep(0, result=status.last_success_at is not None), step=0.01)
        assert not status.stuck and status.state == "running"
        await asyncio.sleep(0.2 * STUCK_INTERVALS + 0.2)
        assert status.stuck and status.state == "running"
        assert await eventually(lambda: admin_conn.fetchval(
            "SELECT stuck FROM mycelium.worker_report() WHERE loop = 'hangs'"))
    finally:
        await hub.stop()


async def test_a_once_loop_is_done_after_its_success(make_hub, admin_conn):
    runs: list[int] = []

    async def once(ctx: LoopContext) -> None:
        runs.append(1)
        ctx.succeeded()

    hub = await make_hub(Loop("once", once, interval=0.1, once=True))
    try:
        await eventually(lambda: admin_conn.fetchval("SELECT state = 'done' FROM mycelium.worker_loops WHERE loop = 'once'"))
        await asyncio.sleep(1.0)
        assert runs == [1] and not hub.supervisor.statuses["once"].stuck
    finally:
        await hub.stop()


async def test_one_process_leads_and_the_lead_passes_when_it_stops(make_hub, admin_conn):
    async def lead(ctx: LoopContext) -> None:
        while True:
            await ctx.verbs.call(HUB_PROCESS, "next_lease_expiry")  # on the leader's own connection
            ctx.succeeded()
            await asyncio.sleep(0.1)

    solo = Loop("solo", lead, interval=1.0, lead="test.solo")
    first, second = await make_hub(solo), await make_hub(solo)
    try:
        async def led():
            states = {h.supervisor.worker_id: h.supervisor.statuses["solo"] for h in (first, second)}
            return states if sorted(s.state for s in states.values()) == ["running", "waiting"] else None
        states = await eventually(led)
        leader = first if states[first.supervisor.worker_id].leader else second
        other = second if leader is first else first
        assert not states[other.supervisor.worker_id].leader
        assert await lock_holders(admin_conn, "test.solo") == [leader.supervisor.application_name("solo")]
        leader_id = leader.supervisor.worker_id
        started = time.monotonic()
        await leader.stop()
        await eventually(lambda: asyncio.sleep(0, result=other.supervisor.statuses["solo"].leader),
                         timeout=LEASE_SECONDS, step=0.02)
        assert time.monotonic() - started < LEASE_SECONDS
        assert await lock_holders(admin_conn, "test.solo") == [other.supervisor.application_name("solo")]
        # the report follows with the new leader's next beat (sent at once on the change)
        async def reported():
            rows = {r["worker_id"]: r for r in await admin_conn.fetch(
                "SELECT * FROM mycelium.worker_report() WHERE loop = 'solo'")}
            return rows if rows[other.supervisor.worker_id]["leader"] else None
        rows = await eventually(reported, timeout=5)
        assert rows[leader_id]["state"] == "stopped" and rows[leader_id]["leader"] is False
    finally:
        for hub in (first, second):
            if hub.supervisor is not None:
                await hub.stop()


async def test_a_loop_that_swallows_its_cancellation_is_cancelled_again_and_the_stop_ends(make_hub, admin_conn):
    """Python 3.11's asyncio.wait_for can swallow a cancellation that lands as its wait completes;
    a loop caught so goes on, and a stop that cancelled it once would wait for ever."""
    swallowed: list[int] = []

    async def stubborn(ctx: LoopContext) -> None:
        while True:
            try:
                ctx.succeeded()
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(1)  # as wait_for would: the first cancellation is lost

    hub = await make_hub(Loop("stubborn", stubborn, interval=0.1))
    await eventually(lambda: admin_conn.fetchval(
        "SELECT state = 'running' FROM mycelium.worker_loops WHERE loop = 'stubborn'"))
    stopping = asyncio.ensure_future(hub.stop())
    done, _ = await asyncio.wait({stopping}, timeout=10)
    assert done, "the stop still waits for the loop it cancelled once"
    await stopping
    assert swallowed == [1]
