"""The thread write gate: floors and frozen rosters decide who may write into a thread, in the
database, for every client (hub.md §4, §17.2 E)."""

from __future__ import annotations

import asyncpg
import pytest

from tests.conversations.conftest import Thread, make_thread


async def refused(conn: asyncpg.Connection, sql: str, *args: object) -> asyncpg.PostgresError:
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.execute(sql, *args)
    return caught.value


async def post(client, thread: Thread | None, sender: str, content: str = "hello"):
    body = {"sender_handle": sender, "content": content}
    if thread is not None:
        body["episode"] = thread.episode
    return await client.post("/api/rooms/atlas/messages", json=body)


async def hold(conn, thread: Thread, holder: str, speakers: list[str] | None = None):
    return await conn.fetchrow("SELECT * FROM mycelium.hold_floor('atlas', $1, $2, $3)",
                               thread.episode, holder, speakers or [])


async def count(conn, sql: str, *args: object) -> int:
    return await conn.fetchval(f"SELECT count(*) FROM ({sql}) x", *args)


async def test_without_a_floor_anyone_may_write_into_a_known_thread(client, task):
    r = await post(client, task, "sec")
    assert r.status_code == 201, r.text
    assert r.json()["episode"] == task.episode


async def test_the_holder_and_its_speakers_are_admitted_however_they_spell_their_handle(client, task, admin_conn):
    await hold(admin_conn, task, "@Lead", ["API"])
    for sender in ("lead", "@LEAD", " lead ", "api", "api#a8f3", "@Api#s2"):
        r = await post(client, task, sender)
        assert r.status_code == 201, (sender, r.text)


async def test_a_handle_the_floor_does_not_admit_gets_409_naming_the_holder_and_who_may_speak(
        client, task, admin_conn):
    await hold(admin_conn, task, "lead", ["api"])
    before = await count(admin_conn, "SELECT 1 FROM mycelium.messages")
    r = await post(client, task, "sec")
    assert r.status_code == 409
    body = r.json()
    assert body["error"] == "not_your_floor"
    assert "@sec does not have the floor" in body["message"]
    assert "@lead holds the floor; @api may speak" in body["message"]
    assert body["holder"] == "lead" and body["speakers"] == ["api"]
    assert await count(admin_conn, "SELECT 1 FROM mycelium.messages") == before


async def test_a_floor_with_no_speakers_says_no_one_else_may_speak(client, task, admin_conn):
    await hold(admin_conn, task, "lead")
    r = await post(client, task, "api")
    assert r.status_code == 409
    assert r.json()["message"].endswith("@lead holds the floor; no one else may speak right now")


async def test_the_same_refusal_reaches_a_plain_sql_insert(task, admin_conn):
    await hold(admin_conn, task, "lead", ["api"])
    err = await refused(admin_conn, "INSERT INTO mycelium.messages (room, episode, sender, content) "
                        "VALUES ('atlas', $1, 'sec', 'sneaking in')", task.episode)
    assert err.sqlstate == "MY409"
    assert "@sec does not have the floor: @lead holds the floor; @api may speak" in str(err)
    assert await count(admin_conn, "SELECT 1 FROM mycelium.messages WHERE sender = 'sec'") == 0


async def test_an_unknown_thread_is_404_even_when_other_floors_are_held(client, task, admin_conn):
    await hold(admin_conn, task, "lead")
    r = await client.post("/api/rooms/atlas/messages",
                          json={"sender_handle": "lead", "content": "hi",
                                "episode": "urn:ioc:mycelium:episode:atlas:nosuchthread"})
    assert r.status_code == 404
    assert r.json()["message"] == "No thread 'nosuchthread' in room 'atlas'"
    err = await refused(admin_conn, "INSERT INTO mycelium.messages (room, episode, sender) "
                        "VALUES ('atlas', 'urn:ioc:mycelium:episode:atlas:nosuchthread', 'lead')")
    assert err.sqlstate == "MY404"


