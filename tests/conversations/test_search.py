"""Message search over a seeded room (hub.md §17.2 I): the grammar of contracts/message-search.json
run in Postgres — words, phrases, negation, fields and aliases, closed values, time, sorts, problems
reported, disjunctive facets, cursor paging, snippets and same-thread context."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mycelium.core import search_grammar as grammar


@pytest.fixture
async def seeded(client, task, admin_conn):
    async def post(sender, content, episode=None, to=None):
        body = {"sender_handle": sender, "content": content, **({"episode": episode} if episode else {}),
                **({"recipient_handle": to, "message_type": "direct"} if to else {})}
        r = await client.post("/api/rooms/atlas/messages", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    m1 = await post("avery", "Kickoff: we should support Apple Pay this sprint, @bob")
    m2 = await post("bob", "Sure, I'll look at the checkout flow first. See https://example.com/pay",
                    to="avery")
    m3 = await post("avery", "Apple Pay needs a merchant id `merchant.com.atlas`; apple apple apple. "
                             "@~carol can you help?", task.episode)
    r = await client.post("/api/rooms/atlas/reply", json={
        "handle": "bob", "episode": task.episode, "text": "Works for me. [[mycelium: stance=accept]]"})
    m4 = (await client.get("/api/rooms/atlas/messages", params={"episode": task.episode})).json()[0]
    assert m4["id"] == r.json()["message_id"]
    return {"m1": m1, "m2": m2, "m3": m3, "m4": m4}


async def search(client, q: str, **params) -> dict:
    r = await client.get("/api/rooms/atlas/messages/search", params={"q": q, **params})
    assert r.status_code == 200, r.text
    return r.json()


def ids(result: dict, seeded: dict) -> list[str]:
    names = {m["id"]: name for name, m in seeded.items()}
    return [names.get(h["message"]["id"], "?") for h in result["hits"]]


CASES = [
    ("", ["m4", "m3", "m2", "m1"]),
    ("apple pay", ["m3", "m1"]),
    ('"apple pay"', ["m3", "m1"]),
    ('"pay apple"', []),
    ("apple -merchant", ["m1"]),
    ("APPLE", ["m3", "m1"]),
    ("from:bob", ["m4", "m2"]),
    ("@Bob", ["m4", "m2"]),
    ("sender:bob -in:thread", ["m2"]),
    ("-from:bob", ["m3", "m1"]),
    ("from:bob from:avery apple", ["m3", "m1"]),
    ("in:thread", ["m4", "m3"]),
    ("in:channel", ["m2", "m1"]),
    ("task:apple", ["m4", "m3"]),
    ("row:add-apple-pay", ["m4", "m3"]),
    ("task:work/add-apple-pay", ["m4", "m3"]),
    ("task:ap", []),
    ("stance:accept", ["m4"]),
    ("-stance:accept", ["m3", "m2", "m1"]),
    ("mentions:carol", ["m3"]),
    ("mention:bob", ["m1"]),
    ("to:avery", ["m2"]),
    ("has:mention", ["m3", "m1"]),
    ("has:link", ["m2"]),
    ("has:code", ["m3"]),
    ("type:reply", ["m4"]),
    ("type:broadcast in:channel", ["m1"]),
    ("type:direct", ["m2"]),
    ("https://example.com/pay", ["m2"]),
    ("after:1d", ["m4", "m3", "m2", "m1"]),
    ("before:2000-01-01", []),
    ("on:today", ["m4", "m3", "m2", "m1"]),
    ("stance:maybe", []),
]


async def test_queries_find_exactly_what_the_grammar_says(client, seeded):
    for q, expected in CASES:
        result = await search(client, q)
        assert ids(result, seeded) == expected, q
        assert result["total"] == len(expected), q


async def test_thread_matches_by_urn_or_short_id(client, seeded, task):
    assert ids(await search(client, f"thread:{task.episode}"), seeded) == ["m4", "m3"]
    assert ids(await search(client, f"episode:{task.short[:6]}"), seeded) == ["m4", "m3"]


async def test_problems_are_reported_and_the_closed_clause_is_kept(client, seeded):
    result = await search(client, "stance:maybe on:someday -after:1d sort:sideways apple")
    tokens = [p["token"] for p in result["scope"]["problems"]]
    assert tokens == ["stance:maybe", "on:someday", "-after:1d", "sort:sideways"]
    assert {"field": "stance", "value": "maybe", "negate": False} in result["scope"]["clauses"]
    assert result["total"] == 0 and result["scope"]["sort"] == "newest"


async def test_relevance_scores_as_the_reference_does_and_ranks_by_it(client, seeded):
    result = await search(client, "apple sort:relevance")
    assert ids(result, seeded) == ["m3", "m1"]
    query = grammar.parse("apple sort:relevance", now=datetime.now(UTC))
    for hit in result["hits"]:
        assert hit["score"] == grammar.score_text(hit["message"]["content"], query)
    for q in ("apple pay", '"apple pay" -kickoff', "for me", "the flow"):
        query = grammar.parse(q, now=datetime.now(UTC))
        for hit in (await search(client, q))["hits"]:
            assert hit["score"] == grammar.score_text(hit["message"]["content"], query), (q, hit)


async def test_sorts_order_oldest_and_newest(client, seeded):
    assert ids(await search(client, "sort:oldest"), seeded) == ["m1", "m2", "m3", "m4"]
    assert ids(await search(client, "sort:newest"), seeded) == ["m4", "m3", "m2", "m1"]


async def test_facets_are_disjunctive(client, seeded):
    facets = (await search(client, "from:bob"))["facets"]
    assert {b["value"]: b["count"] for b in facets["from"]} == {"avery": 2, "bob": 2}
    assert {b["value"]: b["count"] for b in facets["in"]} == {"channel": 1, "thread": 1}
    assert facets["task"] == [{"value": "work/add-apple-pay", "label": "Add Apple Pay", "count": 1}]
    assert facets["stance"] == [{"value": "accept", "label": "accept", "count": 1}]
    assert "thread" not in facets


async def test_pages_follow_the_cursor_without_repeats(client, seeded):
    for q in ("", "sort:oldest", "sort:relevance apple"):
        seen, cursor = [], None
        while True:
            result = await search(client, q, limit=1, **({"cursor": cursor} if cursor else {}))
            seen += ids(result, seeded)
            cursor = result["next_cursor"]
            if cursor is None:
                break
        assert seen == ids(await search(client, q), seeded), q


async def test_a_cursor_whose_message_is_unknown_resumes_by_time(client, seeded):
    stamp = seeded["m3"]["created_at"]
    result = await search(client, "", cursor=f"{stamp}|00000000-0000-0000-0000-000000000000")
    assert ids(result, seeded) == ["m2", "m1"]


async def test_control_messages_are_out_of_scope_unless_named(client, seeded):
    assert all(h["message"]["payload_type"] != "ping" for h in (await search(client, ""))["hits"])
    pings = (await search(client, "type:ping"))["hits"]
    assert len(pings) == 2 and all(h["message"]["payload_type"] == "ping" for h in pings)


async def test_hits_carry_snippet_context_and_their_task(client, seeded, task):
    result = await search(client, "works", context=1)
    (hit,) = result["hits"]
    assert hit["task_key"] == "work/add-apple-pay" and hit["task_title"] == "Add Apple Pay"
    assert hit["thread"] == task.episode and hit["stance"] == "accept" and hit["recipients"] == []
    assert [m["id"] for m in hit["context_before"]] == [seeded["m3"]["id"]] and hit["context_after"] == []
    assert hit["snippet"] == "Works for me."
    assert result["fields"] == list(grammar.FIELDS)


async def test_a_long_message_gets_a_window_around_the_match(client, seeded):
    long = "filler " * 60 + "the needle is here " + "filler " * 60
    await client.post("/api/rooms/atlas/messages", json={"sender_handle": "avery", "content": long})
    (hit,) = (await search(client, "needle"))["hits"]
    assert hit["snippet"] == grammar.snippet(long, ("needle",))
    assert hit["snippet"].startswith("…") and hit["snippet"].endswith("…") and "needle" in hit["snippet"]


async def test_an_amended_message_is_found_by_its_newest_text(client, seeded):
    r = await client.post(f"/api/rooms/atlas/messages/{seeded['m2']['id']}/amend",
                          json={"content": "Actually the refund flow first"})
    assert r.status_code == 201
    assert ids(await search(client, "refund"), seeded) == ["m2"]
    assert ids(await search(client, "checkout"), seeded) == []
    assert ids(await search(client, "is:edited"), seeded) == ["m2"]


async def test_bad_search_requests_get_4xx(client, seeded):
    assert (await client.get("/api/rooms/nowhere/messages/search", params={"q": "x"})).status_code == 404
    assert (await client.get("/api/rooms/atlas/messages/search", params={"limit": 0})).status_code == 422
    r = await client.get("/api/rooms/atlas/messages/search", params={"q": "", "cursor": "garbage"})
    assert r.status_code == 422 and r.json()["error"] == "invalid_cursor"


async def test_scanned_counts_what_the_search_looks_through_and_total_what_matched(client, seeded, admin_conn):
    prose = await search(client, "apple")
    assert (prose["total"], prose["scanned"]) == (2, 4)  # pings and notices are not looked through
    notices = await admin_conn.fetchval(
        "SELECT count(*) FROM mycelium.messages WHERE room = 'atlas' AND payload_type = 'notice'")
    assert notices > 0
    named = await search(client, "type:notice")
    assert (named["total"], named["scanned"]) == (notices, 4 + notices)


async def test_a_deleted_room_takes_its_documents_and_a_new_room_of_its_name_finds_none(
        client, seeded, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('other')")
    await admin_conn.execute("SELECT mycelium.post_message('other', 'avery', 'Apple Pay elsewhere')")
    await admin_conn.execute("SELECT mycelium.delete_room('atlas')")
    left = await admin_conn.fetch("SELECT room, count(*) AS n FROM mycelium.message_search GROUP BY room")
    assert [(r["room"], r["n"]) for r in left] == [("other", 1)]
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    assert (await search(client, "apple"))["total"] == 0
