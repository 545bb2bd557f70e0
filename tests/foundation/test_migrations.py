"""Migrations: a blank database goes up to head, down to base and up again, by every entry point."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg

from mycelium.db import migrate
from tests.support import REPO_ROOT


async def objects_in_schema(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(
            """SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'mycelium'""")
    finally:
        await conn.close()


async def test_a_blank_database_migrates_up_down_and_up_again(pg_server):
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        assert await migrate.current_revision(dsn) == migrate.head_revision()
        tables = await objects_in_schema(dsn)
        assert tables > 10
        await asyncio.to_thread(migrate.downgrade, dsn, "base")
        assert await migrate.current_revision(dsn) is None
        assert await objects_in_schema(dsn) == 0
        await asyncio.to_thread(migrate.upgrade, dsn)
        assert await objects_in_schema(dsn) == tables
    finally:
        await pg_server.drop_database(name)


async def test_alembic_and_the_cli_migrate_too(pg_server):
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    env = {**os.environ, "DATABASE_URL": dsn}
    try:
        subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=REPO_ROOT, env=env,
                       check=True, capture_output=True)
        assert await migrate.current_revision(dsn) == migrate.head_revision()
        subprocess.run([sys.executable, "-m", "alembic", "downgrade", "base"], cwd=REPO_ROOT, env=env,
                       check=True, capture_output=True)
        assert await migrate.current_revision(dsn) is None
        out = subprocess.run([sys.executable, "-m", "mycelium.cli.main", "db", "upgrade", "--database-url", dsn],
                             check=True, capture_output=True, text=True)
        assert "head" in out.stdout
        assert await migrate.current_revision(dsn) == migrate.head_revision()
        out = subprocess.run([sys.executable, "-m", "mycelium.cli.main", "db", "current", "--database-url", dsn],
                             check=True, capture_output=True, text=True)
        assert out.stdout.strip() == migrate.head_revision()
    finally:
        await pg_server.drop_database(name)


async def schema_inventory(dsn: str) -> dict[str, int]:
    """How many relations, functions and types the schema holds."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            """SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'mycelium'::regnamespace) AS relations,
                      (SELECT count(*) FROM pg_proc WHERE pronamespace = 'mycelium'::regnamespace) AS functions,
                      (SELECT count(*) FROM pg_type WHERE typnamespace = 'mycelium'::regnamespace) AS types""")
        return dict(row)
    finally:
        await conn.close()


async def test_each_revision_steps_down_and_back_up_leaving_nothing_behind(pg_server):
    from alembic.script import ScriptDirectory

    revisions = list(ScriptDirectory.from_config(migrate.alembic_config("postgresql://x@/x")).walk_revisions())
    assert len(revisions) >= 5
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        full = await schema_inventory(dsn)
        for rev in revisions[:-1]:  # the first revision's downgrade is the base test above
            await asyncio.to_thread(migrate.downgrade, dsn, rev.down_revision)
            assert await migrate.current_revision(dsn) == rev.down_revision
            # an object the step left behind makes the way back up fail ("already exists")
            await asyncio.to_thread(migrate.upgrade, dsn)
            assert await schema_inventory(dsn) == full, rev.revision
    finally:
        await pg_server.drop_database(name)
