"""Messages: the append-only timeline through HTTP and SQL — posting, mentions, pings, amendments,
reads newest first with a backward cursor, and clear 4xx for bad input."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from tests.conversations.conftest import make_thread


async def post(client, **body):
    body.setdefault("sender_handle", "julia")
    body.setdefault("content", "hello")
    return await client.post("/api/rooms/atlas/messages", json=body)


async def test_a_posted_message_carries_its_mentions_recipients_and_a_position(client, task):
    r = await post(client, sender_handle="@Julia", content="@bob please review, cc @~carol",
                   recipient_handle="Dave", message_type="direct")
    assert r.status_code == 201, r.text
    m = r.json()
    assert m["sender_handle"] == "julia" and m["recipient_handle"] == "dave"
    assert m["mentions"] == ["bob"] and m["silent_mentions"] == ["carol"]
    assert m["message_type"] == "direct" and m["kind"] == "exchange" and m["payload_type"] == "message"
    assert m["episode"] == "urn:ioc:mycelium:episode:atlas:live"
    assert m["position"] >= 1


@pytest.mark.parametrize(("body", "status", "error"), [
    ({"content": ""}, 422, "invalid_request"),
    ({"message_type": "shout"}, 422, "invalid_request"),
    ({"message_type": "event"}, 422, "invalid_request"),
    ({"surprise": 1}, 422, "invalid_request"),
    ({"sender_handle": "a.b"}, 422, "invalid_handle"),
    ({"recipient_handle": "-x"}, 422, "invalid_handle"),
    ({"sender_handle": "@System"}, 403, "reserved_handle"),
])
async def test_bad_input_gets_a_clear_4xx_and_writes_nothing(client, task, admin_conn, body, status, error):
    before = await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages")
    r = await post(client, **body)
    assert r.status_code == status, r.text
    assert r.json()["error"] == error and r.json()["message"]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages") == before


async def test_unknown_room_and_malformed_json_are_refused(client, task):
    r = await client.post("/api/rooms/nowhere/messages", json={"sender_handle": "a", "content": "b"})
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"
    r = await client.post("/api/rooms/atlas/messages", content=b"{not json",
                          headers={"content-type": "application/json"})
    assert r.status_code == 400


async def test_messages_are_append_only_even_for_sql(task, admin_conn):
    await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', 'kept')")
    for sql in ("UPDATE mycelium.messages SET content = 'rewritten'", "DELETE FROM mycelium.messages",
                "TRUNCATE mycelium.messages"):
        with pytest.raises(asyncpg.PostgresError) as err:
            await admin_conn.execute(sql)
        assert err.value.sqlstate == "MY409"


async def test_the_derived_columns_of_a_plain_insert_cannot_be_forged(task, admin_conn):
    forged = await admin_conn.fetchrow(
        "INSERT INTO mycelium.messages (room, sender, wakes, mentions, silent_mentions) "
        "VALUES ('atlas', 'x', ARRAY['bob'], ARRAY['bob'], ARRAY['eve']) RETURNING *")
    assert forged["wakes"] == [] and forged["mentions"] == [] and forged["silent_mentions"] == []
    named = await admin_conn.fetchrow(
        "INSERT INTO mycelium.messages (room, sender, content, wakes, mentions) "
        "VALUES ('atlas', 'x', 'over to @Bob, cc @~carol', ARRAY['eve'], ARRAY['eve']) RETURNING *")
    assert named["wakes"] == ["bob"] and named["mentions"] == ["bob"]
    assert named["silent_mentions"] == ["carol"]


async def test_a_thread_write_raises_a_ping_in_the_channel_that_wakes_nobody(client, task, admin_conn):
    r = await post(client, sender_handle="api", content="secret prose @bob", episode=task.episode)
    assert r.status_code == 201
    message = r.json()
    ping = await admin_conn.fetchrow(
        "SELECT * FROM mycelium.messages WHERE payload_type = 'ping' ORDER BY position DESC LIMIT 1")
    assert ping["episode"] == "urn:ioc:mycelium:episode:atlas:live"
    assert ping["payload"] == {"episode": task.episode, "sender": "api", "message": message["id"]}
    assert ping["content"] == "" and ping["sender"] == "system" and ping["wakes"] == []
    assert ping["position"] == message["position"] + 1
    # a post into the room itself raises no ping
    await post(client, content="room talk")
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE payload_type = 'ping'") == 1


async def test_a_thread_can_be_named_by_its_short_id(client, task):
    r = await post(client, content="short", episode=task.short)
    assert r.status_code == 201 and r.json()["episode"] == task.episode


async def test_notices_wake_nobody(task, admin_conn):
    await admin_conn.execute("SELECT id FROM mycelium.post_notice('atlas', 'claimed', 'work/x', "
                             "'{\"by\": \"bob\"}'::jsonb)")
    wakes = await admin_conn.fetch("SELECT wakes FROM mycelium.messages WHERE payload_type = 'notice'")
    assert wakes and all(w["wakes"] == [] for w in wakes)


async def test_reads_are_newest_first_and_page_backward_without_gaps_or_repeats(client, task):
    for i in range(7):
        await post(client, content=f"m{i}")
    await post(client, sender_handle="api", content="in the thread", episode=task.episode)
    seen, before = [], None
    while True:
        params = {"limit": 3, **({"before": before} if before else {})}
        page = (await client.get("/api/rooms/atlas/messages", params=params)).json()
        if not page:
            break
        seen += [m["content"] for m in page]
        positions = [m["position"] for m in page]
        assert positions == sorted(positions, reverse=True)
        before = str(positions[-1])
    assert seen == ["in the thread", *[f"m{i}" for i in reversed(range(7))]]  # no pings, no notices


async def test_reads_filter_by_sender_type_episode_and_time(client, task):
    await post(client, sender_handle="alice", content="a1")
    await post(client, sender_handle="bob", content="b1", message_type="announce")
    await post(client, sender_handle="bob", content="b2", episode=task.episode)
    await post(client, sender_handle="ops", content="deploy started", message_type="event",
               metadata={"kind": "deploy", "status": "open"})

    async def contents(**params):
        r = await client.get("/api/rooms/atlas/messages", params=params)
        assert r.status_code == 200, r.text
        return [m["content"] for m in r.json()]

    assert await contents(sender="@BOB") == ["b2", "b1"]
    assert await contents(message_type="announce") == ["b1"]
    assert await contents(episode=task.episode) == ["b2"]
    assert await contents(episode="live") == ["deploy started", "b1", "a1"]
    assert await contents(kind="deploy", status="open") == ["deploy started"]
    assert len(await contents(message_type="ping")) == 1
    first = (await client.get("/api/rooms/atlas/messages", params={"sender": "alice"})).json()[0]
    assert await contents(since=first["created_at"], sender="alice") == ["a1"]
    assert await contents(before=first["created_at"]) == []
    assert (await client.get("/api/rooms/atlas/messages", params={"before": "soon"})).status_code == 422


async def test_an_amendment_is_a_new_message_and_reads_fold_to_the_newest_text(client, task, admin_conn):
    original = (await post(client, sender_handle="bob", content="ship on friday")).json()
    r = await client.post(f"/api/rooms/atlas/messages/{original['id']}/amend",
                          json={"content": "ship on monday", "sender_handle": "Bob"})
    assert r.status_code == 201, r.text
    folded = r.json()
    assert folded["id"] == original["id"] and folded["content"] == "ship on monday" and folded["edited_at"]
    amend = await admin_conn.fetchrow("SELECT * FROM mycelium.messages WHERE subkind = 'amend'")
    assert amend["kind"] == "exchange" and amend["parents"] == [uuid.UUID(original["id"])]
    assert amend["wakes"] == []
    # amending the amendment amends the original
    await client.post(f"/api/rooms/atlas/messages/{amend['id']}/amend", json={"content": "ship tuesday"})
    listed = (await client.get("/api/rooms/atlas/messages")).json()
    assert [m["content"] for m in listed] == ["ship tuesday"]
    # the row itself was never touched
    assert await admin_conn.fetchval("SELECT content FROM mycelium.messages WHERE id = $1",
                                     uuid.UUID(original["id"])) == "ship on friday"


async def test_only_the_sender_may_amend(client, task):
    original = (await post(client, sender_handle="bob", content="mine")).json()
    r = await client.post(f"/api/rooms/atlas/messages/{original['id']}/amend",
                          json={"content": "hijacked", "sender_handle": "mallory"})
    assert r.status_code == 403 and r.json()["error"] == "not_sender"
    r = await client.post("/api/rooms/atlas/messages/not-a-uuid/amend", json={"content": "x"})
    assert r.status_code == 404
    r = await client.post("/api/rooms/atlas/messages/00000000-0000-0000-0000-000000000000/amend",
                          json={"content": "x"})
    assert r.status_code == 404 and r.json()["error"] == "message_not_found"


async def test_an_amendment_in_a_thread_passes_the_floor(client, task, admin_conn):
    original = (await post(client, sender_handle="api", content="draft", episode=task.episode)).json()
    await admin_conn.execute("SELECT holder FROM mycelium.hold_floor('atlas', $1, 'conductor')", task.episode)
    r = await client.post(f"/api/rooms/atlas/messages/{original['id']}/amend", json={"content": "late edit"})
    assert r.status_code == 409


async def test_parents_must_be_messages_of_the_room(task, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('other')")
    elsewhere = await admin_conn.fetchval("SELECT id FROM mycelium.post_message('other', 'x', 'there')")
    with pytest.raises(asyncpg.PostgresError) as err:
        await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'x', 'answer', NULL, '{}', "
                                 "'exchange', NULL, 'reply', '{}', ARRAY[$1::uuid])", elsewhere)
    assert err.value.sqlstate == "MY422"


async def test_positions_stay_gapless_when_threads_and_the_room_interleave(client, task, admin_conn):
    other = await make_thread(admin_conn, "atlas", "work/other", "Other")
    for i in range(4):
        await post(client, content=f"r{i}")
        await post(client, sender_handle="api", content=f"t{i}", episode=(task if i % 2 else other).episode)
    positions = [r["position"] for r in await admin_conn.fetch(
        "SELECT position FROM mycelium.messages WHERE room = 'atlas' ORDER BY position")]
    assert positions == list(range(1, len(positions) + 1))


async def test_deleting_a_room_takes_its_conversations_with_it(client, task, admin_conn):
    await post(client, content="@bob hi")
    await post(client, sender_handle="api", content="x", episode=task.episode)
    await client.get("/api/rooms/atlas/await", params={"handle": "bob", "timeout": 0.1})
    await admin_conn.execute("SELECT holder FROM mycelium.hold_floor('atlas', $1, 'conductor')", task.episode)
    await admin_conn.execute("SELECT frozen_by FROM mycelium.freeze_roster('atlas', $1, ARRAY['api'], 'aligner')",
                             task.episode)
    assert (await client.delete("/api/rooms/atlas")).status_code == 204
    for table in ("messages", "message_search", "floors", "rosters", "delivery_cursors", "presence"):
        assert await admin_conn.fetchval(f"SELECT count(*) FROM mycelium.{table}") == 0, table
