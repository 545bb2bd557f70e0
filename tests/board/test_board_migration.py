"""0003_board's downgrade removes exactly what its upgrade added."""

from __future__ import annotations

import asyncio

import asyncpg

from mycelium.db import migrate

CATALOG = """
SELECT 'rel ' || c.relname FROM pg_class c WHERE c.relnamespace = 'mycelium'::regnamespace
UNION ALL SELECT 'fn ' || p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace
UNION ALL SELECT 'trg ' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
          WHERE c.relnamespace = 'mycelium'::regnamespace AND NOT t.tgisinternal
UNION ALL SELECT 'type ' || t.typname FROM pg_type t WHERE t.typnamespace = 'mycelium'::regnamespace
UNION ALL SELECT 'config ' || name FROM mycelium.config
ORDER BY 1
"""


async def catalog(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [r[0] for r in await conn.fetch(CATALOG)]
    finally:
        await conn.close()


async def test_downgrading_the_board_leaves_the_schema_as_0002_made_it(pg_server):
    before = await pg_server.create_database(template="template1")
    after = await pg_server.create_database(template="template1")
    try:
        await asyncio.to_thread(migrate.upgrade, pg_server.dsn(before), "0002_transitions")
        dsn = pg_server.dsn(after)
        await asyncio.to_thread(migrate.upgrade, dsn, "0003_board")
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SELECT mycelium.set_dependency_gate(true)")
        finally:
            await conn.close()
        assert "rel assignments" in await catalog(dsn)
        await asyncio.to_thread(migrate.downgrade, dsn, "0002_transitions")
        assert await catalog(dsn) == await catalog(pg_server.dsn(before))
        await asyncio.to_thread(migrate.upgrade, dsn, "0003_board")
        assert "rel lease_expiries" in await catalog(dsn)
    finally:
        await pg_server.drop_database(before)
        await pg_server.drop_database(after)
