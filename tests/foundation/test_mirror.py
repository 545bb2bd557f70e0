"""The markdown mirror follows committed changes, resumes from its stored position, and never
skips a late commit or writes a file twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from mycelium.db.pool import setup_connection
from mycelium.mirror.follower import Applied, apply_pending, export_all
from mycelium.mirror.render import parse_file
from mycelium.verbs import verbs_on


@pytest.fixture
async def follower_conn(db_dsn):
    conn = await asyncpg.connect(db_dsn)
    await setup_connection(conn)
    yield conn
    await conn.close()


async def w(conn, room, key, text, by="ana"):
    await conn.execute("SELECT * FROM mycelium.write_memory($1, $2, to_jsonb($3::text), $4)", room, key, text, by)


async def test_a_memory_appears_as_a_markdown_file_with_its_frontmatter(admin_conn, follower_conn, tmp_path):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute(
        """SELECT * FROM mycelium.write_memory('atlas', 'notes/a', '"Body text"', 'ana',
                                               p_tags => '{x}', p_meta => '{"status": "draft"}')""")
    applied = await apply_pending(verbs_on(follower_conn), tmp_path)
    assert applied.written == 1
    path = tmp_path / "rooms" / "atlas" / "notes" / "a.md"
    parsed = parse_file(path.read_text())
    assert parsed.body == "Body text"
    assert parsed.frontmatter["key"] == "notes/a" and parsed.frontmatter["version"] == 1
    assert parsed.frontmatter["tags"] == ["x"] and parsed.frontmatter["status"] == "draft"
    episode = await admin_conn.fetchval("SELECT episode FROM mycelium.memories")
    assert parsed.frontmatter["episode"] == episode


async def test_deletes_remove_files_and_a_deleted_room_removes_its_folder(admin_conn, follower_conn, tmp_path):
    for room in ("a", "b"):
        await admin_conn.execute("SELECT mycelium.create_room($1)", room)
        await w(admin_conn, room, "x/one", "1")
        await w(admin_conn, room, "two", "2")
    await apply_pending(verbs_on(follower_conn), tmp_path)
    await admin_conn.execute("SELECT * FROM mycelium.delete_memory('a', 'x/one')")
    await admin_conn.execute("SELECT mycelium.delete_room('b')")
    await apply_pending(verbs_on(follower_conn), tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.md")) == ["rooms/a/two.md"]
    assert not (tmp_path / "rooms" / "a" / "x").exists()
    assert not (tmp_path / "rooms" / "b").exists()


async def drained(verbs, folder, expected: int, batch: int) -> Applied:
    """What the follower applied until ``expected`` changes were: it stops short of a transaction
    still open anywhere on the server (another test's, on another database), so it may take more
    than one call when tests run side by side."""
    total = Applied()
    for _ in range(100):
        got = await apply_pending(verbs, folder, batch=batch)
        total.written, total.removed = total.written + got.written, total.removed + got.removed
        total.changes += got.changes
        if total.changes >= expected:
            break
        await asyncio.sleep(0.05)
    return total


async def test_the_mirror_resumes_after_a_restart_without_gaps_or_duplicates(admin_conn, db_dsn, tmp_path):
    await admin_conn.execute("SELECT mycelium.create_room('r')")
    for i in range(10):
        await w(admin_conn, "r", f"k{i}", f"v{i}")
    first = await asyncpg.connect(db_dsn)
    await setup_connection(first)
    assert (await drained(verbs_on(first), tmp_path, 10, batch=4)).written == 10
    await first.close()  # the follower process goes away
    for i in range(5, 15):
        await w(admin_conn, "r", f"k{i}", f"v{i}-new")
    await admin_conn.execute("SELECT * FROM mycelium.delete_memory('r', 'k0')")
    second = await asyncpg.connect(db_dsn)
    await setup_connection(second)
    applied = await drained(verbs_on(second), tmp_path, 11, batch=3)
    assert applied.written == 10 and applied.removed == 1  # exactly the changes since the stored position
    again = await apply_pending(verbs_on(second), tmp_path)
    assert (again.written, again.removed, again.changes) == (0, 0, 0)
    await second.close()
    files = {p.stem: parse_file(p.read_text()).body for p in (tmp_path / "rooms" / "r").glob("*.md")}
    assert files == {**{f"k{i}": f"v{i}" for i in range(1, 5)}, **{f"k{i}": f"v{i}-new" for i in range(5, 15)}}
    # the outbox is pruned behind the follower
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.changes") <= 1


async def test_a_slow_commit_is_never_skipped(admin_conn, db_dsn, follower_conn, tmp_path):
    await admin_conn.execute("SELECT mycelium.create_room('r')")
    slow = await asyncpg.connect(db_dsn)
    try:
        tx = slow.transaction()
        await tx.start()
        await w(slow, "r", "slow", "started first, commits last")
        await w(admin_conn, "r", "fast", "committed first")
        await apply_pending(verbs_on(follower_conn), tmp_path)  # must not move past the open transaction
        await tx.commit()
    finally:
        await slow.close()
    await apply_pending(verbs_on(follower_conn), tmp_path)
    assert sorted(p.stem for p in (tmp_path / "rooms" / "r").glob("*.md")) == ["fast", "slow"]


async def test_export_rebuilds_the_mirror_from_scratch(admin_conn, follower_conn, tmp_path):
    await admin_conn.execute("SELECT mycelium.create_room('r')")
    await w(admin_conn, "r", "a/b", "x")
    stray = tmp_path / "rooms" / "r" / "gone.md"
    stray.parent.mkdir(parents=True)
    stray.write_text("stale")
    result = await export_all(verbs_on(follower_conn), tmp_path)
    assert (result.written, result.removed) == (1, 1)
    assert (tmp_path / "rooms" / "r" / "a" / "b.md").exists() and not stray.exists()
    assert (await export_all(verbs_on(follower_conn), tmp_path)).written == 0


async def test_the_hub_worker_writes_files_as_changes_commit(db_dsn, settings_for, tmp_path):
    from mycelium.hub import Hub
    from mycelium.workers.catalogue import default_loops

    settings = settings_for(db_dsn, mirror=True, embedder="none", data_dir=tmp_path)
    hub = Hub(settings, loops=default_loops(settings))
    await hub.start()
    try:
        await hub.db.execute("SELECT mycelium.create_room('live')")
        await hub.db.execute("SELECT * FROM mycelium.write_memory('live', 'n', '\"hello\"', 'ana')")
        path: Path = tmp_path / "rooms" / "live" / "n.md"
        for _ in range(100):
            if path.exists():
                break
            await asyncio.sleep(0.05)
        assert parse_file(path.read_text()).body == "hello"
    finally:
        await hub.stop()
