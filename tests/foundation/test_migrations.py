"""Migrations: a blank database goes up to head, down to base and up again, by every entry point."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg
import pytest

from mycelium.db import migrate, schema
from mycelium.db.releases import FIRST, RELEASES
from mycelium.db.schema import SchemaRefused
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


@pytest.mark.slow
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


async def test_each_release_steps_down_and_back_up_to_a_fresh_build_s_catalogue(pg_server, empty_dsn):
    # Compared with a build from sql/ alone, not with the first upgrade: a migration from scratch
    # runs every revision and the code in one transaction, and code an older revision created there
    # and sql/ no longer defines would be in both migrated catalogues alike.
    await install(empty_dsn)
    fresh = await catalogue(empty_dsn)
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    try:
        await asyncio.to_thread(migrate.upgrade, dsn)
        migrated = await catalogue(dsn)
        assert migrated == fresh, "\n".join(differences(migrated, fresh)[:40])
        for version, revision in reversed(RELEASES.items()):
            await asyncio.to_thread(migrate.downgrade, dsn, revision)
            assert await migrate.current_revision(dsn) == revision, version
            # an object the step left behind makes the way back up fail ("already exists")
            await asyncio.to_thread(migrate.upgrade, dsn)
            migrated = await catalogue(dsn)
            assert migrated == fresh, version + "\n" + "\n".join(differences(migrated, fresh)[:40])
    finally:
        await pg_server.drop_database(name)


def between_releases() -> str:
    """A revision after the first release that no release ends at."""
    chain = schema.revisions()
    ends = set(RELEASES.values())
    return next(rev for rev in chain[chain.index(RELEASES[FIRST]) + 1:] if rev not in ends)


async def test_a_downgrade_to_a_revision_between_releases_is_refused_in_one_line_and_changes_nothing(db_dsn):
    target = between_releases()
    with pytest.raises(SchemaRefused, match=f"^{target} is not a release revision: .*0.1.0 \\(0005_settings\\)"):
        await asyncio.to_thread(migrate.downgrade, db_dsn, target)
    with pytest.raises(SchemaRefused, match="unknown schema revision 'nope'"):
        await asyncio.to_thread(migrate.downgrade, db_dsn, "nope")
    with pytest.raises(SchemaRefused, match="not a release revision"):
        await asyncio.to_thread(migrate.upgrade, db_dsn, target)
    assert await migrate.current_revision(db_dsn) == schema.head()
    before = await catalogue(db_dsn)
    # the CLI says it in one line, before it asks anything
    out = subprocess.run([sys.executable, "-m", "mycelium.cli.main", "db", "downgrade", target, "--yes",
                          "--database-url", db_dsn], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "is not a release revision" in out.stderr, out.stderr
    # Alembic's own command gets there by itself, and its transaction leaves the database as it was
    env = {**os.environ, "DATABASE_URL": db_dsn}
    out = subprocess.run([sys.executable, "-m", "alembic", "downgrade", target], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "is not a release revision" in out.stderr
    assert await migrate.current_revision(db_dsn) == schema.head()
    assert await catalogue(db_dsn) == before