async def test_a_thread_of_another_room_is_unknown_here(client, task, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('other')")
    elsewhere = await make_thread(admin_conn, "other", "work/x", "X")
    r = await client.post("/api/rooms/atlas/messages",
                          json={"sender_handle": "api", "content": "hi", "episode": elsewhere.episode})
    assert r.status_code == 404


async def test_an_outsider_to_a_frozen_roster_gets_403_even_if_the_floor_admits_it(client, task, admin_conn):
    await hold(admin_conn, task, "lead", ["api", "web"])
    await admin_conn.execute("SELECT mycelium.freeze_roster('atlas', $1, ARRAY['api'], 'broker')", task.episode)
    r = await post(client, task, "web")
    assert r.status_code == 403
    assert r.json()["message"] == f"@web is not a member of the negotiation in thread '{task.short}'"
    assert (await post(client, task, "api")).status_code == 201
    # whoever froze the roster runs the negotiation, but still needs the floor
    r = await post(client, task, "broker")
    assert r.status_code == 409
    await admin_conn.execute("SELECT mycelium.thaw_roster('atlas', $1)", task.episode)
    assert (await post(client, task, "web")).status_code == 201


async def test_refusals_come_in_the_order_unknown_roster_floor(task, admin_conn):
    await hold(admin_conn, task, "lead")
    await admin_conn.execute("SELECT mycelium.freeze_roster('atlas', $1, ARRAY['lead'], 'broker')",
                             task.episode)
    insert = "INSERT INTO mycelium.messages (room, episode, sender) VALUES ('atlas', $1, $2)"
    assert (await refused(admin_conn, insert, task.episode, "sec")).sqlstate == "MY403"
    assert (await refused(admin_conn, insert, task.episode + "x", "lead")).sqlstate == "MY404"


async def test_a_floor_covers_only_its_own_thread(client, task, admin_conn):
    other = await make_thread(admin_conn, "atlas", "work/other", "Other")
    await hold(admin_conn, task, "lead")
    assert (await post(client, other, "sec")).status_code == 201
    assert (await post(client, task, "sec")).status_code == 409


async def test_the_room_channel_never_holds_a_floor(client, task, admin_conn):
    err = await refused(admin_conn, "SELECT mycelium.hold_floor('atlas', NULL, 'lead')")
    assert err.sqlstate == "MY422"
    err = await refused(admin_conn, "INSERT INTO mycelium.floors (room, episode, holder) "
                        "VALUES ('atlas', mycelium.live_episode('atlas'), 'lead')")
    assert err.sqlstate in {"MY422", "23514"}
    assert (await post(client, None, "anyone")).status_code == 201


async def test_a_floor_needs_a_known_thread_and_a_valid_holder(task, admin_conn):
    err = await refused(admin_conn, "SELECT mycelium.hold_floor('atlas', 'nosuchthread', 'lead')")
    assert err.sqlstate == "MY404"
    err = await refused(admin_conn, "SELECT mycelium.hold_floor('atlas', $1, '  @ ')", task.episode)
    assert err.sqlstate == "MY422"
    err = await refused(admin_conn, "SELECT mycelium.hold_floor('nowhere', $1, 'lead')", task.episode)
    assert err.sqlstate == "MY404"


async def test_holding_again_replaces_and_release_is_true_once(task, admin_conn):
    await hold(admin_conn, task, "lead", ["api"])
    row = await hold(admin_conn, task, "web", ["@Lead", "web", "WEB#x"])
    assert row["holder"] == "web" and row["speakers"] == ["lead"]
    release = "SELECT mycelium.release_floor('atlas', $1)"
    assert await admin_conn.fetchval(release, task.episode) is True
    assert await admin_conn.fetchval(release, task.episode) is False


async def test_floor_changes_raise_floor_notices_naming_the_task_row(task, admin_conn):
    notices = "SELECT payload FROM mycelium.messages WHERE payload_type = 'notice' AND payload->>'subkind' = 'floor' ORDER BY position"
    await hold(admin_conn, task, "lead")
    await hold(admin_conn, task, "lead")  # the same floor again: silent
    await hold(admin_conn, task, "lead", ["api"])
    await admin_conn.fetchval("SELECT mycelium.release_floor('atlas', $1)", task.episode)
    await admin_conn.fetchval("SELECT mycelium.release_floor('atlas', $1)", task.episode)  # nothing held: silent
    found = [r["payload"] for r in await admin_conn.fetch(notices)]
    assert len(found) == 3
    assert all(p["key"] == "work/add-apple-pay" and p["title"] == "Add Apple Pay" for p in found)
    assert all(p["episode"] == task.episode and p["holder"] == "lead" for p in found)
    assert [p["speakers"] for p in found] == ["", "api", "api"]
    assert [p.get("released") for p in found] == [None, None, "1"]


async def test_a_floor_notice_on_a_thread_without_a_row_names_the_short_id(task, admin_conn):
    # an orphan thread: its memory is gone, its messages remain
    orphan = await make_thread(admin_conn, "atlas", "context/scratch", "Scratch")
    await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'api', 'first', $1)", orphan.episode)
    await admin_conn.execute("SELECT mycelium.delete_memory('atlas', 'context/scratch')")
    await hold(admin_conn, orphan, "lead")
    payload = await admin_conn.fetchval("SELECT payload FROM mycelium.messages WHERE payload->>'subkind' = 'floor'")
    assert payload["key"] == orphan.short and payload["title"] is None


