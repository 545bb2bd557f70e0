"""Tasks and their threads: a board row and its conversation thread, one to one."""

from __future__ import annotations

import pytest

from tests.board.conftest import ROOM, episode, fields, notices, refusal, task


async def test_a_task_is_filed_in_work_with_a_slug_key_its_own_thread_and_no_lease(client, room, admin_conn):
    r = await client.post(f"/api/rooms/{room}/tasks", json={"title": "Ship passkey login", "handle": "julia"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["key"] == "work/ship-passkey-login"
    assert body["episode"].startswith(f"urn:ioc:mycelium:episode:{room}:")
    assert body["meta"] == {"status": "open", "kind": "action"}
    assert "owner" not in body["meta"] and "assignment" not in body["meta"]
    r = await client.post(f"/api/rooms/{room}/tasks", json={"title": "Add Apple Pay", "handle": "julia"})
    second = r.json()
    assert second["key"] == "work/add-apple-pay"
    assert second["episode"] != body["episode"]
    row = await admin_conn.fetchrow("SELECT * FROM mycelium.row_of_episode($1, $2)", room, body["episode"])
    assert (row["key"], row["title"], row["board"]) == ("work/ship-passkey-login", "Ship passkey login", True)
    short = body["episode"].rsplit(":", 1)[1]
    by_short = await admin_conn.fetchrow("SELECT * FROM mycelium.row_of_episode($1, $2)", room, short)
    assert by_short["key"] == "work/ship-passkey-login"
    assert await episode(admin_conn, body["key"]) == body["episode"]


@pytest.mark.parametrize(("title", "slug"), [
    ("Ship passkey login", "ship-passkey-login"),
    ("  --Hello, World!!  ", "hello-world"),
    ("!!!", None),
    ("A" * 60, "a" * 48),
    ("x" * 47 + " tail", "x" * 47),
])
async def test_the_key_slug_is_lowercase_dashed_trimmed_and_at_most_48_characters(admin_conn, title, slug):
    assert await admin_conn.fetchval("SELECT mycelium.task_slug($1)", title) == slug


async def test_filing_raises_one_filed_notice_with_kind_assignee_title_and_thread(client, room, admin_conn):
    r = await client.post(f"/api/rooms/{room}/tasks",
                          json={"title": "Review the spec", "handle": "julia", "assignee": "@Bob"})
    body = r.json()
    assert body["meta"]["assignee"] == "bob"
    filed = await notices(admin_conn, room, "filed")
    assert filed == [{"subkind": "filed", "key": "work/review-the-spec", "kind": "action", "assignee": "bob",
                      "title": "Review the spec", "episode": body["episode"], "by": "julia"}]


async def test_a_board_row_written_through_psql_or_the_memory_route_is_filed_too(client, room, admin_conn):
    await admin_conn.execute(
        "INSERT INTO mycelium.memories (room, key, value, created_by, updated_by)"
        " VALUES ($1, 'decisions/token-ttl', '{\"text\": \"Token TTL\"}', 'ana', 'ana')", room)
    r = await client.post(f"/api/rooms/{room}/memory",
                          json={"items": [{"key": "status/ci", "value": "CI is red", "created_by": "bo",
                                           "embed": False}]})
    assert r.status_code == 201
    await client.post(f"/api/rooms/{room}/memory",
                      json={"items": [{"key": "context/goal", "value": "a note", "created_by": "bo",
                                       "embed": False}]})
    keys = [n["key"] for n in await notices(admin_conn, room, "filed")]
    assert keys == ["decisions/token-ttl", "status/ci"]
    episodes = await admin_conn.fetch("SELECT episode FROM mycelium.memories WHERE room = $1", room)
    assert len({e["episode"] for e in episodes}) == 3


async def test_a_field_write_keeps_the_thread_and_files_nothing_new(client, room, admin_conn):
    key = await task(admin_conn, "Keep thread")
    before = await episode(admin_conn, key)
    await fields(admin_conn, key, {"status": "in_review"})
    after = await episode(admin_conn, key)
    assert before == after
    assert len(await notices(admin_conn, room, "filed")) == 1


async def test_a_parent_must_exist_and_is_recorded_as_part_of(client, room):
    url = f"/api/rooms/{room}/tasks"
    r = await client.post(url, json={"title": "Child", "handle": "j", "parent": "work/nope"})
    assert r.status_code == 404
    assert r.json()["error"] == "parent_not_found"
    assert r.json()["message"] == f"No task 'work/nope' in room '{room}' to parent to"
    assert (await client.get(f"/api/rooms/{room}/memory/work/child")).status_code == 404
    await client.post(f"/api/rooms/{room}/tasks", json={"title": "Parent", "handle": "j"})
    r = await client.post(url, json={"title": "Child", "handle": "j", "parent": "work/parent"})
    assert r.status_code == 201
    assert r.json()["meta"]["part-of"] == "work/parent"


@pytest.mark.parametrize(("body", "status", "error"), [
    ({"title": "x", "handle": "j", "key": "plan/x"}, 422, "not_a_board_row"),
    ({"title": "   ", "handle": "j"}, 422, "missing_title"),
    ({"title": "x", "handle": "-bad"}, 422, "invalid_handle"),
    ({"title": "x", "handle": "j", "assignee": "a b"}, 422, "invalid_handle"),
    ({"title": "x"}, 422, "invalid_request"),
    ({"title": "x", "handle": "j", "extra": 1}, 422, "invalid_request"),
])
async def test_bad_task_input_is_a_clear_4xx(client, room, body, status, error):
    r = await client.post(f"/api/rooms/{room}/tasks", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"] == error


async def test_a_task_in_a_missing_room_is_404(client):
    r = await client.post("/api/rooms/nowhere/tasks", json={"title": "x", "handle": "j"})
    assert r.status_code == 404
    assert r.json()["error"] == "room_not_found"


async def test_the_same_refusals_come_from_plain_sql(admin_conn, room):
    sql = "SELECT 1 FROM mycelium.create_task($1, 'x', 'j', $2, NULL, $3)"
    assert (await refusal(admin_conn, sql, room, "plan/x", None))[0] == 422
    status, detail, _ = await refusal(admin_conn, sql, room, None, "work/no")
    assert (status, detail["error"]) == (404, "parent_not_found")
    assert (await refusal(admin_conn, "SELECT 1 FROM mycelium.create_task('nowhere', 'x', 'j')"))[0] == 404


async def test_the_board_lists_rows_by_attention_and_finds_one_by_key_or_thread_id(client, room, admin_conn):
    a = await task(admin_conn, "Alpha")
    b = await task(admin_conn, "Beta")
    c = await task(admin_conn, "Gamma")
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'bob')", room, b)
    await admin_conn.execute("SELECT 1 FROM mycelium.resolve_task($1, $2, 'bob')", room, c)
    await admin_conn.execute(
        "SELECT 1 FROM mycelium.write_memory($1, 'context/note', '\"not a row\"', 'ana')", room)
    everything = (await client.get(f"/api/rooms/{room}/tasks")).json()
    assert sorted(r["key"] for r in everything) == [a, b, c]
    by = {r["key"]: r for r in everything}
    assert [by[k]["attention"] for k in (a, b, c)] == ["needs_you", "in_flight", "resolved"]
    assert by[b]["owner"] == "bob" and by[b]["assignment"] == "held"
    needs = (await client.get(f"/api/rooms/{room}/tasks", params={"filter": "needs-you"})).json()
    assert [r["key"] for r in needs] == [a]
    assert (await client.get(f"/api/rooms/{room}/tasks", params={"filter": "bogus"})).status_code == 422
    one = (await client.get(f"/api/rooms/{room}/tasks/{by[a]['short_id']}")).json()
    assert one["key"] == a
    assert (await client.get(f"/api/rooms/{room}/tasks/{a}")).json()["short_id"] == by[a]["short_id"]
    assert (await client.get(f"/api/rooms/{room}/tasks/work/none")).status_code == 404


async def test_no_two_rows_share_a_thread_and_a_binding_never_changes(admin_conn, room):
    a = await task(admin_conn, "One")
    b = await task(admin_conn, "Two")
    other = await episode(admin_conn, b)
    status, detail, _ = await refusal(
        admin_conn, "UPDATE mycelium.memories SET episode = $3 WHERE room = $1 AND key = $2", room, a, other)
    assert (status, detail["error"]) == (409, "binding_immutable")


async def test_room_is_first_in_every_board_lookup(admin_conn, room):
    await admin_conn.execute("SELECT mycelium.create_room('other')")
    key = await task(admin_conn, "Shared title", room="other")
    ep = await admin_conn.fetchval("SELECT mycelium.episode_of('other', $1)", key)
    assert await admin_conn.fetchval("SELECT mycelium.episode_of($1, $2)", ROOM, key) is None
    assert await admin_conn.fetch("SELECT * FROM mycelium.row_of_episode($1, $2)", ROOM, ep) == []
