"""Rooms: the upstream routes, name rules held by the database, one winner per name, clean delete."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest


async def test_a_room_is_created_listed_read_patched_and_deleted(client):
    r = await client.post("/api/rooms", json={"name": "atlas", "title": "Atlas", "description": "d"})
    assert r.status_code == 201
    assert r.json()["name"] == "atlas" and r.json()["is_public"] is True
    assert [x["name"] for x in (await client.get("/api/rooms")).json()] == ["atlas"]
    assert (await client.get("/api/rooms/atlas")).json()["title"] == "Atlas"
    r = await client.patch("/api/rooms/atlas", json={"title": "Atlas 2"})
    assert r.status_code == 200 and r.json()["title"] == "Atlas 2" and r.json()["description"] == "d"
    assert (await client.delete("/api/rooms/atlas")).status_code == 204
    r = await client.get("/api/rooms/atlas")
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("   ", "blank"),
        (".", '"." or ".."'),
        ("..", '"." or ".."'),
        ("x" * 101, "100"),
        ("a:session:b", ":session:"),
    ],
)
async def test_an_invalid_room_name_is_refused_with_a_reason(client, name, fragment):
    r = await client.post("/api/rooms", json={"name": name})
    assert 400 <= r.status_code < 500
    body = r.json()
    assert "error" in body and "message" in body
    assert fragment in body["message"] or r.status_code == 422


async def test_the_database_refuses_a_bad_room_name_from_plain_sql(admin_conn):
    for bad in ("a/b", "..", " ", "x" * 101):
        with pytest.raises(asyncpg.CheckViolationError):
            await admin_conn.execute("INSERT INTO mycelium.rooms (name) VALUES ($1)", bad)


async def test_concurrent_creates_of_one_name_give_exactly_one_201(client):
    results = await asyncio.gather(*[client.post("/api/rooms", json={"name": "race"}) for _ in range(20)])
    codes = sorted(r.status_code for r in results)
    assert codes.count(201) == 1
    assert codes.count(409) == 19
    assert all(r.json()["error"] == "room_exists" for r in results if r.status_code == 409)


async def test_concurrent_creates_on_separate_connections_have_one_winner(db_dsn):
    conns = [await asyncpg.connect(db_dsn) for _ in range(8)]
    try:
        async def create(conn):
            try:
                await conn.fetchrow("SELECT * FROM mycelium.create_room('same')")
                return "created"
            except asyncpg.PostgresError as exc:
                return exc.sqlstate

        outcomes = await asyncio.gather(*[create(c) for c in conns])
    finally:
        for c in conns:
            await c.close()
    assert outcomes.count("created") == 1
    assert outcomes.count("MY409") == 7


async def test_deleting_a_room_removes_everything_of_it(client, admin_conn):
    await client.post("/api/rooms", json={"name": "doomed"})
    await client.post("/api/rooms", json={"name": "kept"})
    for room in ("doomed", "kept"):
        r = await client.post(f"/api/rooms/{room}/memory", json={"items": [
            {"key": "a", "value": "one [[b]]", "created_by": "x"},
            {"key": "b", "value": "two", "created_by": "x"},
        ]})
        assert r.status_code == 201
        await client.post(f"/api/rooms/{room}/memory", json={"items": [{"key": "a", "value": "v2", "created_by": "x"}]})
    await admin_conn.execute("SELECT mycelium.post_notice('doomed', 'filed', 'a', '{}')")
    assert (await client.delete("/api/rooms/doomed")).status_code == 204
    tables = [r["relname"] for r in await admin_conn.fetch(
        """SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
           WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind = 'r' AND a.attname = 'room'
             AND NOT a.attisdropped""")]
    assert "memories" in tables and "memory_versions" in tables and "messages" in tables
    for table in tables:
        if table == "changes":
            continue  # the outbox keeps the room_delete record for the mirror
        if table == "audit_log":
            continue  # the audit trail keeps the deletion itself (below)
        left = await admin_conn.fetchval(f"SELECT count(*) FROM mycelium.{table} WHERE room = 'doomed'")
        assert left == 0, table
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.memories WHERE room = 'kept'") == 2
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM mycelium.changes WHERE room = 'doomed' AND op = 'room_delete'") == 1
    assert [r["action"] for r in await admin_conn.fetch(
        "SELECT action FROM mycelium.audit_log WHERE room = 'doomed'")] == ["room.delete"]


async def test_private_rooms_are_listed_only_to_their_owner_and_members(client):
    r = await client.post("/api/rooms", json={"name": "secret", "is_public": False, "owner": "ana",
                                              "members": ["bo"]})
    assert r.status_code == 201
    await client.post("/api/rooms", json={"name": "open"})
    names = lambda resp: [x["name"] for x in resp.json()]  # noqa: E731
    assert names(await client.get("/api/rooms")) == ["open"]
    assert names(await client.get("/api/rooms", params={"viewer": "ana"})) == ["open", "secret"]
    assert names(await client.get("/api/rooms", params={"viewer": "bo"})) == ["open", "secret"]
    assert names(await client.get("/api/rooms", params={"viewer": "cy"})) == ["open"]


async def test_making_a_room_private_without_an_owner_makes_the_patcher_its_owner(client):
    await client.post("/api/rooms", json={"name": "r"})
    r = await client.patch("/api/rooms/r", json={"is_public": False, "by": "dee"})
    assert r.status_code == 200
    assert r.json()["owner"] == "dee" and r.json()["is_public"] is False
    r = await client.patch("/api/rooms/r", json={"title": "x" * 201})
    assert r.status_code == 422


async def test_a_room_is_never_renamed(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('fixed')")
    with pytest.raises(asyncpg.PostgresError) as exc:
        await admin_conn.execute("UPDATE mycelium.rooms SET name = 'other' WHERE name = 'fixed'")
    assert exc.value.sqlstate == "MY409"