async def test_a_direct_write_to_the_floors_table_is_normalised_and_announced(task, admin_conn):
    await admin_conn.execute("INSERT INTO mycelium.floors (room, episode, holder, speakers) "
                             "VALUES ('atlas', $1, '@Lead', ARRAY['API', 'lead'])", task.episode)
    row = await admin_conn.fetchrow("SELECT holder, speakers FROM mycelium.floors")
    assert (row["holder"], row["speakers"]) == ("lead", ["api"])
    assert await count(admin_conn, "SELECT 1 FROM mycelium.messages WHERE payload->>'subkind' = 'floor'") == 1


async def test_members_lists_held_floors_until_released(client, task, admin_conn):
    await hold(admin_conn, task, "lead", ["api"])
    floors = (await client.get("/api/rooms/atlas/sessions/members")).json()["floors"]
    assert floors == [{"thread": task.short, "episode": task.episode, "key": "work/add-apple-pay",
                       "title": "Add Apple Pay", "holder": "lead", "speakers": ["api"]}]
    await admin_conn.fetchval("SELECT mycelium.release_floor('atlas', $1)", task.episode)
    assert (await client.get("/api/rooms/atlas/sessions/members")).json()["floors"] == []


async def test_reply_passes_the_same_gate(client, task, admin_conn):
    await hold(admin_conn, task, "lead", ["api"])
    r = await client.post("/api/rooms/atlas/reply", json={"handle": "sec", "text": "me too", "episode": task.episode})
    assert r.status_code == 409
    r = await client.post("/api/rooms/atlas/reply", json={"handle": "api", "text": "on it", "episode": task.episode})
    assert r.status_code == 201, r.text


async def test_a_refused_write_wakes_nobody(task, admin_conn, db_dsn):
    await hold(admin_conn, task, "lead")
    listener = await asyncpg.connect(db_dsn)
    heard: list[str] = []
    await listener.add_listener("mycelium_wakes", lambda *a: heard.append(a[-1]))
    await listener.add_listener("mycelium_messages", lambda *a: heard.append(a[-1]))
    try:
        await refused(admin_conn, "SELECT id FROM mycelium.post_message('atlas', 'sec', '@api look', $1)", task.episode)
        await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'lead', '@api look', $1)", task.episode)
        await listener.execute("SELECT 1")  # notifications arrive before this round trip completes
        assert any("\tapi" in h for h in heard)
        assert not any("sec" in h for h in heard)
        positions = await admin_conn.fetch("SELECT position FROM mycelium.messages ORDER BY position")
        assert [r["position"] for r in positions] == list(range(1, len(positions) + 1))  # no gap left
    finally:
        await listener.close()
