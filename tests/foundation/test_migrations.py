"""Migrations: a blank database goes up to head, down to base and up again, by every entry point."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg

from mycelium.db import migrate
from tests.support import REPO_ROOT
from tests.support.catalogue import catalogue, differences, install


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


async def test_each_revision_steps_down_and_back_up_to_a_fresh_build_s_catalogue(pg_server, empty_dsn):
    # Compared with a build from sql/ alone, not with the first upgrade: a migration from scratch
    # runs every revision and the code in one transaction, and code an older revision created there
    # and sql/ no longer defines would be in both migrated catalogues alike.
    from alembic.script import ScriptDirectory

    revisions = list(ScriptDirectory.from_config(migrate.alembic_config("postgresql://x@/x")).walk_revisions())
    assert len(revisions) >= 5
    await install(empty_dsn)
    fresh = await catalogue(empty_dsn)
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        migrated = await catalogue(dsn)
        assert migrated == fresh, "\n".join(differences(migrated, fresh)[:40])
        for rev in revisions[:-1]:  # the first revision's downgrade is the base test above
            await asyncio.to_thread(migrate.downgrade, dsn, rev.down_revision)
            assert await migrate.current_revision(dsn) == rev.down_revision
            # an object the step left behind makes the way back up fail ("already exists")
            await asyncio.to_thread(migrate.upgrade, dsn)
            migrated = await catalogue(dsn)
            assert migrated == fresh, rev.revision + "\n" + "\n".join(differences(migrated, fresh)[:40])
    finally:
        await pg_server.drop_database(name)
