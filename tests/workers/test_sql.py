"""The SQL of the background loops, tried from psql and as the app role: heartbeats, the report,
forgetting stale workers, and the indexers' claims."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from mycelium.db.pool import setup_connection


@pytest.fixture
async def app_conn(db_dsn):
    conn = await asyncpg.connect(db_dsn)
    await setup_connection(conn, "mycelium_app")
    assert await conn.fetchval("SELECT current_user") == "mycelium_app"
    try:
        yield conn
    finally:
        await conn.close()


def loop(name: str, **fields) -> dict:
    return {"loop": name, "state": "running", "leader": False, "interval_seconds": 1.0, "failures": 0,
            "stuck": False, **fields}


async def beat(conn, worker: uuid.UUID, *loops: dict, kind: str = "worker") -> int:
    return await conn.fetchval(
        "SELECT mycelium.beat_worker($1, $2, 'host-a', 4242, now() - interval '1 minute', $3::jsonb)",
        worker, kind, list(loops))


async def test_the_app_role_writes_heartbeats_through_the_functions_only(app_conn):
    worker = uuid.uuid4()
    assert await beat(app_conn, worker, loop("indexer"), loop("sweeper", leader=True)) == 2
    for sql in ("INSERT INTO mycelium.worker_loops (worker_id, loop, kind, host, pid, started_at, state, "
                "interval_seconds) VALUES (gen_random_uuid(), 'x', 'worker', 'h', 1, now(), 'running', 1)",
                "UPDATE mycelium.worker_loops SET state = 'running'",
                "DELETE FROM mycelium.worker_loops"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await app_conn.execute(sql)
    assert await app_conn.fetchval("SELECT mycelium.stop_worker($1)", worker) == 2
    # a late beat (the heartbeat task racing the shutdown) does not bring a stopped worker back
    assert await beat(app_conn, worker, loop("indexer", state="failing", failures=3)) == 0
    rows = await app_conn.fetch("SELECT * FROM mycelium.worker_report() WHERE worker_id = $1", worker)
    assert [(r["loop"], r["state"], r["leader"], r["alive"]) for r in rows] == [
        ("indexer", "stopped", False, False), ("sweeper", "stopped", False, False)]


async def test_a_beat_refuses_what_is_not_a_loop_report(app_conn):
    with pytest.raises(asyncpg.PostgresError) as refused:
        await app_conn.fetchval("SELECT mycelium.beat_worker(gen_random_uuid(), 'worker', 'h', 1, now(), '{}')")
    assert refused.value.sqlstate == "MY422"
    with pytest.raises(asyncpg.CheckViolationError):
        await beat(app_conn, uuid.uuid4(), loop("indexer", state="sleeping"))
    with pytest.raises(asyncpg.CheckViolationError):
        await beat(app_conn, uuid.uuid4(), loop("indexer"), kind="robot")


async def test_the_report_says_who_is_alive_and_leads_only_while_the_lock_is_held(app_conn, admin_conn, db_dsn):
    holder = await asyncpg.connect(db_dsn)
    try:
        assert await holder.fetchval("SELECT pg_try_advisory_lock(hashtext('test.lead'))")
        pid = holder.get_server_pid()
        quiet, gone = uuid.uuid4(), uuid.uuid4()
        await beat(app_conn, quiet, loop("sweeper", leader=True, backend_pid=pid), loop("mirror", stuck=True))
        await beat(app_conn, gone, loop("sweeper", leader=True, backend_pid=admin_conn.get_server_pid()))
        by = {(str(r["worker_id"]), r["loop"]): r for r in await app_conn.fetch("SELECT * FROM mycelium.worker_report()")}
        assert by[(str(quiet), "sweeper")]["leader"] is True
        assert by[(str(quiet), "mirror")]["stuck"] is True
        # says it leads, but its connection holds no advisory lock (its session ended, the pid reused)
        assert by[(str(gone), "sweeper")]["leader"] is False
        # the leader's connection goes away: its lock with it, and the report stops calling it the leader
        await holder.close()
        await asyncio.sleep(0.2)
        assert await app_conn.fetchval(
            "SELECT leader FROM mycelium.worker_report() WHERE worker_id = $1 AND loop = 'sweeper'", quiet) is False
    finally:
        if not holder.is_closed():
            await holder.close()
    # a process that stopped beating (killed, hung) is not alive, and neither leads nor is stuck
    await admin_conn.execute(
        "UPDATE mycelium.worker_loops SET heartbeat_at = now() - interval '1 minute' WHERE worker_id = $1", quiet)
    rows = await app_conn.fetch("SELECT * FROM mycelium.worker_report(interval '30 seconds') WHERE worker_id = $1",
                                quiet)
    assert {(r["loop"], r["alive"], r["stuck"]) for r in rows} == {("sweeper", False, False), ("mirror", False, False)}
    assert all(r["alive"] for r in await app_conn.fetch(
        "SELECT * FROM mycelium.worker_report(interval '30 seconds') WHERE worker_id = $1", gone))


async def test_forgetting_removes_only_the_rows_nobody_beat_for_long(app_conn, admin_conn):
    old, fresh = uuid.uuid4(), uuid.uuid4()
    await beat(app_conn, old, loop("indexer"), loop("receipts"))
    await beat(app_conn, fresh, loop("indexer"))
    await admin_conn.execute(
        "UPDATE mycelium.worker_loops SET heartbeat_at = now() - interval '2 hours' WHERE worker_id = $1", old)
    assert await app_conn.fetchval("SELECT mycelium.forget_stale_workers(interval '1 hour')") == 2
    assert [r["worker_id"] for r in await app_conn.fetch("SELECT worker_id FROM mycelium.worker_loops")] == [fresh]


async def missing(conn, n: int, room: str = "vec") -> list[str]:
    await conn.execute("SELECT mycelium.create_room($1)", room)
    keys = [f"note/{i:03}" for i in range(n)]
    for key in keys:
        await conn.execute("SELECT 1 FROM mycelium.write_memory($1, $2, $3::jsonb, 'psql')", room, key,
                           {"text": f"text of {key}"})
    return keys


async def claim(conn, n: int) -> list[str]:
    return [r["key"] for r in await conn.fetch("SELECT * FROM mycelium.claim_missing_vectors($1)", n)]


async def store(conn, room: str, key: str) -> bool:
    version = await conn.fetchval("SELECT version FROM mycelium.memories WHERE room = $1 AND key = $2", room, key)
    return await conn.fetchval("SELECT mycelium.set_embedding($1, $2, $3, array_fill(0.1, ARRAY[384])::vector)",
                               room, key, version)


async def advisory_locks(conn) -> int:
    return await conn.fetchval("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'")


async def test_indexers_claim_disjoint_batches_and_a_stored_vector_is_never_claimed_again(admin_conn, db_dsn):
    keys = await missing(admin_conn, 10)
    a, b, c = [await asyncpg.connect(db_dsn) for _ in range(3)]
    for conn in (a, b, c):
        await setup_connection(conn, "mycelium_app")
    try:
        first = await claim(a, 4)
        second = await claim(b, 4)
        third = await claim(c, 10)
        assert (first, second, third) == (keys[:4], keys[4:8], keys[8:])
        for key in first:
            assert await store(a, "vec", key)
        assert await a.fetchval("SELECT mycelium.release_vector_claims($1, $2)", ["vec"] * 4, first) == 4
        assert await advisory_locks(a) == 0
        await c.fetchval("SELECT mycelium.release_vector_claims($1, $2)", ["vec"] * 2, third)
        # a let go once its vectors had committed: c finds them stored, and b's still held
        assert await claim(c, 10) == keys[8:]
        assert await advisory_locks(c) == 2
        await c.fetchval("SELECT mycelium.release_vector_claims($1, $2)", ["vec"] * 2, third)
        # b dies without giving its claims back: they are free again at once
        await b.close()
        await asyncio.sleep(0.2)
        assert await claim(c, 10) == keys[4:]
    finally:
        for conn in (a, b, c):
            if not conn.is_closed():
                await conn.close()


async def test_a_vector_moved_on_while_claimed_is_claimed_again_for_the_new_version(admin_conn, db_dsn):
    (key,) = await missing(admin_conn, 1)
    conn = await asyncpg.connect(db_dsn)
    await setup_connection(conn, "mycelium_app")
    try:
        (row,) = await conn.fetch("SELECT * FROM mycelium.claim_missing_vectors(5)")
        assert row["content"] == f"text of {key}"
        await admin_conn.execute("SELECT 1 FROM mycelium.write_memory('vec', $1, $2::jsonb, 'psql')", key,
                                 {"text": "new text"})
        stored = await conn.fetchval("SELECT mycelium.set_embedding('vec', $1, $2, array_fill(0.1, ARRAY[384])::vector)",
                                     key, row["version"])
        assert stored is False  # computed from the old text: not stored
        await conn.fetchval("SELECT mycelium.release_vector_claims($1, $2)", ["vec"], [key])
        (again,) = await conn.fetch("SELECT * FROM mycelium.claim_missing_vectors(5)")
        assert (again["version"], again["content"]) == (row["version"] + 1, "new text")
    finally:
        await conn.close()
