"""Filing a task never lands on an existing row: a title gets a fresh key, an explicit key that is
taken is refused, and two connections filing the same title at once get two rows."""

from __future__ import annotations

import asyncio
import re

import asyncpg

from tests.board.conftest import ROOM, episode, notices, refusal, task


async def test_the_same_title_twice_files_two_rows_and_leaves_the_first_untouched(client, room, admin_conn):
    first = (await client.post(f"/api/rooms/{room}/tasks", json={"title": "Write migration", "handle": "julia"}))
    assert first.status_code == 201, first.text
    await admin_conn.execute("SELECT 1 FROM mycelium.write_fields($1, 'work/write-migration', 'julia', $2)",
                             room, {"status": "resolved"})
    keys = []
    for title in ("Write migration", "write  MIGRATION!", "Write migration"):
        r = await client.post(f"/api/rooms/{room}/tasks", json={"title": title, "handle": "bob"})
        assert r.status_code == 201, r.text
        keys.append(r.json()["key"])
    assert keys == ["work/write-migration-2", "work/write-migration-3", "work/write-migration-4"]
    row = await admin_conn.fetchrow("SELECT * FROM mycelium.memories WHERE room = $1 AND key = 'work/write-migration'",
                                    room)
    assert (row["version"], row["meta"]["status"], row["created_by"]) == (2, "resolved", "julia")
    assert len({await episode(admin_conn, k) for k in ["work/write-migration", *keys]}) == 4
    assert len(await notices(admin_conn, subkind="filed")) == 4


async def test_titles_without_slug_characters_get_short_unique_keys(client, room, admin_conn):
    keys = []
    for title in ("!!!", "🚀🚀", "!!!"):
        r = await client.post(f"/api/rooms/{room}/tasks", json={"title": title, "handle": "julia"})
        assert r.status_code == 201, r.text
        keys.append(r.json()["key"])
    assert len(set(keys)) == 3
    for k in keys:
        assert re.fullmatch(r"work/task-[0-9a-f]{8}", k), k


async def test_an_explicit_key_that_exists_is_refused_naming_it(client, room, admin_conn):
    r = await client.post(f"/api/rooms/{room}/tasks", json={"title": "A", "handle": "julia", "key": "work/a"})
    assert r.status_code == 201, r.text
    r = await client.post(f"/api/rooms/{room}/tasks", json={"title": "Other", "handle": "bob", "key": "work/a"})
    assert r.status_code == 409, r.text
    assert r.json()["error"] == "task_exists"
    assert "work/a" in r.json()["message"] and r.json()["key"] == "work/a"
    status, detail, _ = await refusal(admin_conn, "SELECT * FROM mycelium.create_task($1, 'x', 'bob', 'work/a')", room)
    assert (status, detail["error"], detail["key"]) == (409, "task_exists", "work/a")
    value = await admin_conn.fetchval("SELECT value FROM mycelium.memories WHERE room = $1 AND key = 'work/a'", room)
    assert value == {"text": "# A\n"}


async def test_two_connections_filing_the_same_title_at_once_get_two_rows(db_dsn, admin_conn, room):
    conns = [await asyncpg.connect(db_dsn) for _ in range(2)]
    try:
        for c in conns:
            await c.execute("BEGIN")
        first = await conns[0].fetchval("SELECT key FROM mycelium.create_task($1, 'Race', 'julia')", room)
        # the second filer waits on the first's transaction, then sees its row and takes the next key
        second = asyncio.ensure_future(conns[1].fetchval("SELECT key FROM mycelium.create_task($1, 'Race', 'bob')",
                                                         room))
        await asyncio.sleep(0.3)
        await conns[0].execute("COMMIT")
        assert first == "work/race"
        assert await second == "work/race-2"
        await conns[1].execute("COMMIT")
    finally:
        for c in conns:
            await c.close()
    rows = await admin_conn.fetch("SELECT key, created_by FROM mycelium.memories WHERE room = $1 ORDER BY key", room)
    assert [(r["key"], r["created_by"]) for r in rows] == [("work/race", "julia"), ("work/race-2", "bob")]


async def test_many_connections_filing_one_explicit_key_at_once_file_it_once(db_dsn, admin_conn, room):
    async def file(by: str) -> str:
        conn = await asyncpg.connect(db_dsn)
        try:
            return await conn.fetchval("SELECT key FROM mycelium.create_task($1, $2, $2, 'work/once')", room, by)
        except asyncpg.PostgresError as exc:
            return exc.sqlstate or ""
        finally:
            await conn.close()

    results = await asyncio.gather(*(file(f"agent{i}") for i in range(6)))
    assert sorted(results) == ["MY409"] * 5 + ["work/once"]
    assert await admin_conn.fetchval("SELECT version FROM mycelium.memories WHERE room = $1 AND key = 'work/once'",
                                     room) == 1


async def test_a_task_is_filed_with_its_dependencies_in_one_call(client, room, admin_conn):
    await task(admin_conn, "Schema")
    await task(admin_conn, "Data")
    r = await client.post(f"/api/rooms/{room}/tasks", json={
        "title": "Review", "handle": "julia", "depends_on": ["work/schema", "work/data"]})
    assert r.status_code == 201, r.text
    assert r.json()["meta"]["depends-on"] == ["work/schema", "work/data"]
    assert r.json()["version"] == 1
    row = await admin_conn.fetchrow("SELECT waiting_on FROM mycelium.board_rows WHERE room = $1 AND key = 'work/review'",
                                    ROOM)
    assert sorted(row["waiting_on"]) == ["work/data", "work/schema"]
    r = await client.post(f"/api/rooms/{room}/tasks", json={
        "title": "Loop", "handle": "julia", "key": "work/loop", "depends_on": ["work/loop"]})
    assert r.status_code == 422, r.text
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.memories WHERE key = 'work/loop'") == 0
    r = await client.post(f"/api/rooms/{room}/tasks", json={"title": "Bad", "handle": "julia", "depends_on": "work/a"})
    assert r.status_code == 422, r.text
