"""A handle's events across its rooms (sql/events.sql, GET /api/events) and memory subscriptions,
tried with plain SQL and over a served hub: a mention in any room is an event of the handle it
wakes, a write under a followed prefix is one of each follower but its author, a stream resumes
from Last-Event-ID with nothing lost or repeated, and an agent behind the gate follows only itself."""

from __future__ import annotations

import asyncio
import json
import time

import asyncpg
import pytest


async def events_of(conn: asyncpg.Connection, handle: str) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM mycelium.handle_events WHERE handle = $1 ORDER BY id", handle)


async def write(conn: asyncpg.Connection, room: str, key: str, text: str, by: str = "ana") -> None:
    await conn.execute("SELECT (mycelium.write_memory($1, $2, to_jsonb($3::text), $4)).key", room, key, text, by)


@pytest.fixture
async def rooms(admin_conn: asyncpg.Connection) -> asyncpg.Connection:
    for room in ("atlas", "orbit"):
        await admin_conn.execute("SELECT mycelium.create_room($1)", room)
    return admin_conn


async def test_mentions_and_followed_memories_are_a_handles_events(rooms):
    conn = rooms
    await conn.execute("SELECT id FROM mycelium.post_message('atlas', 'ana', '@julia have a look')")
    await conn.execute("SELECT id FROM mycelium.post_message('orbit', 'ana', 'nobody named here')")
    await conn.execute("SELECT id FROM mycelium.post_message('orbit', 'ana', '@julia and @bob: here too')")
    got = [(e["room"], e["kind"], e["position"]) for e in await events_of(conn, "julia")]
    assert got == [("atlas", "message", 1), ("orbit", "message", 2)]
    assert [e["room"] for e in await events_of(conn, "bob")] == ["orbit"]
    # julia follows decisions/ in atlas (twice over: decisions/ and decisions/db — one event a write)
    await conn.execute("SELECT (mycelium.subscribe_memory('atlas', '@Julia', 'decisions/')).handle")
    await conn.execute("SELECT (mycelium.subscribe_memory('atlas', 'julia', 'decisions/db')).handle")
    await conn.execute("SELECT (mycelium.subscribe_memory('atlas', 'julia', 'decisions/')).handle")  # once
    assert await conn.fetchval("SELECT count(*) FROM mycelium.memory_subscriptions") == 2
    await write(conn, "atlas", "decisions/db", "Postgres")
    await write(conn, "atlas", "notes/x", "not followed")
    await write(conn, "orbit", "decisions/db", "another room")
    await write(conn, "atlas", "decisions/api", "REST", by="julia")  # her own write: no event
    await conn.execute("SELECT (mycelium.delete_memory('atlas', 'decisions/db', 'ana')).key")
    memory = [(e["key"], e["version"], e["op"], e["prefix"]) for e in await events_of(conn, "julia")
              if e["kind"] == "memory"]
    assert memory == [("decisions/db", 1, "write", "decisions/db"), ("decisions/db", 1, "delete", "decisions/db")]
    gone = await conn.fetchrow("SELECT * FROM mycelium.unsubscribe_memory('atlas', 'julia', 'decisions/db')")
    assert gone["prefix"] == "decisions/db"
    with pytest.raises(asyncpg.PostgresError) as err:
        await conn.execute("SELECT (mycelium.unsubscribe_memory('atlas', 'julia', 'decisions/db')).handle")
    assert err.value.sqlstate == "MY404" and "does not follow" in str(err.value)
    with pytest.raises(asyncpg.PostgresError) as err:
        await conn.execute("SELECT (mycelium.subscribe_memory('nowhere', 'julia', '')).handle")
    assert err.value.sqlstate == "MY404"
    # a plain INSERT cannot make a malformed event
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute("INSERT INTO mycelium.handle_events (handle, room, kind) VALUES ('julia', 'atlas', 'memory')")


async def read(response, count: int) -> list[dict]:
    events: list[dict] = []
    event: dict = {}
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            event["id"] = int(line[4:])
        elif line.startswith("event: "):
            event["event"] = line[7:]
        elif line.startswith("data: "):
            event["data"] = json.loads(line[6:])
        elif not line and "data" in event:
            events.append(event)
            event = {}
            if len(events) == count:
                return events
    return events


