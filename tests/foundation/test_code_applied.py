"""A hub start applies the database's code only when it is not already this package's, unchanged:
replicas starting beside serving ones take no locks (re-creating policies, views and triggers waits
behind every open transaction on those tables, and deadlocks with them)."""

from __future__ import annotations

import asyncio
import sys

import asyncpg
import pytest

from mycelium.db import migrate, schema


async def current(dsn: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        return await schema.code_is_current(conn)
    finally:
        await conn.close()


async def applied_at(dsn: str):
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT applied_at FROM mycelium.code_applied")
    finally:
        await conn.close()


async def test_a_migrated_and_a_fresh_database_run_this_package_s_code(db_dsn, empty_dsn):
    assert await current(db_dsn)
    from tests.support.catalogue import install

    await install(empty_dsn)
    assert await current(empty_dsn)


async def test_code_changed_by_hand_or_by_another_release_is_applied_again(db_dsn, admin_conn):
    # a function replaced in psql
    await admin_conn.execute("ALTER FUNCTION mycelium.room_known(text) COST 7")
    assert not await current(db_dsn)
    assert await migrate.upgrade_on_start(db_dsn) is True
    assert await current(db_dsn)
    # a grant revoked
    await admin_conn.execute("REVOKE EXECUTE ON FUNCTION mycelium.room_known(text) FROM mycelium_app")
    assert not await current(db_dsn)
    await asyncio.to_thread(migrate.upgrade, db_dsn)  # the CLI's upgrade repairs it too
    assert await current(db_dsn)
    # code some other package applied (its digest differs)
    await admin_conn.execute("UPDATE mycelium.code_applied SET code_digest = repeat('0', 64)")
    before = await applied_at(db_dsn)
    assert await migrate.upgrade_on_start(db_dsn) is True
    assert await applied_at(db_dsn) > before


async def test_turning_the_gate_on_is_not_a_change_of_code(db_dsn, admin_conn):
    await admin_conn.execute("SELECT mycelium.write_setting('auth.gate', 'true'::jsonb, '', 'env')")
    assert await admin_conn.fetchval(
        "SELECT relrowsecurity FROM pg_class WHERE oid = 'mycelium.messages'::regclass")
    assert await current(db_dsn)


async def test_a_hub_starting_beside_a_serving_one_applies_nothing_and_waits_for_no_lock(db_dsn, settings_for):
    from mycelium.hub import Hub

    before = await applied_at(db_dsn)
    reader = await asyncpg.connect(db_dsn)
    try:
        # a replica serving: a read of the timeline in an open transaction. Re-applying the code
        # re-creates the policies on that table (ACCESS EXCLUSIVE), which would wait for it.
        await reader.execute("BEGIN; SELECT count(*) FROM mycelium.messages")
        hub = Hub(settings_for(db_dsn, embedder="none", migrate_on_start=True))
        try:
            await asyncio.wait_for(hub.start(), timeout=60)
        finally:
            await hub.stop()
        await reader.execute("ROLLBACK")
    finally:
        await reader.close()
    assert await applied_at(db_dsn) == before


@pytest.mark.slow
async def test_the_old_way_does_wait_for_that_lock(db_dsn):
    """The test above can fail: applying the code while a reader holds the timeline does block."""
    conn = await asyncpg.connect(db_dsn)
    reader = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("UPDATE mycelium.code_applied SET code_digest = repeat('0', 64)")
        await reader.execute("BEGIN; SELECT count(*) FROM mycelium.messages")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(migrate.upgrade_on_start(db_dsn)), timeout=3)
        await reader.execute("ROLLBACK")
        # the migration then goes through (Alembic's thread was waiting for the lock)
        for _ in range(300):
            if await current(db_dsn):
                break
            await asyncio.sleep(0.1)
        assert await current(db_dsn)
    finally:
        await reader.close()
        await conn.close()


async def test_replicas_starting_together_on_stale_code_apply_it_once(db_dsn):
    conn = await asyncpg.connect(db_dsn)
    lock = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("UPDATE mycelium.code_applied SET code_digest = repeat('0', 64)")

        async def writes() -> int:  # rows the upserts of code_applied wrote (flushed as backends exit)
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            return await conn.fetchval(
                "SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relid = 'mycelium.code_applied'::regclass")

        async def others() -> int:
            return await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> ALL ($1)",
                [conn.get_server_pid(), lock.get_server_pid()])

        # this backend's own update counts before the starts: flushed now, not whenever it idles
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await conn.execute("SELECT 1")
        before = await writes()
        # both replicas find the code stale, then queue for the install lock the test holds
        await lock.execute("SELECT pg_advisory_lock($1)", schema.INSTALL_LOCK)
        # (processes, as replicas are: Alembic's context is one per process)
        script = ("import asyncio, sys; from mycelium.db import migrate; "
                  "print(asyncio.run(migrate.upgrade_on_start(sys.argv[1])))")
        starts = [asyncio.create_task(asyncio.create_subprocess_exec(
            sys.executable, "-c", script, db_dsn, stdout=asyncio.subprocess.PIPE)) for _ in range(2)]
        procs = await asyncio.gather(*starts)
        for _ in range(600):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            if waiting == 2:
                break
            await asyncio.sleep(0.05)
        assert waiting == 2
        await lock.execute("SELECT pg_advisory_unlock($1)", schema.INSTALL_LOCK)
        outs = await asyncio.gather(*(asyncio.wait_for(p.communicate(), 120) for p in procs))
        assert [o[0].decode().strip() for o in outs] == ["True", "True"]
        assert [p.returncode for p in procs] == [0, 0]
        assert await current(db_dsn)
        for _ in range(200):
            if await others() == 0:
                break
            await asyncio.sleep(0.05)
        # the second found the code applied once it had the lock, and applied nothing
        assert await writes() - before == 1
    finally:
        await lock.close()
        await conn.close()
