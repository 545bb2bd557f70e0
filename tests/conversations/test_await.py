"""await/reply: the durable per-handle inbox delivers every message addressed to a handle exactly
once — whether the await starts before or after the message, across restarts, under concurrent
awaits of one handle — and reply answers where it is told, through the same gate."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

import asyncpg
import httpx
import pytest

from tests.conversations.conftest import make_thread, serve


async def send(conn: asyncpg.Connection, content: str, sender: str = "julia", episode: str | None = None,
               recipients: list[str] | None = None) -> uuid.UUID:
    return await conn.fetchval("SELECT id FROM mycelium.post_message('atlas', $1, $2, $3, $4)",
                               sender, content, episode, recipients or [])


async def await_(http: httpx.AsyncClient, handle: str, timeout: float = 0.2, **params: object) -> dict:
    r = await http.get("/api/rooms/atlas/await", params={"handle": handle, "timeout": timeout, **params})
    assert r.status_code == 200, r.text
    return r.json()


async def drain(http, handle: str, **params: object) -> list[str]:
    got = []
    while (m := (await await_(http, handle, 0.05, **params))["message"]) is not None:
        got.append(m["content"])
    return got


async def test_an_await_started_before_the_message_gets_it_once(served, task, admin_conn):
    async with served.client() as http:
        waiting = asyncio.create_task(await_(http, "bob", timeout=30))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await send(admin_conn, "@bob your turn")
        hit = await asyncio.wait_for(waiting, 10)
        assert hit["prompt"] == "@bob your turn" and hit["sender"] == "julia"
        assert hit["topic"] == "urn:concept:mycelium:atlas"
        assert (await await_(http, "bob"))["message"] is None


async def test_a_message_sent_before_the_first_await_is_delivered(client, task, admin_conn):
    await send(admin_conn, "old chatter nobody is asked in")
    await send(admin_conn, "@newbie welcome, please start")   # the mention that summons newbie
    await send(admin_conn, "more chatter")
    await send(admin_conn, "newbie: also this", recipients=["newbie"])
    assert await drain(client, "newbie") == ["@newbie welcome, please start", "newbie: also this"]


async def test_a_new_handle_is_not_handed_the_rooms_history(client, task, admin_conn):
    await send(admin_conn, "@bob earlier")
    await send(admin_conn, "general chatter")
    assert await drain(client, "stranger") == []
    await send(admin_conn, "@stranger now you")
    assert await drain(client, "stranger") == ["@stranger now you"]


async def test_only_turns_for_the_handle_wake_it(client, task, admin_conn):
    await send(admin_conn, "@~bob silent credit")                      # silent mention
    await send(admin_conn, "@bobby is someone else")                   # a longer handle
    await send(admin_conn, "@bob talking to myself", sender="bob")     # its own message
    await admin_conn.execute("SELECT id FROM mycelium.post_notice('atlas', 'claimed', 'work/x', "
                             "'{\"by\": \"julia\", \"note\": \"@bob\"}'::jsonb)")
    await send(admin_conn, "hey @BOB.")                                 # a mention, any case
    await send(admin_conn, "for you", recipients=["@Bob#s1"])           # a recipient, any spelling
    await send(admin_conn, "@bob in the thread", sender="api", episode=task.episode)  # and its ping
    assert await drain(client, "@bob") == ["hey @BOB.", "for you", "@bob in the thread"]


async def test_concurrent_awaits_of_one_handle_each_get_different_messages(served, task, admin_conn):
    async with served.client() as http:
        waiters = [asyncio.create_task(await_(http, "bob", timeout=20)) for _ in range(12)]
        await asyncio.sleep(0.3)
        for i in range(12):
            await send(admin_conn, f"@bob job {i}")
        got = [(await w)["message"]["content"] for w in waiters]
        assert sorted(got) == sorted(f"@bob job {i}" for i in range(12))
        assert (await await_(http, "bob"))["message"] is None


async def test_racing_take_next_from_many_connections_delivers_each_message_once(task, admin_conn, db_dsn):
    for i in range(60):
        await send(admin_conn, f"@bob {i}")
    conns = [await asyncpg.connect(db_dsn) for _ in range(6)]

    async def worker(conn: asyncpg.Connection) -> list[int]:
        taken = []
        while (pos := await conn.fetchval("SELECT position FROM mycelium.take_next('atlas', 'bob')")) is not None:
            taken.append(pos)
        return taken

    try:
        results = await asyncio.gather(*(worker(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    everything = [p for r in results for p in r]
    assert len(everything) == 60 and len(set(everything)) == 60


async def test_a_thread_scoped_await_narrows_the_wake_and_nothing_is_served_twice(client, task, admin_conn):
    other = await make_thread(admin_conn, "atlas", "work/other", "Other")
    await send(admin_conn, "@bob room question")
    await send(admin_conn, "@bob in apple pay", sender="api", episode=task.episode)
    await send(admin_conn, "@bob in other", sender="api", episode=other.episode)
    assert await drain(client, "bob", episode=task.episode) == ["@bob in apple pay"]
    assert await drain(client, "bob", episode=task.short) == []
    # the room-wide inbox still holds the rest, and never re-serves what the thread took
    assert await drain(client, "bob") == ["@bob room question", "@bob in other"]
    cursor = await admin_conn.fetchrow("SELECT * FROM mycelium.delivery_cursors WHERE handle = 'bob'")
    assert cursor["position"] == await admin_conn.fetchval("SELECT last FROM mycelium.message_positions")
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.early_deliveries") == 0


async def test_the_inbox_survives_a_hub_restart(db_dsn, settings_for, task, admin_conn):
    async with serve(db_dsn, settings_for) as first, first.client() as http:
        await send(admin_conn, "@bob one")
        await send(admin_conn, "@bob two")
        assert (await await_(http, "bob"))["message"]["content"] == "@bob one"
    await send(admin_conn, "@bob three")  # while no hub runs
    async with serve(db_dsn, settings_for) as second, second.client() as http:
        assert await drain(http, "bob") == ["@bob two", "@bob three"]


@pytest.mark.slow
async def test_an_await_cut_off_by_a_killed_hub_loses_nothing(hub_process, task, admin_conn):
    first = hub_process()
    async with httpx.AsyncClient(base_url=first.url, timeout=30) as http:
        waiting = asyncio.create_task(await_(http, "bob", timeout=25))
        await asyncio.sleep(0.5)
        first.kill()
        with pytest.raises(httpx.HTTPError):
            await waiting
    await send(admin_conn, "@bob sent while the hub was down")
    second = hub_process()
    async with httpx.AsyncClient(base_url=second.url, timeout=30) as http:
        assert await drain(http, "bob") == ["@bob sent while the hub was down"]


async def test_a_client_that_hangs_up_takes_nothing(served, task, admin_conn):
    async with served.client() as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get("/api/rooms/atlas/await", params={"handle": "bob", "timeout": 30}, timeout=0.3)
        await asyncio.sleep(0.3)  # the server notices the hang-up
        await send(admin_conn, "@bob after you left")
        await asyncio.sleep(0.3)
        assert await drain(http, "bob") == ["@bob after you left"]


async def test_await_refreshes_a_presence_lease_that_covers_the_poll(client, task):
    await await_(client, "Bob", timeout=0.1)
    members = (await client.get("/api/rooms/atlas/sessions/members")).json()["members"]
    assert [m["handle"] for m in members] == ["bob"]
    expires = datetime.fromisoformat(members[0]["expires_at"])
    seen = datetime.fromisoformat(members[0]["seen_at"])
    assert (expires - seen).total_seconds() >= 90


async def test_bad_awaits_are_refused_clearly(client, task):
    r = await client.get("/api/rooms/atlas/await", params={"handle": "no spaces", "timeout": 0.1})
    assert r.status_code == 422 and r.json()["error"] == "invalid_handle"
    r = await client.get("/api/rooms/nowhere/await", params={"handle": "bob", "timeout": 0.1})
    assert r.status_code == 404
    r = await client.get("/api/rooms/atlas/await", params={"handle": "bob", "timeout": 99999})
    assert r.status_code == 422
    r = await client.get("/api/rooms/atlas/await", params={"timeout": 1})
    assert r.status_code in (400, 422)


async def test_an_inbox_cursor_only_moves_forward(client, task, admin_conn):
    await send(admin_conn, "@bob x")
    await drain(client, "bob")
    with pytest.raises(asyncpg.PostgresError) as err:
        await admin_conn.execute("UPDATE mycelium.delivery_cursors SET position = 0")
    assert err.value.sqlstate == "MY409"


async def test_a_reply_answers_the_message_that_woke_it_where_it_was_asked(client, task, admin_conn):
    await admin_conn.execute("SELECT holder FROM mycelium.hold_floor('atlas', $1, 'conductor', ARRAY['api'])",
                             task.episode)
    async with admin_conn.transaction():  # the conductor engine, declared as the actor
        await admin_conn.execute("SELECT mycelium.acting(NULL, 'conductor', 'engine')")
        tick = await send(admin_conn, "@api your estimate?", sender="conductor", episode=task.episode)
    assert (await await_(client, "api"))["message"]["id"] == str(tick)
    r = await client.post("/api/rooms/atlas/reply", json={
        "handle": "api", "episode": task.episode,
        "text": "Three days.\n\n[[mycelium: confidence=0.8 stance=accept]]"})
    assert r.status_code == 201, r.text
    row = await admin_conn.fetchrow("SELECT * FROM mycelium.messages WHERE id = $1", uuid.UUID(r.json()["message_id"]))
    assert row["content"] == "Three days." and row["payload_type"] == "reply" and row["kind"] == "exchange"
    assert row["payload"] == {"confidence": 0.8, "action": "accept"}
    assert row["parents"] == [tick] and row["recipients"] == ["conductor"]
    # and the reply is the conductor's turn
    assert (await await_(client, "conductor"))["message"]["content"] == "Three days."


async def test_a_reply_never_follows_the_waking_thread_implicitly(client, task, admin_conn):
    await send(admin_conn, "@api thoughts?", sender="julia", episode=task.episode)
    await await_(client, "api")
    r = await client.post("/api/rooms/atlas/reply", json={"handle": "api", "text": "[[mycelium: stance=yes]]"})
    assert r.status_code == 201
    row = await admin_conn.fetchrow("SELECT * FROM mycelium.messages WHERE id = $1", uuid.UUID(r.json()["message_id"]))
    assert row["episode"] == "urn:ioc:mycelium:episode:atlas:live"
    assert row["parents"] == [] and row["recipients"] == []
    assert row["content"] == "[[mycelium: stance=yes]]" and row["payload"] == {"action": "accept"}
    r = await client.post("/api/rooms/atlas/reply", json={"handle": "api", "text": "plain"})
    assert await admin_conn.fetchval("SELECT payload FROM mycelium.messages WHERE id = $1",
                                     uuid.UUID(r.json()["message_id"])) == {"action": "reply"}


async def test_reply_refuses_bad_input(client, task):
    for body, status in (({"handle": "api", "text": ""}, 422), ({"handle": "system", "text": "x"}, 403),
                         ({"handle": "a.b", "text": "x"}, 422), ({"handle": "api"}, 422),
                         ({"handle": "api", "text": "x", "episode": "nosuchthread"}, 404)):
        r = await client.post("/api/rooms/atlas/reply", json=body)
        assert r.status_code == status, (body, r.text)


async def test_a_message_far_behind_a_long_stretch_for_others_is_found_and_each_delivered_once(task, admin_conn):
    take = "SELECT content FROM mycelium.take_next('atlas', 'bob')"
    await admin_conn.fetchval(take)  # bob's inbox starts here
    await admin_conn.execute(
        "SELECT count(*) FROM (SELECT mycelium.post_message('atlas', 'julia', 'x' || i, NULL, ARRAY['carl'])"
        " FROM generate_series(1, 700) i) s")
    await send(admin_conn, "one", recipients=["bob"])
    await admin_conn.execute(
        "SELECT count(*) FROM (SELECT mycelium.post_message('atlas', 'julia', 'y' || i, NULL, ARRAY['carl'])"
        " FROM generate_series(1, 600) i) s")
    await send(admin_conn, "two", recipients=["bob"])
    await send(admin_conn, "three", recipients=["bob"])
    got = []
    while (content := await admin_conn.fetchval(take)) is not None:
        got.append(content)
    assert got == ["one", "two", "three"]
    head = await admin_conn.fetchval("SELECT last FROM mycelium.message_positions WHERE room = 'atlas'")
    assert await admin_conn.fetchval(
        "SELECT position FROM mycelium.delivery_cursors WHERE room = 'atlas' AND handle = 'bob'") == head