async def test_the_stream_follows_a_handle_across_rooms_and_resumes(served, rooms):
    conn = rooms
    async with served.client() as http:
        r = await http.post("/api/rooms/atlas/subscriptions", json={"handle": "julia", "prefix": "decisions/"})
        assert r.status_code == 201 and r.json()["prefix"] == "decisions/"
        listed = (await http.get("/api/rooms/atlas/subscriptions", params={"handle": "julia"})).json()
        assert [s["prefix"] for s in listed] == ["decisions/"]
        bad = await http.post("/api/rooms/atlas/subscriptions", json={"handle": "julia", "prefix": "x" * 600})
        assert bad.status_code in (400, 422)
        assert (await http.get("/api/events")).status_code == 422  # no handle
        async with http.stream("GET", "/api/events", params={"handle": "julia"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            reader = asyncio.create_task(read(response, 3))
            await asyncio.sleep(0.3)
            await conn.execute("SELECT id FROM mycelium.post_message('orbit', 'ana', '@julia in orbit')")
            await write(conn, "atlas", "decisions/db", "Postgres")
            await conn.execute("SELECT id FROM mycelium.post_message('atlas', 'ana', '@julia in atlas')")
            got = await asyncio.wait_for(reader, 10)
        assert [(e["event"], e["data"]["room"]) for e in got] == [
            ("message", "orbit"), ("memory", "atlas"), ("message", "atlas")]
        assert got[0]["data"]["message"]["content"] == "@julia in orbit"
        assert got[1]["data"]["key"] == "decisions/db" and got[1]["data"]["op"] == "write"
        # away for a while: two more, then back with Last-Event-ID: exactly those two
        await conn.execute("SELECT id FROM mycelium.post_message('orbit', 'ana', '@julia while away 1')")
        await conn.execute("SELECT id FROM mycelium.post_message('atlas', 'ana', '@julia while away 2')")
        async with http.stream("GET", "/api/events", params={"handle": "julia"},
                               headers={"Last-Event-ID": str(got[-1]["id"])}) as response:
            again = await asyncio.wait_for(read(response, 2), 10)
        assert [e["data"]["message"]["content"] for e in again] == ["@julia while away 1", "@julia while away 2"]
        assert again[0]["id"] > got[-1]["id"]
        r = await http.delete("/api/rooms/atlas/subscriptions", params={"handle": "julia", "prefix": "decisions/"})
        assert r.status_code == 200
        r = await http.delete("/api/rooms/atlas/subscriptions", params={"handle": "julia", "prefix": "decisions/"})
        assert r.status_code == 404 and r.json()["error"] == "subscription_not_found"


@pytest.mark.slow
def test_a_user_follows_a_handle_with_the_cli(hub_process, tmp_path):
    import os
    import subprocess
    import sys

    import httpx

    from tests.support.cli import mycelium

    hub = hub_process()
    env = {"MYCELIUM_API_URL": hub.url, "MYCELIUM_HANDLE": "julia"}
    for room in ("atlas", "orbit"):
        assert httpx.post(f"{hub.url}/api/rooms", json={"name": room}).status_code == 201
    said = mycelium("memory", "subscribe", "decisions/", "-r", "atlas", env=env, ok=True).stdout.strip()
    assert said == "@julia follows decisions/ in atlas (mycelium events --as julia)"
    listed = mycelium("memory", "subscriptions", "-r", "atlas", env=env, ok=True).stdout.strip()
    assert listed == "@julia\tdecisions/"
    follower = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "events", "--json"],
                                env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # (it starts from now)
        httpx.post(f"{hub.url}/api/rooms/orbit/messages", json={"sender_handle": "ana", "content": "@julia look"})
        mycelium("memory", "set", "-r", "atlas", "decisions/db", "Postgres", env={**env, "MYCELIUM_HANDLE": "ana"},
                 ok=True)
        assert follower.stdout is not None
        got = [json.loads(follower.stdout.readline()) for _ in range(2)]
    finally:
        follower.terminate()
        follower.wait(timeout=10)
    assert [(e["kind"], e["room"]) for e in got] == [("message", "orbit"), ("memory", "atlas")]
    assert got[0]["message"]["content"] == "@julia look" and got[1]["key"] == "decisions/db"
    gone = mycelium("memory", "unsubscribe", "decisions/", "-r", "atlas", env=env, ok=True).stdout.strip()
    assert gone == "@julia no longer follows decisions/ in atlas"
    again = mycelium("memory", "unsubscribe", "decisions/", "-r", "atlas", env=env, ok=False)
    assert "404 subscription_not_found" in again.stderr and "Traceback" not in again.stderr
