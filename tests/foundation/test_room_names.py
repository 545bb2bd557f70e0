"""Room names that look the same are one room: NFC-normalised, no invisible or bidirectional-control
characters (Unicode category Cf), unique whatever their case; the created spelling is kept."""

from __future__ import annotations

import asyncio
import json
import unicodedata

import asyncpg
import pytest

from mycelium.db import migrate

CF = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]


async def test_a_room_name_is_stored_nfc_and_its_nfd_spelling_is_the_same_room(client):
    nfd = unicodedata.normalize("NFD", "café")
    r = await client.post("/api/rooms", json={"name": nfd})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "café" == unicodedata.normalize("NFC", nfd)
    r = await client.post("/api/rooms", json={"name": "café"})
    assert (r.status_code, r.json()["error"]) == (409, "room_exists"), r.text
    r = await client.get(f"/api/rooms/{nfd}")
    assert (r.status_code, r.json().get("name")) == (200, "café"), r.text


@pytest.mark.parametrize("char", ["\u200b", "\u202e", "\u2066", "\ufeff", "\u00ad", "\u061c", "\u180e", "\u2064"])
async def test_invisible_and_bidi_control_characters_are_refused(client, char):
    r = await client.post("/api/rooms", json={"name": f"atl{char}as"})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_room_name" and f"U+{ord(char):04X}" in body["message"]


async def test_every_format_character_is_refused_from_plain_sql_too(admin_conn):
    assert len(CF) > 150
    accepted = []
    for char in CF:
        try:
            async with admin_conn.transaction():
                await admin_conn.execute("INSERT INTO mycelium.rooms (name) VALUES ($1)", f"x{char}y")
            accepted.append(f"U+{ord(char):04X}")
        except asyncpg.PostgresError as exc:
            assert exc.sqlstate == "MY422", exc
    assert accepted == []
    with pytest.raises(asyncpg.PostgresError) as info:
        await admin_conn.execute("SELECT mycelium.create_room($1)", "a\u200bb")
    assert info.value.sqlstate == "MY422" and json.loads(info.value.detail)["error"] == "invalid_room_name"


async def test_names_differing_only_by_case_are_one_room_kept_as_created(client, admin_conn):
    assert (await client.post("/api/rooms", json={"name": "Atlas"})).status_code == 201
    for other in ("atlas", "ATLAS", "aTlAs"):
        r = await client.post("/api/rooms", json={"name": other})
        assert (r.status_code, r.json()["error"]) == (409, "room_exists"), r.text
        assert "'Atlas'" in r.json()["message"] and r.json()["existing"] == "Atlas"
    for spelling in ("atlas", "ATLAS"):
        r = await client.get(f"/api/rooms/{spelling}")
        assert (r.status_code, r.json()["name"]) == (200, "Atlas"), r.text
    r = await client.post("/api/rooms/atlas/memory", json={"items": [
        {"key": "notes/a", "value": "hello", "created_by": "ana", "embed": False}]})
    assert r.status_code == 201, r.text
    r = await client.post("/api/rooms/ATLAS/tasks", json={"title": "Ship", "handle": "ana"})
    assert r.status_code == 201, r.text
    assert r.json()["room_name"] == "Atlas"
    r = await client.get("/api/rooms/aTLAS/memory/notes/a")
    assert (r.status_code, r.json()["room_name"]) == (200, "Atlas"), r.text
    rooms = await admin_conn.fetch("SELECT DISTINCT room FROM mycelium.memories")
    assert [r["room"] for r in rooms] == ["Atlas"]
    assert await admin_conn.fetchval("SELECT array_agg(name) FROM mycelium.rooms") == ["Atlas"]
    # psql: creating another spelling is refused; a verb given another spelling says how it is spelled
    with pytest.raises(asyncpg.PostgresError) as info:
        await admin_conn.execute("INSERT INTO mycelium.rooms (name) VALUES ('ATLAS')")
    assert info.value.sqlstate in ("23505", "MY409")
    with pytest.raises(asyncpg.PostgresError) as info:
        await admin_conn.execute("SELECT mycelium.write_memory('atlas', 'notes/b', '\"x\"', 'ana')")
    assert info.value.sqlstate == "MY404" and json.loads(info.value.detail)["spelled"] == "Atlas"
    assert "'Atlas'" in info.value.message
    assert (await client.delete("/api/rooms/atlas")).status_code in (200, 204)
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.rooms") == 0


async def test_two_connections_creating_two_spellings_at_once_make_one_room(db_dsn, admin_conn):
    conns = [await asyncpg.connect(db_dsn) for _ in range(2)]
    try:
        for c in conns:
            await c.execute("BEGIN")
        await conns[0].execute("SELECT mycelium.create_room('Orbit')")
        second = asyncio.ensure_future(conns[1].execute("SELECT mycelium.create_room('orbit')"))
        await asyncio.sleep(0.3)
        await conns[0].execute("COMMIT")
        with pytest.raises(asyncpg.PostgresError) as info:
            await second
        assert info.value.sqlstate == "MY409" and json.loads(info.value.detail)["existing"] == "Orbit"
        await conns[1].execute("ROLLBACK")
    finally:
        for c in conns:
            await c.close()
    assert await admin_conn.fetchval("SELECT array_agg(name) FROM mycelium.rooms") == ["Orbit"]


async def test_the_upgrade_refuses_a_database_holding_two_spellings_of_one_name(pg_server):
    from mycelium.db.releases import FIRST, RELEASES

    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    before = RELEASES[FIRST]  # a release before 0008_room_names (a database is left only at a release)
    try:
        await asyncio.to_thread(migrate.upgrade, dsn, before)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("INSERT INTO mycelium.rooms (name) VALUES ('Dup'), ('dup'), ('solo')")
        finally:
            await conn.close()
        with pytest.raises(Exception) as info:
            await asyncio.to_thread(migrate.upgrade, dsn)
        text = str(info.value)
        assert "'Dup'" in text and "'dup'" in text and "solo" not in text
        assert await migrate.current_revision(dsn) == before
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("DELETE FROM mycelium.rooms WHERE name = 'dup'")
        finally:
            await conn.close()
        await asyncio.to_thread(migrate.upgrade, dsn)
        assert await migrate.current_revision(dsn) == migrate.head_revision()
    finally:
        await pg_server.drop_database(name)
