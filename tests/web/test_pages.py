"""Every page over plain HTTP on the real app: its status and what it shows; forms post, land and
redirect; bad input is a clear 4xx page; text written by agents is escaped."""

from __future__ import annotations

import re

import pytest

XSS = '<script>alert("x")</script> <img src=x onerror=alert(1)> [click](javascript:alert(1))'


async def room_with_work(client):
    await client.post("/api/rooms", json={"name": "atlas", "created_by": "ana"})
    r = await client.post("/api/rooms/atlas/tasks", json={"title": "Ship passkey login", "handle": "ana",
                                                         "assignee": "julia"})
    assert r.status_code == 201, r.text
    await client.post("/api/rooms/atlas/tasks", json={"title": "Review login", "handle": "ana"})
    await client.post("/api/rooms/atlas/fields", json={"key": "work/review-login", "handle": "ana",
                                                       "fields": {"depends-on": "work/ship-passkey-login"}})
    return r.json()["key"]


async def test_the_rooms_page_lists_rooms_and_a_form_creates_one(client):
    r = await client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "No rooms yet" in r.text
    r = await client.post("/rooms", data={"name": "orbit", "title": "Orbit room", "handle": "ana"},
                          follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/room/orbit"
    assert "mycelium_handle=ana" in r.headers["set-cookie"]
    assert (await client.get("/api/rooms/orbit")).json()["title"] == "Orbit room"
    listed = await client.get("/")
    assert 'href="/room/orbit"' in listed.text and "Orbit room" in listed.text


async def test_a_bad_room_name_is_a_clear_4xx_page_and_nothing_is_written(client):
    r = await client.post("/rooms", data={"name": "a/b", "handle": "ana"}, follow_redirects=False)
    assert r.status_code == 422 and "text/html" in r.headers["content-type"]
    assert "path separator" in r.text
    r = await client.post("/rooms", data={"handle": "ana"}, follow_redirects=False)
    assert r.status_code == 422 and "name" in r.text
    assert (await client.get("/api/rooms")).json() == []


async def test_the_room_page_shows_the_board_in_three_columns_the_timeline_and_members(client):
    key = await room_with_work(client)
    claim = await client.post("/api/rooms/atlas/assignments/claim", json={"key": key, "handle": "nova"})
    assert claim.status_code == 200
    await client.post("/api/rooms/atlas/messages", json={"sender_handle": "nova", "content": "hello room"})
    for i in range(3):
        await client.post("/api/rooms/atlas/messages", json={"sender_handle": "nova", "content": f"step {i}",
                                                             "episode": claim.json()["episode"]})
    r = await client.get("/room/atlas")
    assert r.status_code == 200
    page = r.text
    needs, flight, done = (page.split('id="col-')[i] for i in (1, 2, 3))
    assert "Review login" in needs and "waits on" in needs and "work/ship-passkey-login" in needs
    assert "Ship passkey login" in flight and "held by @nova" in flight and "for @julia" in flight
    assert re.search(r"data-left=\"\d+\"", flight) and "left" in flight
    assert "Nothing here." in done
    assert "hello room" in page
    # the thread's three pings read as one line quoting its newest message
    assert page.count('class="line thread"') == 1 and "step 2" in page and "3 new" in page
    assert "@nova claimed" in page and "@ana filed" in page
    assert "No floor is held" in page


async def test_the_task_page_shows_fields_dependencies_both_ways_and_its_thread(client):
    key = await room_with_work(client)
    row = (await client.get(f"/api/rooms/atlas/tasks/{key}")).json()
    await client.post("/api/rooms/atlas/messages", json={"sender_handle": "nova", "content": "on it",
                                                         "episode": row["episode"]})
    r = await client.get(f"/room/atlas/task/{key}")
    assert r.status_code == 200
    assert "on it" in r.text and "Needed by" in r.text and "work/review-login" in r.text
    r = await client.get("/room/atlas/task/work/review-login")
    assert 'href="/room/atlas/task/work/ship-passkey-login"' in r.text and "waiting" in r.text
    assert (await client.get("/room/atlas/task/work/nope")).status_code == 404


async def test_forms_post_a_message_file_a_task_and_claim_it(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    r = await client.post("/room/atlas/messages", data={"handle": "ana", "content": "from the page"},
                          follow_redirects=False)
    assert r.status_code == 303
    r = await client.post("/room/atlas/tasks", data={"handle": "ana", "title": "First"}, follow_redirects=False)
    assert r.status_code == 303
    r = await client.post("/room/atlas/tasks", data={"handle": "ana", "title": "Second",
                                                     "depends_on": "work/first"}, follow_redirects=False)
    assert r.status_code == 303
    second = (await client.get("/api/rooms/atlas/tasks/work/second")).json()
    assert second["waiting_on"] == ["work/first"]
    r = await client.post("/room/atlas/lease", data={"handle": "ana", "key": "work/first", "action": "claim",
                                                     "back": "/room/atlas/task/work/first"},
                          follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/room/atlas/task/work/first"
    assert (await client.get("/api/rooms/atlas/tasks/work/first")).json()["owner"] == "ana"
    messages = (await client.get("/api/rooms/atlas/messages")).json()
    assert [m["content"] for m in messages] == ["from the page"]


async def test_a_task_whose_dependency_is_missing_is_refused_whole(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    r = await client.post("/room/atlas/tasks", data={"handle": "ana", "title": "Orphan", "parent": "work/none"},
                          follow_redirects=False)
    assert r.status_code == 404 and "work/none" in r.text
    assert (await client.get("/api/rooms/atlas/tasks")).json() == []


async def test_bad_form_input_is_a_4xx_page_never_a_500(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    cases = [
        ("/room/atlas/messages", {"handle": "ana"}),
        ("/room/atlas/messages", {"content": "who?"}),
        ("/room/atlas/lease", {"handle": "ana", "key": "work/x", "action": "steal"}),
        ("/room/atlas/lease", {"handle": "ana", "key": "work/x", "action": "claim"}),
        ("/room/atlas/memory", {"handle": "ana", "key": "notes/a", "text": "x", "base_version": "two"}),
        ("/room/nowhere/messages", {"handle": "ana", "content": "hi"}),
        ("/transitions/release", {"handle": "op", "request_id": "r1", "verified": "maybe", "reason": "x"}),
    ]
    for path, form in cases:
        r = await client.post(path, data=form, follow_redirects=False)
        assert 400 <= r.status_code < 500, (path, form, r.status_code, r.text[:300])
        assert "refusal-message" in r.text
    for path in ("/room/nowhere", "/room/atlas/memory/notes/none", "/transitions/none",
                 "/transitions?outcome=BOGUS", "/room/atlas/memory/x?a=-1"):
        r = await client.get(path)
        assert 400 <= r.status_code < 500, (path, r.status_code)


async def test_a_floor_refusal_shows_its_reason(client, db_dsn):
    import asyncpg

    await client.post("/api/rooms", json={"name": "atlas"})
    row = (await client.post("/api/rooms/atlas/tasks", json={"title": "Argue", "handle": "ana"})).json()
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("SELECT mycelium.hold_floor('atlas', $1, 'nova', '{}')", row["episode"])
    finally:
        await conn.close()
    short = row["episode"].rsplit(":", 1)[-1]
    r = await client.post("/room/atlas/messages", data={"handle": "ana", "content": "me too", "episode": short},
                          follow_redirects=False)
    assert r.status_code == 409 and "does not have the floor" in r.text
    page = await client.get("/room/atlas")
    assert "@nova holds the floor" in page.text


@pytest.mark.parametrize("where", ["room", "thread", "memory"])
async def test_text_written_by_agents_is_escaped(client, where):
    await client.post("/api/rooms", json={"name": "atlas"})
    row = (await client.post("/api/rooms/atlas/tasks", json={"title": "T <b>bold</b>", "handle": "ana"})).json()
    if where == "memory":
        await client.post("/api/rooms/atlas/memory", json={"items": [{"key": "notes/x", "value": XSS,
                                                                      "created_by": "ev<i>l"}]})
        r = await client.get("/room/atlas/memory/notes/x")
    else:
        episode = row["episode"] if where == "thread" else None
        await client.post("/api/rooms/atlas/messages", json={"sender_handle": "eve", "content": XSS,
                                                             "episode": episode})
        r = await client.get("/room/atlas" if where == "room" else f"/room/atlas/task/{row['key']}")
    assert r.status_code == 200
    assert "<script>alert" not in r.text and "<img src=x" not in r.text and "<b>bold</b>" not in r.text
    assert 'href="javascript:' not in r.text
    assert "&lt;script&gt;" in r.text


async def test_memories_list_a_memory_its_links_and_history_with_a_diff(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    def write(key, text, base=None):
        return client.post("/api/rooms/atlas/memory", json={"items": [
            {"key": key, "value": text, "created_by": "ana", "base_version": base}]})
    await write("notes/target", "the target")
    await write("notes/a", "first line\nsee [[notes/target]]")
    await write("notes/a", "first line changed\nsee [[notes/target]]")
    r = await client.get("/room/atlas/memories")
    assert r.status_code == 200 and "notes/a" in r.text and "notes/" in r.text
    assert (await client.get("/room/atlas/memories?prefix=notes/")).status_code == 200
    r = await client.get("/room/atlas/memory/notes/a")
    assert r.status_code == 200 and 'href="/room/atlas/memory/notes/target"' in r.text and "v2" in r.text
    r = await client.get("/room/atlas/memory/notes/a?a=1&b=2")
    assert '<span class="d-del">-first line</span>' in r.text
    assert '<span class="d-add">+first line changed</span>' in r.text
    back = await client.get("/room/atlas/memory/notes/target")
    assert 'href="/room/atlas/memory/notes/a"' in back.text


async def test_a_stale_memory_write_shows_the_current_text_and_what_changed(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    await client.post("/api/rooms/atlas/memory", json={"items": [{"key": "notes/a", "value": "one",
                                                                  "created_by": "ana"}]})
    await client.post("/api/rooms/atlas/memory", json={"items": [{"key": "notes/a", "value": "two",
                                                                  "created_by": "nova"}]})
    r = await client.post("/room/atlas/memory", data={"key": "notes/a", "text": "mine", "handle": "ana",
                                                      "base_version": "1"}, follow_redirects=False)
    assert r.status_code == 409 and "version 2" in r.text and "two" in r.text and "+two" in r.text
    assert (await client.get("/api/rooms/atlas/memory/notes/a")).json()["value"] == {"text": "two"}
    r = await client.post("/room/atlas/memory", data={"key": "notes/a", "text": "merged", "handle": "ana",
                                                      "base_version": "2"}, follow_redirects=False)
    assert r.status_code == 303
    assert (await client.get("/api/rooms/atlas/memory/notes/a")).json()["value"] == {"text": "merged"}


async def test_search_shows_hits_and_facets_as_switches(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    for who in ("nova", "nova", "julia"):
        await client.post("/api/rooms/atlas/messages", json={"sender_handle": who, "content": f"review by {who}"})
    r = await client.get("/room/atlas/search", params={"q": "review"})
    assert r.status_code == 200 and "review by julia" in r.text and "from" in r.text
    assert "from%3Anova" in r.text
    r = await client.get("/room/atlas/search", params={"q": "review from:nova"})
    assert "review by julia" not in r.text and 'aria-pressed="true"' in r.text
    r = await client.get("/room/atlas/search", params={"q": "after:banana"})
    assert r.status_code == 200 and "banana" in r.text
    r = await client.get("/room/atlas/search", params={"q": "review", "what": "memories"})
    assert r.status_code == 200


async def test_transitions_list_one_transition_with_its_receipts_and_an_operator_release(client):
    claim = await client.post("/api/transitions/claim", json={
        "request_id": "req-1", "transition_key": "charge:1", "tool": "charge", "owner": "w1",
        "side_effect_class": "non_idempotent_mutate", "agent_id": "shop"})
    assert claim.status_code == 200, claim.text
    fence = claim.json()["transition"]["fence"]
    await client.post("/api/transitions/boundary", json={"request_id": "req-1", "owner": "w1", "fence": fence,
                                                         "boundary": "crossed"})
    await client.post("/api/transitions/unknown", json={"request_id": "req-1", "owner": "w1", "fence": fence,
                                                        "error": "timeout"})
    r = await client.get("/transitions")
    assert r.status_code == 200 and "req-1" in r.text and "UNKNOWN" in r.text
    assert "every chain verifies" in r.text
    r = await client.get("/transitions?outcome=UNKNOWN")
    assert "req-1" in r.text
    r = await client.get("/transitions/req-1")
    assert r.status_code == 200 and "Release it" in r.text
    r = await client.post("/transitions/release", data={"request_id": "req-1", "verified": "completed",
                                                        "reason": "checked the provider", "handle": "op"},
                          follow_redirects=False)
    assert r.status_code == 303, r.text
    shown = (await client.get("/api/transitions/req-1")).json()
    assert shown["resolved_by"] == "op" and shown["resolution_reason"] == "checked the provider"
    r = await client.get("/transitions/req-1")
    assert "checked the provider" in r.text and "Release it" not in r.text
    assert "released" in (await client.get("/transitions?outcome=released")).text
    assert "req-1" in (await client.get("/transitions?outcome=released")).text
    assert "req-1" not in (await client.get("/transitions?outcome=IN_FLIGHT")).text
    receipts = (await client.get("/transitions/req-1")).text.split('id="receipts-title"')[1]
    assert "No receipt yet" not in receipts
    r = await client.get("/receipts")
    assert r.status_code == 200 and ">shop</a>" in r.text and "verified" in r.text


async def test_static_files_are_served_and_pages_name_no_other_host(client):
    assert (await client.get("/static/live.js")).status_code == 200
    assert (await client.get("/static/app.css")).status_code == 200
    await client.post("/api/rooms", json={"name": "atlas"})
    for path in ("/", "/room/atlas", "/room/atlas/memories", "/transitions"):
        text = (await client.get(path)).text
        assert not re.search(r'(src|href)="(https?:)?//', text), path


async def test_a_board_column_shows_its_first_rows_and_how_many_more(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    for i in range(3):
        await client.post("/api/rooms/atlas/tasks", json={"title": f"Task {i}", "handle": "ana"})
    r = await client.get("/room/atlas", params={"rows": 2})
    assert r.status_code == 200 and r.text.count('class="card"') == 2 and "1 more" in r.text
    board = r.text.split('id="timeline"')[0]
    assert 'href="?rows=8"' in board and "Task 2" in board and "Task 0" not in board
    assert (await client.get("/room/atlas")).text.count('class="card"') == 3
    assert (await client.get("/room/atlas", params={"rows": 0})).status_code == 422
    parts = await client.get("/room/atlas/parts", params={"rows": 2})
    assert parts.status_code == 200 and parts.text.count('data-part=') == 3


async def test_composer_commands_act_on_the_row_and_other_slashes_are_text(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    row = (await client.post("/api/rooms/atlas/tasks", json={"title": "Do it", "handle": "ana"})).json()
    short = row["episode"].rsplit(":", 1)[-1]
    post = lambda **form: client.post("/room/atlas/messages", data=form, follow_redirects=False)  # noqa: E731
    assert (await post(handle="nova", content="/claim", episode=short)).status_code == 303
    assert (await client.get("/api/rooms/atlas/tasks/work/do-it")).json()["owner"] == "nova"
    assert (await post(handle="nova", content="/release back to the pool", episode=short)).status_code == 303
    lease = (await client.get("/api/rooms/atlas/assignments/work/do-it")).json()
    assert lease["assignment"] == "released" and lease["assignment_note"] == "back to the pool"
    assert (await post(handle="ana", content="/resolve work/do-it")).status_code == 303
    assert (await client.get("/api/rooms/atlas/tasks/work/do-it")).json()["assignment"] == "resolved"
    refused = await post(handle="ana", content="/resolve")
    assert refused.status_code == 422 and "names a row" in refused.text
    assert (await post(handle="ana", content="/claim work/none")).status_code == 404
    assert (await post(handle="ana", content="/usr/bin is where it lives")).status_code == 303
    said = [m["content"] for m in (await client.get("/api/rooms/atlas/messages")).json()]
    assert said == ["/usr/bin is where it lives"]


@pytest.mark.parametrize("back", ["//evil.example/x", "https://evil.example/", "/\\evil.example", "room/atlas"])
async def test_a_form_only_sends_the_browser_back_to_a_page_of_this_hub(client, back):
    await client.post("/api/rooms", json={"name": "atlas"})
    r = await client.post("/room/atlas/messages", data={"handle": "ana", "content": "hi", "back": back},
                          follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/room/atlas"


async def test_the_talk_parts_are_what_was_said_read_without_the_board(client):
    key = await room_with_work(client)
    row = (await client.get(f"/api/rooms/atlas/tasks/{key}")).json()
    await client.post("/api/rooms/atlas/messages", json={"sender_handle": "nova", "content": "in the thread",
                                                         "episode": row["episode"]})
    talk = (await client.get("/room/atlas/parts?only=talk")).text
    assert 'data-part="timeline"' in talk and 'data-part="board"' not in talk and 'data-part="members"' not in talk
    # the thread's folded line still names its row, read without the board
    assert f'href="/room/atlas/task/{key}">Ship passkey login</a>' in talk and "in the thread" in talk
    full = (await client.get("/room/atlas/parts")).text
    assert all(f'data-part="{p}"' in full for p in ("board", "timeline", "members"))
    timeline = re.compile(r'<ol class="timeline".*?</ol>', re.S)
    assert timeline.search(talk).group(0) == timeline.search(full).group(0)  # the same timeline either way
    thread = (await client.get(f"/room/atlas/task-parts/{key}?only=talk")).text
    assert 'data-part="thread"' in thread and 'data-part="flow"' in thread and 'data-part="row"' not in thread
    assert "in the thread" in thread and row["short_id"] in thread
    assert 'data-part="row"' in (await client.get(f"/room/atlas/task-parts/{key}")).text
    bad = await client.get("/room/atlas/parts?only=board")
    assert bad.status_code == 422 and "text/html" in bad.headers["content-type"] and "only" in bad.text
    assert (await client.get("/room/atlas/task-parts/work/nope?only=talk")).status_code == 404


async def till_chains(client) -> list[str]:
    """The receipts page's rows of agent till (one per lane)."""
    return [seg.split("</tr>")[0] for seg in (await client.get("/receipts")).text.split(">till</a>")[1:]]


async def test_the_receipts_page_checks_every_signature_and_names_a_bad_one(client, admin_conn, tmp_path):
    from mycelium.ledger import receipts as signing
    from mycelium.verbs import verbs_on
    from mycelium.workers.receipts import register, sign_pending

    key = signing.KeyStore(tmp_path / "keys").current()
    await register(verbs_on(admin_conn), key)
    for i in (1, 2):
        claim = await client.post("/api/transitions/claim", json={
            "request_id": f"pay-{i}", "transition_key": f"pay:{i}", "tool": "pay", "owner": "w1",
            "side_effect_class": "non_idempotent_mutate", "agent_id": "till"})
        done = await client.post("/api/transitions/complete", json={
            "request_id": f"pay-{i}", "owner": "w1", "fence": claim.json()["transition"]["fence"]})
        assert done.status_code == 200, done.text
    assert await sign_pending(verbs_on(admin_conn), key) >= 2
    rows = await till_chains(client)
    assert rows and all("verified</span>, signatures included" in row for row in rows)
    # someone with the server's superuser swaps one stored signature for another (the append-only
    # trigger skipped): the chain of hashes is intact, the signature no longer matches its receipt
    ids = await admin_conn.fetch("SELECT s.id FROM mycelium.receipt_signatures s JOIN mycelium.receipts r"
                                 " ON r.id = s.id WHERE r.agent_id = 'till' ORDER BY s.id")
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL session_replication_role = replica")
        await admin_conn.execute("UPDATE mycelium.receipt_signatures SET signature ="
                                 " (SELECT signature FROM mycelium.receipt_signatures WHERE id = $1) WHERE id = $2",
                                 ids[0]["id"], ids[-1]["id"])
    rows = "".join(await till_chains(client))
    assert "broken" in rows and f"bad signature (key {key.key_id})" in rows
    assert (await client.get("/api/receipts/verify", params={"agent": "till"})).json()["ok"] is False
