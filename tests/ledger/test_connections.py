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
