"""The store's connection set: bounded, reuses a connection only in a clean state, recovers from
broken and cancelled ones."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from mycelium.ledger.connections import ConnectionSet


@pytest.fixture
async def conns(db_dsn: str):
    opened: list[asyncpg.Connection] = []

    async def connect() -> asyncpg.Connection:
        conn = await asyncpg.connect(db_dsn)
        opened.append(conn)
        return conn

    s = ConnectionSet(connect, max_size=2)
    s.opened = opened  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        await s.close()
        for conn in opened:
            conn.terminate()


async def test_concurrent_calls_never_open_more_connections_than_the_bound(conns):
    pids = await asyncio.gather(*(conns.fetchrow("SELECT pg_backend_pid(), pg_sleep(0.05)") for _ in range(6)))
    assert len({row[0] for row in pids}) <= 2
    assert len(conns.opened) <= 2


async def test_a_refused_statement_leaves_its_connection_reusable_and_outside_a_transaction(conns):
    first = (await conns.fetchrow("SELECT pg_backend_pid()"))[0]
    with pytest.raises(asyncpg.DivisionByZeroError):
        await conns.fetchrow("SELECT 1 / 0")
    # the same session answers (an aborted transaction would refuse every statement)
    assert (await conns.fetchrow("SELECT pg_backend_pid()"))[0] == first
    assert len(conns.opened) == 1


async def test_a_call_cancelled_mid_query_closes_its_connection_and_frees_its_slot(conns):
    slow = asyncio.create_task(conns.fetchrow("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.2)
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert conns.opened[0].is_closed()
    rows = await asyncio.gather(*(conns.fetchrow("SELECT 1") for _ in range(4)))
    assert [r[0] for r in rows] == [1, 1, 1, 1]


async def test_a_connection_the_server_dropped_is_replaced(conns, admin_conn):
    victim = (await conns.fetchrow("SELECT pg_backend_pid()"))[0]
    await admin_conn.fetchval("SELECT pg_terminate_backend($1)", victim)
    failures = 0
    for _ in range(2):
        try:
            row = await conns.fetchrow("SELECT pg_backend_pid()")
        except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError):
            # the dropped session may be noticed by the call that tries it (asyncpg may report the
            # socket closing mid-call as an internal client error)
            failures += 1
            continue
        assert row[0] != victim
    assert failures <= 1
    assert (await conns.fetchrow("SELECT 1"))[0] == 1


async def test_a_statement_past_the_timeout_raises_timeout_closes_its_connection_and_the_set_goes_on(db_dsn):
    opened: list[asyncpg.Connection] = []

    async def connect() -> asyncpg.Connection:
        opened.append(await asyncpg.connect(db_dsn))
        return opened[-1]

    timed = ConnectionSet(connect, max_size=2, timeout=0.3)
    try:
        with pytest.raises(TimeoutError):
            await timed.fetchrow("SELECT pg_sleep(3)")
        assert opened[0].is_closed()
        # statements that end in time are untouched, also after the timer fired once
        rows = await asyncio.gather(*(timed.fetchrow("SELECT pg_sleep(0.1), 1") for _ in range(4)))
        assert [r[1] for r in rows] == [1, 1, 1, 1]
        assert (await timed.fetchrow("SELECT 1"))[0] == 1
    finally:
        await timed.close()
        for conn in opened:
            conn.terminate()


async def test_a_caller_cancelled_while_a_timeout_is_armed_still_sees_its_own_cancellation(db_dsn):
    timed = ConnectionSet(lambda: asyncpg.connect(db_dsn), max_size=1, timeout=30)
    try:
        slow = asyncio.create_task(timed.fetchrow("SELECT pg_sleep(30)"))
        await asyncio.sleep(0.2)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert (await timed.fetchrow("SELECT 1"))[0] == 1
    finally:
        await timed.close()


async def test_the_store_reports_a_verb_past_its_timeout_as_storage_unavailable(db_dsn, admin_conn):
    from mycelium.ledger.errors import LedgerStorageUnavailableError
    from mycelium.ledger.postgres import PostgresLedgerStorage
    from mycelium.ledger.record import ClaimRequest
    from tests.ledger.conftest import claim

    await claim(admin_conn, "held", "w:1")
    store = PostgresLedgerStorage(db_dsn, max_size=1, command_timeout=0.3)
    request = ClaimRequest("held", "k-held", "pay", "w:2", "non_idempotent_mutate", agent_id="agent-1")
    try:
        async with admin_conn.transaction():  # the row is locked: the claim waits on it
            await admin_conn.execute("SELECT 1 FROM mycelium.transitions WHERE request_id = 'held' FOR UPDATE")
            with pytest.raises(LedgerStorageUnavailableError) as info:
                await store.claim(request)
            assert isinstance(info.value.__cause__, TimeoutError)
        assert (await store.claim(request)).action == "poll"  # the store goes on once the row is free
    finally:
        await store.aclose()
