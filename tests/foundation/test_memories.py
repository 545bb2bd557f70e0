"""Memories: upsert and versions, optimistic concurrency, meta, the write-once thread binding,
append-only history, and the refusals of bad input."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest


@pytest.fixture
async def room(client):
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    return "atlas"


async def write(client, room, *items, expect=201):
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": list(items)})
    assert r.status_code == expect, r.text
    return r.json()


async def test_every_write_is_an_upsert_that_bumps_the_version(client, room):
    first = (await write(client, room, {"key": "notes/a", "value": "one", "created_by": "ana"}))[0]
    assert first["version"] == 1 and first["value"] == {"text": "one"}
    second = (await write(client, room, {"key": "notes/a", "value": "two", "created_by": "bo"}))[0]
    assert second["version"] == 2
    assert second["created_by"] == "ana" and second["updated_by"] == "bo"
    assert second["episode"] == first["episode"]
    same = (await write(client, room, {"key": "notes/a", "value": "two", "created_by": "bo"}))[0]
    assert same["version"] == 3


async def test_a_stale_base_version_is_refused_with_the_current_content_and_nothing_written(client, room):
    await write(client, room, {"key": "k", "value": "v1", "created_by": "ana"})
    await write(client, room, {"key": "k", "value": "v2", "created_by": "bo", "base_version": 1})
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": [
        {"key": "k", "value": "late", "created_by": "cy", "base_version": 1}]})
    assert r.status_code == 409
    body = r.json()
    assert body["error"] == "stale_base"
    assert body["current_version"] == 2
    assert body["current_content"] == {"text": "v2"}
    assert body["updated_by"] == "bo"
    got = (await client.get(f"/api/rooms/{room}/memory/k")).json()
    assert got["version"] == 2 and got["value"] == {"text": "v2"}


async def test_base_version_zero_means_create_only(client, room):
    await write(client, room, {"key": "fresh", "value": "x", "created_by": "a", "base_version": 0})
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": [
        {"key": "fresh", "value": "y", "created_by": "a", "base_version": 0}]})
    assert r.status_code == 409 and r.json()["current_version"] == 1


async def test_two_concurrent_writers_on_one_base_give_one_winner(db_dsn, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('r')")
    await admin_conn.execute("SELECT * FROM mycelium.write_memory('r', 'k', '\"v1\"', 'a')")
    a, b = await asyncpg.connect(db_dsn), await asyncpg.connect(db_dsn)
    try:
        ta, tb = a.transaction(), b.transaction()
        await ta.start()
        await tb.start()
        await a.execute("SELECT * FROM mycelium.write_memory('r', 'k', '\"from a\"', 'a', p_base_version => 1)")
        blocked = asyncio.create_task(
            b.execute("SELECT * FROM mycelium.write_memory('r', 'k', '\"from b\"', 'b', p_base_version => 1)"))
        await asyncio.sleep(0.3)
        assert not blocked.done()  # b waits on a's row lock, it does not decide on a stale read
        await ta.commit()
        with pytest.raises(asyncpg.PostgresError) as exc:
            await blocked
        assert exc.value.sqlstate == "MY409"
        await tb.rollback()
    finally:
        await a.close()
        await b.close()
    row = await admin_conn.fetchrow("SELECT version, value FROM mycelium.memories WHERE key = 'k'")
    assert row["version"] == 2 and row["value"] == {"text": "from a"}


async def test_meta_is_kept_across_writes_and_managed_keys_are_ignored(client, room):
    await write(client, room, {"key": "k", "value": "v", "created_by": "a",
                               "meta": {"status": "draft", "owner_note": "x", "version": 99,
                                        "episode": "urn:someone:else", "created_by": "mallory"}})
    m = (await write(client, room, {"key": "k", "value": "v2", "created_by": "a",
                                    "meta": {"priority": "high", "owner_note": None}}))[0]
    assert m["meta"] == {"status": "draft", "priority": "high"}
    assert m["version"] == 2 and m["created_by"] == "a"
    assert m["episode"].startswith("urn:ioc:mycelium:episode:atlas:")
    assert "episode" not in m["meta"]


async def test_every_memory_gets_its_own_thread_minted_by_the_database(client, room):
    rows = await write(client, room, *[{"key": f"k{i}", "value": "v", "created_by": "a"} for i in range(20)])
    episodes = {r["episode"] for r in rows}
    assert len(episodes) == 20
    assert all(e.startswith("urn:ioc:mycelium:episode:atlas:") and len(e.rsplit(":", 1)[1]) == 12
               for e in episodes)


async def test_the_thread_binding_cannot_be_changed_even_from_psql(client, room, admin_conn):
    m = (await write(client, room, {"key": "k", "value": "v", "created_by": "a"}))[0]
    for statement in (
        "UPDATE mycelium.memories SET episode = 'urn:ioc:mycelium:episode:atlas:forged' WHERE key = 'k'",
        "UPDATE mycelium.memories SET key = 'other' WHERE key = 'k'",
        "UPDATE mycelium.memories SET episode = episode || 'x', version = version + 1",
    ):
        with pytest.raises(asyncpg.PostgresError) as exc:
            await admin_conn.execute(statement)
        assert exc.value.sqlstate == "MY409"
        assert "write-once" in exc.value.message
    assert await admin_conn.fetchval("SELECT episode FROM mycelium.memories WHERE key = 'k'") == m["episode"]


async def test_a_plain_insert_cannot_choose_the_thread(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('r')")
    episode = await admin_conn.fetchval(
        """INSERT INTO mycelium.memories (room, key, value, created_by, episode)
           VALUES ('r', 'k', '{"text": "x"}', 'me', 'urn:ioc:mycelium:episode:r:chosen') RETURNING episode""")
    assert episode != "urn:ioc:mycelium:episode:r:chosen"
    assert episode.startswith("urn:ioc:mycelium:episode:r:")


async def test_direct_sql_writes_still_version_and_record_history(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('r')")
    await admin_conn.execute("SELECT * FROM mycelium.write_memory('r', 'k', '\"v1\"', 'a')")
    await admin_conn.execute("""UPDATE mycelium.memories SET value = '{"text": "by hand"}', version = 42
                                WHERE key = 'k'""")
    assert await admin_conn.fetchval("SELECT version FROM mycelium.memories WHERE key = 'k'") == 2
    history = await admin_conn.fetch("SELECT version, op, written_by FROM mycelium.memory_versions ORDER BY id")
    assert [(h["version"], h["op"]) for h in history] == [(1, "write"), (2, "write")]


async def test_history_keeps_every_version_and_the_delete(client, room):
    for text in ("one", "two", "three"):
        await write(client, room, {"key": "doc", "value": text, "created_by": "ana"})
    assert (await client.delete(f"/api/rooms/{room}/memory/doc", params={"by": "bo"})).status_code == 204
    assert (await client.get(f"/api/rooms/{room}/memory/doc")).status_code == 404
    h = (await client.get(f"/api/rooms/{room}/history/doc")).json()
    assert [(v["version"], v["op"]) for v in h["versions"]] == [(1, "write"), (2, "write"), (3, "write"),
                                                                (3, "delete")]
    assert [v["value"]["text"] for v in h["versions"][:3]] == ["one", "two", "three"]
    assert h["versions"][3]["written_by"] == "bo"
    again = (await write(client, room, {"key": "doc", "value": "reborn", "created_by": "cy"}))[0]
    assert again["version"] == 1 and again["episode"] != h["versions"][0]["episode"]
    assert len((await client.get(f"/api/rooms/{room}/history/doc")).json()["versions"]) == 5


async def test_history_is_append_only_even_for_the_owner(client, room, admin_conn):
    await write(client, room, {"key": "doc", "value": "one", "created_by": "ana"})
    for statement in ("UPDATE mycelium.memory_versions SET value = '{}'",
                      "DELETE FROM mycelium.memory_versions",
                      "TRUNCATE mycelium.memory_versions"):
        with pytest.raises(asyncpg.PostgresError) as exc:
            await admin_conn.execute(statement)
        assert exc.value.sqlstate == "MY409"
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.memory_versions") == 1


async def test_a_batch_is_all_or_nothing(client, room):
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": [
        {"key": "ok1", "value": "v", "created_by": "a"},
        {"key": "bad/../key", "value": "v", "created_by": "a"},
        {"key": "ok2", "value": "v", "created_by": "a"},
    ]})
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_key" and r.json()["key"] == "bad/../key"
    assert (await client.get(f"/api/rooms/{room}/memory")).json() == []


@pytest.mark.parametrize(
    ("items", "status"),
    [
        ([], 422),
        ([{"key": f"k{i}", "value": "v", "created_by": "a"} for i in range(101)], 422),
        ([{"key": "k" * 513, "value": "v", "created_by": "a"}], 422),
        ([{"key": "", "value": "v", "created_by": "a"}], 422),
        ([{"key": "k", "value": "v"}], 422),
        ([{"key": "k", "value": 5, "created_by": "a"}], 422),
        ([{"key": "k", "value": "v", "created_by": "a", "base_version": -1}], 422),
        ([{"key": "k", "value": "v", "created_by": "a", "surprise": 1}], 422),
        ([{"key": "/abs", "value": "v", "created_by": "a"}], 422),
        ([{"key": "a//b", "value": "v", "created_by": "a"}], 422),
    ],
)
async def test_bad_batches_get_a_clear_4xx_and_write_nothing(client, room, items, status):
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": items})
    assert r.status_code == status, r.text
    assert {"error", "message"} <= set(r.json())
    assert (await client.get(f"/api/rooms/{room}/memory")).json() == []


async def test_malformed_json_oversized_bodies_and_unknown_rooms_are_refused_cleanly(client, room):
    r = await client.post(f"/api/rooms/{room}/memory", content=b'{"items": [',
                          headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "malformed_json"
    huge = "x" * (5 * 1024 * 1024)
    r = await client.post(f"/api/rooms/{room}/memory",
                          json={"items": [{"key": "k", "value": huge, "created_by": "a"}]})
    assert r.status_code == 413 and r.json()["error"] == "body_too_large"
    r = await client.post("/api/rooms/nowhere/memory", json={"items": [{"key": "k", "value": "v",
                                                                        "created_by": "a"}]})
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"
    assert (await client.get("/api/rooms/nowhere/memory")).status_code == 404
    r = await client.get(f"/api/rooms/{room}/memory/missing")
    assert r.status_code == 404 and r.json()["error"] == "memory_not_found"
    assert (await client.delete(f"/api/rooms/{room}/memory/missing")).status_code == 404


async def test_list_filters_by_prefix_pages_and_answers_304_on_a_matching_etag(client, room):
    await write(client, room, *[{"key": f"notes/{i}", "value": "v", "created_by": "a"} for i in range(5)],
                {"key": "other/x", "value": "v", "created_by": "a"})
    r = await client.get(f"/api/rooms/{room}/memory", params={"prefix": "notes/", "limit": 2})
    assert len(r.json()) == 2 and r.headers["x-total-count"] == "5"
    assert all(m["key"].startswith("notes/") for m in r.json())
    etag = r.headers["etag"]
    r2 = await client.get(f"/api/rooms/{room}/memory", params={"prefix": "notes/", "limit": 2},
                          headers={"if-none-match": etag})
    assert r2.status_code == 304
    await write(client, room, {"key": "notes/1", "value": "changed", "created_by": "a"})
    r3 = await client.get(f"/api/rooms/{room}/memory", params={"prefix": "notes/", "limit": 2},
                          headers={"if-none-match": etag})
    assert r3.status_code == 200 and r3.headers["etag"] != etag
    assert (await client.get(f"/api/rooms/{room}/memory", params={"limit": 0})).status_code == 422


async def test_structured_values_round_trip(client, room):
    m = (await write(client, room, {"key": "cfg", "value": {"a": 1, "b": ["x"]}, "created_by": "a"}))[0]
    assert m["value"] == {"a": 1, "b": ["x"]}


async def test_the_app_role_cannot_write_tables_directly_but_can_call_the_verbs(db_dsn):
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("SELECT mycelium.create_room('r')")
        await conn.execute("SET ROLE mycelium_app")
        await conn.execute("SELECT * FROM mycelium.write_memory('r', 'k', '\"v\"', 'a')")
        for statement in ("INSERT INTO mycelium.rooms (name) VALUES ('x')",
                          "UPDATE mycelium.memories SET tags = '{t}'",
                          "DELETE FROM mycelium.memories"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
        assert await conn.fetchval("SELECT count(*) FROM mycelium.memories") == 1
        await conn.execute("RESET ROLE")
        await conn.execute("SET ROLE mycelium_auditor")
        assert await conn.fetchval("SELECT count(*) FROM mycelium.memory_versions") == 1
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("SELECT * FROM mycelium.write_memory('r', 'k', '\"v\"', 'a')")
    finally:
        await conn.close()


async def test_the_hub_connects_as_the_app_role(hub):
    assert await hub.db.fetchval("SELECT current_user") == "mycelium_app"
