"""Upgrades from the previous release, as an operator runs them: a database built and filled by the
release recorded in CHANGELOG.md (its code checked out from the recorded commit) upgrades to head
with every row kept and the same catalogue as a fresh install; a hub of that release keeps serving
while a hub of this one migrates and serves beside it; and a downgrade returns the database to
exactly the release's schema."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest

from mycelium.db import migrate, schema
from tests.support import REPO_ROOT
from tests.support.processes import HubProcess

pytestmark = pytest.mark.slow


def previous_release(version: str | None = None) -> tuple[str, str]:
    """(version, commit) of the newest release in CHANGELOG.md, or of the one named."""
    found = [(m.group(1), m.group(2)) for m in re.finditer(
        r"^## (\S+) — ([0-9a-f]{7,40})\b", (REPO_ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
        if version is None or m.group(1) == version]
    assert found, f"CHANGELOG.md records no release {version or ''}"
    return found[0]


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The previous release's source tree, from its recorded commit."""
    return release_tree(tmp_path_factory)


def release_tree(tmp_path_factory, version: str | None = None) -> Path:
    """A release's source tree (default the previous release's), from its recorded commit."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("needs the repository's history: run from a git clone")
    version, commit = previous_release(version)
    tree = tmp_path_factory.mktemp(f"release-{version}")
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", commit],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def release_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "service")}


def migrate_with_release(tree: Path, dsn: str, target: str = "head") -> None:
    script = ("import sys, mycelium; from mycelium.db import migrate; "
              "assert mycelium.__file__.startswith(sys.argv[3]), mycelium.__file__; "
              "migrate.upgrade(sys.argv[1], sys.argv[2])")
    done = subprocess.run([sys.executable, "-c", script, dsn, target, str(tree)], env=release_env(tree),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _catalogue_query() -> str:
    """This release's mycelium.schema_catalogue() as a function of the session (pg_temp), so a
    database whose own copy is older (a downgraded one) is described the same way."""
    text = (REPO_ROOT / "sql" / "catalogue.sql").read_text()
    start = text.index("CREATE OR REPLACE FUNCTION mycelium.schema_catalogue()")
    end = text.index("$$;", start) + 3
    return text[start:end].replace("mycelium.schema_catalogue()", "pg_temp.schema_catalogue()", 1)


async def catalogue(dsn: str) -> set[tuple[str, str, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(_catalogue_query())
        return {tuple(r) for r in await conn.fetch("SELECT kind, name, definition FROM pg_temp.schema_catalogue()")}
    finally:
        await conn.close()


async def table_rows(dsn: str, columns: dict[str, list[str]]) -> dict[str, set[str]]:
    """Each given table of schema mycelium: its rows over the given columns, as text."""
    conn = await asyncpg.connect(dsn)
    try:
        out: dict[str, set[str]] = {}
        for table, cols in columns.items():
            listed = ", ".join(f'"{c}"' for c in cols)
            out[table] = {r[0] for r in await conn.fetch(f'SELECT t::text FROM (SELECT {listed} FROM mycelium."{table}") t')}
        return out
    finally:
        await conn.close()


def lost(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, set[str]]:
    return {table: rows - after.get(table, set()) for table, rows in before.items() if rows - after.get(table, set())}


async def table_columns(dsn: str) -> dict[str, list[str]]:
    conn = await asyncpg.connect(dsn)
    try:
        return {r["relname"]: list(r["cols"]) for r in await conn.fetch(
            """SELECT c.relname, array_agg(a.attname::text ORDER BY a.attnum) AS cols FROM pg_class c
               JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
               WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind = 'r' GROUP BY c.relname""")}
    finally:
        await conn.close()


async def use_the_main_verbs(client: httpx.AsyncClient, url: str, tag: str) -> None:
    """Rooms, memories (with a link), search, the board (a task and its claim), a message, a
    ledgered transition: each answered as it should be."""
    room = f"up-{tag}"

    async def post(path: str, body: dict, *expected: int) -> dict:
        r = await client.post(url + path, json=body)
        assert r.status_code in (expected or (200, 201)), f"{path}: {r.status_code} {r.text}"
        return r.json()

    await post("/api/rooms", {"name": room}, 201)
    await post(f"/api/rooms/{room}/memory", {"items": [
        {"key": "notes/plan", "value": f"the plan for {tag}, see [[notes/risks]]", "created_by": "nova"},
        {"key": "notes/risks", "value": "the risks", "created_by": "nova"}]})
    found = await post(f"/api/rooms/{room}/memory/search", {"query": "plan"})
    assert "notes/plan" in str(found)
    task = await post(f"/api/rooms/{room}/tasks", {"title": f"Ship {tag}", "handle": "julia"}, 201)
    claim = await post(f"/api/rooms/{room}/assignments/claim", {"key": task["key"], "handle": "nova"})
    assert "nova" in str(claim)
    await post(f"/api/rooms/{room}/messages", {"sender_handle": "nova", "content": f"on it @julia ({tag})"})
    rid = f"pay-{tag}"
    first = await post("/api/transitions/claim", {
        "request_id": rid, "transition_key": "k-" + rid, "tool": "pay", "owner": "w:1",
        "side_effect_class": "non_idempotent_mutate", "agent_id": "agent-1"})
    assert first["action"] == "run"
    done = await post("/api/transitions/complete",
                      {"request_id": rid, "owner": "w:1", "fence": 1, "result": {"ok": tag}})
    assert done["terminal_outcome"] == "COMPLETED"
    r = await client.get(f"{url}/api/rooms/{room}/memory/notes/plan")
    assert r.status_code == 200 and tag in r.text


async def test_a_release_database_upgrades_in_place_while_its_hub_keeps_serving(release, pg_server, tmp_path):
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    fresh_name = await pg_server.create_database(template="template1")
    fresh = pg_server.dsn(fresh_name)
    old = new = None
    try:
        await asyncio.to_thread(migrate_with_release, release, dsn)
        released_at = await migrate.current_revision(dsn)
        assert released_at in schema.revisions()
        # a hub of the release, filled through its own HTTP verbs
        old = HubProcess(data_dir=tmp_path / "old", database_url=dsn, env=release_env(release))
        old.wait_ready()
        async with httpx.AsyncClient(timeout=30) as client:
            await use_the_main_verbs(client, old.url, "before")
            # every table's rows but the workers' heartbeats, which the running hubs rewrite
            kept_columns = {t: cols for t, cols in (await table_columns(dsn)).items() if t != "worker_loops"}
            before = await table_rows(dsn, kept_columns)
            assert len(before["memories"]) >= 2 and len(before["transitions"]) >= 1 and len(before["messages"]) >= 3

            # this release's hub migrates on start and serves beside the old one
            new = HubProcess(data_dir=tmp_path / "new", database_url=dsn)
            health = new.wait_ready()
            assert health["migration"] == schema.head()
            assert await migrate.current_revision(dsn) == schema.head()
            # the hubs keep working (signing receipts, say), so rows may be added; none is lost or changed
            assert lost(before, await table_rows(dsn, kept_columns)) == {}

            await use_the_main_verbs(client, old.url, "old-after")
            await use_the_main_verbs(client, new.url, "new-after")
            r = await client.get(old.url + "/api/rooms/up-before/memory/notes/plan")
            assert r.status_code == 200
        # same schema as a fresh install of this release
        conn = await asyncpg.connect(fresh)
        try:
            await schema.install(conn)
        finally:
            await conn.close()
        upgraded, installed = await catalogue(dsn), await catalogue(fresh)
        assert upgraded == installed, "\n".join(
            [f"only upgraded: {r}" for r in sorted(upgraded - installed)][:20]
            + [f"only fresh: {r}" for r in sorted(installed - upgraded)][:20])
    finally:
        for hub in (old, new):
            if hub is not None:
                hub.stop()
        await pg_server.drop_database(name)
        await pg_server.drop_database(fresh_name)


async def test_a_downgrade_returns_to_exactly_the_release_schema_and_keeps_its_rows(release, pg_server):
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    reference_name = await pg_server.create_database(template="template1")
    reference = pg_server.dsn(reference_name)
    try:
        await asyncio.to_thread(migrate_with_release, release, dsn)
        await asyncio.to_thread(migrate_with_release, release, reference)
        released_at = await migrate.current_revision(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SELECT mycelium.create_room('kept')")
            await conn.execute("""SELECT mycelium.write_memory('kept', 'notes/a', '"one"'::jsonb, 'nova')""")
        finally:
            await conn.close()
        kept_columns = await table_columns(dsn)
        before = await table_rows(dsn, kept_columns)
        await asyncio.to_thread(migrate.upgrade, dsn)
        await asyncio.to_thread(migrate.downgrade, dsn, released_at)
        assert await migrate.current_revision(dsn) == released_at
        assert await table_rows(dsn, kept_columns) == before
        downgraded, at_release = await catalogue(dsn), await catalogue(reference)
        assert downgraded == at_release, "\n".join(
            [f"only downgraded: {r}" for r in sorted(downgraded - at_release)][:20]
            + [f"only at the release: {r}" for r in sorted(at_release - downgraded)][:20])
        # and the release's own code can carry on from there
        await asyncio.to_thread(migrate_with_release, release, dsn)
    finally:
        await pg_server.drop_database(name)
        await pg_server.drop_database(reference_name)


def test_released_revisions_are_frozen(release):
    """Every revision file of the release is byte for byte what the release shipped (a code
    snapshot is not a revision: the next release's replaces it)."""
    shipped = sorted((release / "migrations" / "versions").glob("*"))
    assert shipped
    for path in shipped:
        if path.suffix in (".py", ".sql") and not path.name.endswith(".code.sql"):
            here = REPO_ROOT / "migrations" / "versions" / path.name
            assert here.exists(), f"{path.name} was released and is gone"
            assert here.read_bytes() == path.read_bytes(), f"{path.name} was released and has changed since"
