"""Links: the database parses every write (plain SQL or HTTP) into memory_links; links resolve when
read (backlinks, graph, integrity); transclusion expands depth 1 into expandable targets only."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import asyncpg
import httpx
import pytest

from mycelium.db.pool import setup_connection
from mycelium.errors import refusal_from_db
from tests.support.cli import mycelium

# (id, body, frontmatter, [(target, kind, anchor, label, relation, cross_room), ...]) in room "r"
CASES = [
    ("a-bare-uri-is-a-link", "See myc://decisions/db for the call", {},
     [("decisions/db", "uri", None, None, None, None)]),
    ("a-bare-uri-ends-before-sentence-punctuation",
     "Settled in myc://decisions/db. Also (myc://a/b), myc://c! and myc://d?", {},
     [("decisions/db", "uri", None, None, None, None), ("a/b", "uri", None, None, None, None),
      ("c", "uri", None, None, None, None), ("d", "uri", None, None, None, None)]),
    ("a-markdown-link-to-a-uri-keeps-its-label", "Read [the db call](myc://decisions/db) first", {},
     [("decisions/db", "uri", None, "the db call", None, None)]),
    ("a-wikilink-is-a-link", "Per [[decisions/db]].", {},
     [("decisions/db", "wikilink", None, None, None, None)]),
    ("an-anchor-is-slugified-github-style-and-a-label-kept", "Why: [[decisions/db#Trade Offs|why]]", {},
     [("decisions/db", "wikilink", "trade-offs", "why", None, None)]),
    ("a-transclusion-is-its-own-kind", "![[glossary/vector-store]]", {},
     [("glossary/vector-store", "transclusion", None, None, None, None)]),
    ("a-directive-is-not-a-link",
     "I can live with it. [[mycelium: confidence=0.85 stance=accept]] [[note: later]] [[MYCELIUM:x]]", {},
     []),
    ("a-file-is-no-memory-link", "See [[file:reports/q3.pdf]] and [[FILE:a.png|the chart]].", {}, []),
    ("a-colon-without-a-space-is-part-of-a-key", "[[ns:key]]", {},
     [("ns:key", "wikilink", None, None, None, None)]),
    ("code-is-never-parsed",
     "`[[inline]]` and ``myc://x ` y`` here\n```md\n[[fenced]]\nmyc://fenced\n```\n"
     "~~~\n![[tilde]]\n~~~\n[[after]]", {},
     [("after", "wikilink", None, None, None, None)]),
    ("an-unclosed-backtick-is-literal", "a ` b [[still-a-link]]", {},
     [("still-a-link", "wikilink", None, None, None, None)]),
    ("a-code-span-closes-only-on-a-run-of-the-same-length",
     "`` a ` [[in]] `` [[out]] `[[x]]` [[after]] ``` [[open]]", {},
     [("out", "wikilink", None, None, None, None), ("after", "wikilink", None, None, None, None),
      ("open", "wikilink", None, None, None, None)]),
    ("code-inside-a-wikilink-makes-it-no-link", "[[a `b` c]] and [[d]]", {},
     [("d", "wikilink", None, None, None, None)]),
    ("a-uri-inside-a-wikilink-is-one-edge", "[[myc://decisions/db#Why]] and ![[myc://g/x]]", {},
     [("decisions/db", "wikilink", "why", None, None, None),
      ("g/x", "transclusion", None, None, None, None)]),
    ("targets-are-normalised", "[[/a/b.md]] [[./c/]] myc://d.md [[e/]]", {},
     [("a/b", "wikilink", None, None, None, None), ("c", "wikilink", None, None, None, None),
      ("d", "uri", None, None, None, None), ("e", "wikilink", None, None, None, None)]),
    ("degenerate-syntax-is-ignored", "[[]] [[   ]] ![[]] myc:// and myc://. [x](myc://) [[#only]]", {}, []),
    ("another-room-parses-but-is-cross-room", "myc://rooms/other/decisions/db", {},
     [("rooms/other/decisions/db", "uri", None, None, None, "other")]),
    ("this-room-by-name-is-a-plain-edge", "[[myc://rooms/r/decisions/db]]", {},
     [("decisions/db", "wikilink", None, None, None, None)]),
    ("frontmatter-relations-take-a-key-a-uri-or-a-list",
     "", {"supersedes": "decisions/v1", "depends-on": ["myc://a", "b", 3], "part-of": 7,
          "relates-to": ["rooms/o/x"], "superseded-by": "myc://decisions/v3"},
     [("decisions/v1", "relation", None, None, "supersedes", None),
      ("decisions/v3", "relation", None, None, "superseded-by", None),
      ("a", "relation", None, None, "depends-on", None), ("b", "relation", None, None, "depends-on", None),
      ("rooms/o/x", "relation", None, None, "relates-to", "o")]),
    ("positions-count-characters-not-bytes", "Café ☕ — see [[é/ü]] and myc://naïve/ключ.", {},
     [("é/ü", "wikilink", None, None, None, None), ("naïve/ключ", "uri", None, None, None, None)]),
    ("body-links-come-in-text-order-then-relations",
     "![[t]] then [[w]] then myc://u", {"relates-to": "z"},
     [("t", "transclusion", None, None, None, None), ("w", "wikilink", None, None, None, None),
      ("u", "uri", None, None, None, None), ("z", "relation", None, None, "relates-to", None)]),
]
IDS = [c[0] for c in CASES]


def row_tuple(link) -> tuple:
    return (link["target"], link["kind"], link["anchor"], link["label"], link["relation"], link["cross_room"])


@pytest.fixture(scope="module")
async def psql(pg_server):
    """One database for the parsing cases (each writes its own key), as a person in psql."""
    name = await pg_server.create_database()
    conn = await asyncpg.connect(pg_server.dsn(name))
    await setup_connection(conn)
    await conn.execute("SELECT mycelium.create_room('r')")
    try:
        yield conn
    finally:
        await conn.close()
        await pg_server.drop_database(name)


@pytest.fixture
async def room(client):
    assert (await client.post("/api/rooms", json={"name": "r"})).status_code == 201
    return "r"


async def write(client, *items, room="r"):
    full = [{"created_by": "ana", **item} for item in items]
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": full})
    assert r.status_code == 201, r.text
    return r.json()


async def links(client, key, room="r"):
    r = await client.get(f"/api/rooms/{room}/links", params={"key": key})
    assert r.status_code == 200, r.text
    return r.json()


async def expand(client, key, room="r"):
    r = await client.get(f"/api/rooms/{room}/links/expand", params={"key": key})
    assert r.status_code == 200, r.text
    return r.json()


async def refusal_of(conn, sql: str, *args):
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.execute(sql, *args)
    refusal = refusal_from_db(caught.value)
    assert refusal is not None, caught.value
    return refusal


# -- parsing -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("case", "body", "meta", "expected"), CASES, ids=IDS)
async def test_each_parsing_rule_holds_for_a_memory_written_in_plain_sql(psql, case, body, meta, expected):
    await psql.execute(
        "INSERT INTO mycelium.memories (room, key, value, meta, created_by) VALUES ('r', $1, $2, $3, 'psql')",
        case, {"text": body}, meta,
    )
    rows = await psql.fetch(
        "SELECT * FROM mycelium.memory_links WHERE room = 'r' AND source_key = $1 ORDER BY ord", case
    )
    assert [row_tuple(r) for r in rows] == expected
    for r in rows:
        if r["pos"] is not None:  # the stored position points at the raw text in the body
            assert body[r["pos"] - 1:r["pos"] - 1 + len(r["raw"])] == r["raw"]


async def test_the_memory_route_derives_the_same_links_as_plain_sql(client, room):
    await write(client, *({"key": case, "value": body, "meta": meta} for case, body, meta, _ in CASES))
    for case, _, _, expected in CASES:
        assert [row_tuple(link) for link in (await links(client, case))["outbound"]] == expected, case


async def test_a_memory_inserted_in_psql_gets_its_links_and_anchors_in_the_same_transaction(psql):
    async with psql.transaction():
        await psql.execute(
            "INSERT INTO mycelium.memories (room, key, value, created_by) VALUES ('r', 'psql/doc', $1, 'me')",
            {"text": "# Doc\n## Trade Offs\n```\n# not a heading\n```\n## Trade Offs\nsee [[x]]"},
        )
        assert await psql.fetchval(
            "SELECT count(*) FROM mycelium.memory_links WHERE room = 'r' AND source_key = 'psql/doc'") == 1
        anchors = await psql.fetch(
            "SELECT anchor FROM mycelium.memory_anchors WHERE room = 'r' AND key = 'psql/doc' ORDER BY line")
    assert [a["anchor"] for a in anchors] == ["doc", "trade-offs", "trade-offs-1"]


async def test_the_slug_and_outline_functions_answer_in_psql(psql):
    assert await psql.fetchval("SELECT mycelium.link_slug('Trade Offs')") == "trade-offs"
    assert await psql.fetchval("SELECT mycelium.link_slug('  Why? (v2)  ')") == "why-v2"
    for text, slug in [("a\\b  c\tD", "ab-c-d"), ('50% off, "now"!', "50-off-now"), (" -x- ", "x"),
                       ("snake_case & more", "snake_case-more"), ("a - b", "a---b"), ("\x01bell", "bell")]:
        assert await psql.fetchval("SELECT mycelium.link_slug($1)", text) == slug, text
    outline = await psql.fetch("SELECT * FROM mycelium.memory_outline($1)",
                               "# A #\n  ## C# lang\n####### seven\n#nospace\n##")
    assert [(o["level"], o["slug"]) for o in outline] == [(1, "a"), (2, "c-lang"), (2, "")]


async def test_a_heading_whose_slug_is_taken_gets_no_anchor_and_the_write_still_succeeds(psql):
    await psql.execute(
        "INSERT INTO mycelium.memories (room, key, value, created_by) VALUES ('r', 'dup/heads', $1, 'me')",
        {"text": "# Foo\n# Foo 1\n# Foo\n## Foo"})
    anchors = await psql.fetch(
        "SELECT anchor, line FROM mycelium.memory_anchors WHERE room = 'r' AND key = 'dup/heads' ORDER BY line")
    assert [(a["anchor"], a["line"]) for a in anchors] == [("foo", 1), ("foo-1", 2), ("foo-2", 4)]
    assert await psql.fetch("SELECT * FROM mycelium.link_drift('r')") == []


async def test_slugs_keep_unicode_letters_where_the_server_has_a_unicode_collation(psql):
    if not await psql.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname IN ('pg_c_utf8', 'C.utf8', 'C.UTF-8'))"):
        pytest.skip("this server has no Unicode-aware collation: non-ASCII letters are dropped")
    assert await psql.fetchval("SELECT mycelium.link_slug('Über Café ☕ Plan')") == "über-café-plan"
    assert await psql.fetchval("SELECT mycelium.link_slug('概要 — Overview')") == "概要-overview"
    anchors = await psql.fetch("SELECT slug FROM mycelium.memory_outline($1)", "# Überblick\n## 概要")
    assert [a["slug"] for a in anchors] == ["überblick", "概要"]


# -- the index follows the memories ----------------------------------------------------------------

async def test_links_follow_edits_and_deletes(client, room):
    await write(client, {"key": "a", "value": "[[b]] and [[c]]"}, {"key": "b", "value": "B"},
                {"key": "c", "value": "C"}, {"key": "d", "value": "D"})
    assert [x["target"] for x in (await links(client, "a"))["outbound"]] == ["b", "c"]

    await write(client, {"key": "a", "value": "only [[d]] now"})
    assert [x["target"] for x in (await links(client, "a"))["outbound"]] == ["d"]
    assert (await links(client, "b"))["backlinks"] == []
    assert [x["source"] for x in (await links(client, "d"))["backlinks"]] == ["a"]

    await write(client, {"key": "a", "value": "only [[d]] now", "meta": {"depends-on": "b"}})
    assert [(x["target"], x["kind"]) for x in (await links(client, "a"))["outbound"]] == [
        ("d", "wikilink"), ("b", "relation")]

    assert (await client.delete("/api/rooms/r/memory/a")).status_code == 204
    gone = await links(client, "a")
    assert gone["found"] is False and gone["outbound"] == []
    assert (await links(client, "d"))["backlinks"] == []


async def test_a_target_written_later_resolves_the_link_without_rewriting_the_source(client, room):
    await write(client, {"key": "src", "value": "see [[later#Part Two]]"})
    assert [x["error"] for x in (await links(client, "src"))["outbound"]] == ["not_found"]

    await write(client, {"key": "later", "value": "# Later\nno such part"})
    assert [x["error"] for x in (await links(client, "src"))["outbound"]] == ["no_anchor"]

    await write(client, {"key": "later", "value": "# Later\n## Part Two\nhere"})
    out = (await links(client, "src"))["outbound"]
    assert [(x["resolved"], x["error"]) for x in out] == [(True, None)]
    assert (await client.get("/api/rooms/r/memory/src")).json()["version"] == 1

    assert (await client.delete("/api/rooms/r/memory/later")).status_code == 204
    assert [x["error"] for x in (await links(client, "src"))["outbound"]] == ["not_found"]


async def test_backlinks_come_from_other_memories_of_the_room_only(client, room):
    await write(client, {"key": "t", "value": "# T\nself link [[t]]"},
                {"key": "x", "value": "[[t#T]] and [[t#missing|m]]"},
                {"key": "y", "value": "myc://rooms/other/t and myc://t."})
    back = (await links(client, "t"))["backlinks"]
    assert [(b["source"], b["raw"], b["error"]) for b in back] == [
        ("x", "[[t#T]]", None), ("x", "[[t#missing|m]]", "no_anchor"), ("y", "myc://t", None)]
    assert back[1]["label"] == "m"


async def test_backlinks_of_a_key_not_written_yet_show_who_wants_it(client, room):
    await write(client, {"key": "x", "value": "todo: [[wanted]]"})
    result = await links(client, "wanted")
    assert result["found"] is False
    assert [(b["source"], b["error"]) for b in result["backlinks"]] == [("x", "not_found")]


async def test_the_graph_has_a_node_per_memory_and_an_edge_per_link(client, room):
    await write(client, {"key": "hub", "value": "[[a]] [[b]] ![[a]] myc://rooms/far/z"},
                {"key": "a", "value": "A", "meta": {"expandable": True, "part-of": "hub"}},
                {"key": "b", "value": "B"})
    r = await client.get("/api/rooms/r/links/graph")
    assert r.status_code == 200
    graph = r.json()
    assert graph["nodes"] == [
        {"key": "a", "expandable": True, "outbound": 1, "inbound": 2},
        {"key": "b", "expandable": False, "outbound": 0, "inbound": 1},
        {"key": "hub", "expandable": False, "outbound": 3, "inbound": 1},
    ]
    edges = [(e["source"], e["target"], e["kind"], e["relation"], e["resolved"], e["error"])
             for e in graph["edges"]]
    assert edges == [
        ("a", "hub", "relation", "part-of", True, None),
        ("hub", "a", "wikilink", None, True, None),
        ("hub", "b", "wikilink", None, True, None),
        ("hub", "a", "transclusion", None, True, None),
        ("hub", "rooms/far/z", "uri", None, False, "cross_room"),
    ]


async def test_integrity_reports_broken_links_orphans_roots_and_leaves(client, room):
    await write(client, {"key": "index", "value": "[[a]] [[b]]"}, {"key": "a", "value": "[[b]]"},
                {"key": "b", "value": "end"}, {"key": "lonely", "value": "nothing"},
                {"key": "broken", "value": "[[missing]] ![[b]]"})
    r = await client.get("/api/rooms/r/links/integrity")
    assert r.status_code == 200
    report = r.json()
    assert [(b["source"], b["target"], b["error"]) for b in report["broken"]] == [
        ("broken", "missing", "not_found"), ("broken", "b", "not_expandable")]
    assert report["orphans"] == ["lonely"]
    assert report["roots"] == ["broken", "index"]
    assert report["leaves"] == ["b"]
    assert (report["total_memories"], report["total_links"]) == (5, 5)


async def test_link_routes_refuse_an_unknown_room_and_a_missing_key(client, room):
    for path in ("/api/rooms/nope/links?key=a", "/api/rooms/nope/links/graph",
                 "/api/rooms/nope/links/integrity", "/api/rooms/nope/links/expand?key=a"):
        r = await client.get(path)
        assert (r.status_code, r.json()["error"]) == (404, "room_not_found"), path
    for path in ("/api/rooms/r/links", "/api/rooms/r/links/expand", "/api/rooms/r/links?key="):
        r = await client.get(path)
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", path
    r = await client.get("/api/rooms/r/links/expand", params={"key": "none"})
    assert (r.status_code, r.json()["error"]) == (404, "memory_not_found")


# -- transclusion ------------------------------------------------------------------------------------

GLOSSARY = "# DB\nintro\n## Trade Offs\nfast\n### Detail\nmore\n## Other\nnot this\n"


async def test_an_anchor_pulls_its_section_without_the_heading_up_to_the_next_peer(client, room):
    await write(client, {"key": "g", "value": GLOSSARY, "meta": {"expandable": True}},
                {"key": "s", "value": "Before\n![[g#Trade Offs]]\nAfter"})
    result = await expand(client, "s")
    assert result["rendered"] == "Before\nfast\n### Detail\nmore\nAfter"
    assert result["expansions"] == [
        {"target": "g", "anchor": "trade-offs", "raw": "![[g#Trade Offs]]", "expanded": True, "error": None}]
    assert result["found"] is True


async def test_without_an_anchor_the_whole_body_is_pulled_in(client, room):
    await write(client, {"key": "g", "value": GLOSSARY, "meta": {"expandable": True}},
                {"key": "s", "value": "[ ![[g]] ]"})
    assert (await expand(client, "s"))["rendered"] == "[ " + GLOSSARY.strip() + " ]"


async def test_only_targets_with_expandable_true_are_pulled_in(client, room):
    await write(client, {"key": "plain", "value": "P"},
                {"key": "stringy", "value": "S", "meta": {"expandable": "true"}},
                {"key": "s", "value": "![[plain]] ![[stringy]]"})
    result = await expand(client, "s")
    assert result["rendered"] == "![[plain]] ![[stringy]]"
    assert [(e["target"], e["expanded"], e["error"]) for e in result["expansions"]] == [
        ("plain", False, "not_expandable"), ("stringy", False, "not_expandable")]


async def test_expansion_is_depth_one_so_markers_in_pulled_text_stay_literal(client, room):
    await write(client, {"key": "a", "value": "A says ![[b]]", "meta": {"expandable": True}},
                {"key": "b", "value": "B says ![[a]]", "meta": {"expandable": True}},
                {"key": "self", "value": "me: ![[self]]", "meta": {"expandable": True}})
    assert (await expand(client, "a"))["rendered"] == "A says B says ![[a]]"
    assert (await expand(client, "self"))["rendered"] == "me: me: ![[self]]"


async def test_expansion_splices_at_character_positions_after_non_ascii_text(client, room):
    await write(client, {"key": "g", "value": "G", "meta": {"expandable": True}},
                {"key": "s", "value": "Café ☕ — ![[g]] → ключ ![[g]]!"})
    assert (await expand(client, "s"))["rendered"] == "Café ☕ — G → ключ G!"


async def test_markers_in_code_are_not_expanded(client, room):
    await write(client, {"key": "g", "value": "G", "meta": {"expandable": True}},
                {"key": "s", "value": "write `![[g]]` to get ![[g]]\n```\n![[g]]\n```"})
    result = await expand(client, "s")
    assert result["rendered"] == "write `![[g]]` to get G\n```\n![[g]]\n```"
    assert len(result["expansions"]) == 1


async def test_failed_markers_stay_verbatim_and_are_reported(client, room):
    await write(client, {"key": "g", "value": GLOSSARY, "meta": {"expandable": True}},
                {"key": "s",
                 "value": "1 ![[missing]] 2 ![[g#Nope|x]] 3 ![[myc://rooms/o/g]] 4 ![[g#Other]] [[g]]"})
    result = await expand(client, "s")
    assert result["rendered"] == "1 ![[missing]] 2 ![[g#Nope|x]] 3 ![[myc://rooms/o/g]] 4 not this [[g]]"
    assert [(e["raw"], e["expanded"], e["error"]) for e in result["expansions"]] == [
        ("![[missing]]", False, "not_found"), ("![[g#Nope|x]]", False, "no_anchor"),
        ("![[myc://rooms/o/g]]", False, "cross_room"), ("![[g#Other]]", True, None)]


# -- the derived tables say only what the memories say ---------------------------------------------

async def test_the_link_tables_refuse_direct_writes_even_from_psql(client, room, admin_conn):
    await write(client, {"key": "a", "value": "# A\n[[b]]"})
    attempts = [
        "INSERT INTO mycelium.memory_links (room, source_key, ord, target, kind, raw, pos)"
        " VALUES ('r', 'a', 9, 'forged', 'wikilink', '[[forged]]', 1)",
        "UPDATE mycelium.memory_links SET target = 'forged'",
        "DELETE FROM mycelium.memory_links",
        "TRUNCATE mycelium.memory_links",
        "INSERT INTO mycelium.memory_anchors VALUES ('r', 'a', 'forged', 1, 1)",
        "DELETE FROM mycelium.memory_anchors",
    ]
    for sql in attempts:
        refusal = await refusal_of(admin_conn, sql)
        assert (refusal.status, refusal.error) == (409, "derived_table"), sql
    assert [x["target"] for x in (await links(client, "a"))["outbound"]] == ["b"]


async def test_the_hubs_role_can_only_re_derive_links_from_the_text(client, room, admin_conn):
    await write(client, {"key": "a", "value": "[[b]]"})
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL ROLE mycelium_app")
        await admin_conn.execute("SELECT mycelium.derive_links('r', 'a')")
        assert await admin_conn.fetchval("SELECT mycelium.rebuild_links()") == 1
        assert await admin_conn.fetch("SELECT * FROM mycelium.link_drift()") == []
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with admin_conn.transaction():
            await admin_conn.execute("SET LOCAL ROLE mycelium_app")
            await admin_conn.execute("DELETE FROM mycelium.memory_links")
    assert [x["target"] for x in (await links(client, "a"))["outbound"]] == ["b"]


async def test_rebuild_re_derives_the_same_rows_and_a_room_delete_takes_them_along(client, room, admin_conn):
    await write(client, {"key": "a", "value": "# A\n[[b]] ![[c#X]]", "meta": {"relates-to": ["d"]}},
                {"key": "c", "value": "## X\nx"})
    query = "SELECT * FROM mycelium.memory_links ORDER BY source_key, ord"
    before = [dict(r) for r in await admin_conn.fetch(query)]
    assert await admin_conn.fetchval("SELECT mycelium.rebuild_links('r')") == 2
    assert [dict(r) for r in await admin_conn.fetch(query)] == before
    assert (await client.delete("/api/rooms/r")).status_code == 204
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.memory_links") == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.memory_anchors") == 0


async def test_only_a_change_of_body_or_relations_re_derives_the_links(client, room, admin_conn):
    await write(client, {"key": "a", "value": "[[b]]", "embed": False})
    row_versions = "SELECT xmin::text FROM mycelium.memory_links WHERE room = 'r' AND source_key = 'a'"
    before = await admin_conn.fetch(row_versions)
    updated = await admin_conn.fetchval(
        "SELECT mycelium.set_embedding('r', 'a', 1, array_fill(0.1, ARRAY[384])::vector)")
    assert updated is True
    await write(client, {"key": "a", "value": "[[b]]", "meta": {"status": "open"}, "tags": ["t"]})
    assert await admin_conn.fetch(row_versions) == before

    await write(client, {"key": "a", "value": "[[b]]", "meta": {"part-of": "c"}})
    assert [x["target"] for x in (await links(client, "a"))["outbound"]] == ["b", "c"]
    await write(client, {"key": "a", "value": "[[b]] and [[d]]"})
    assert [x["target"] for x in (await links(client, "a"))["outbound"]] == ["b", "d", "c"]


async def test_the_auditor_can_read_every_link_view_but_write_nothing(client, room, admin_conn):
    await write(client, {"key": "a", "value": "![[b]]"},
                {"key": "b", "value": "B", "meta": {"expandable": True}})
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL ROLE mycelium_auditor")
        assert (await admin_conn.fetchval("SELECT mycelium.expand_memory('r', 'a')"))["rendered"] == "B"
        assert len((await admin_conn.fetchval("SELECT mycelium.link_graph('r')"))["edges"]) == 1
        assert (await admin_conn.fetchval("SELECT mycelium.link_integrity('r')"))["leaves"] == ["b"]
        assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.link_edges") == 1
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with admin_conn.transaction():
            await admin_conn.execute("SET LOCAL ROLE mycelium_auditor")
            await admin_conn.execute("SELECT mycelium.rebuild_links()")


async def test_concurrent_writers_of_one_memory_never_leave_links_behind_its_text(db_dsn, admin_conn):
    """Eight connections (eight server backends) rewrite one memory and its neighbours at once, through
    the verb and through plain UPDATEs; the links always match the text that won."""
    await admin_conn.execute("SELECT mycelium.create_room('r')")
    await admin_conn.execute("SELECT mycelium.write_memory('r', 'hot', '\"start\"', 'setup')")

    async def writer(i: int) -> None:
        conn = await asyncpg.connect(db_dsn)
        await setup_connection(conn)
        try:
            for j in range(15):
                body = f"# W{i}\nround {j}: [[t/{i}/{j}]] myc://t/{j % 3} ![[g#W{i}]]"
                if (i + j) % 2:
                    await conn.execute("UPDATE mycelium.memories SET value = $1 WHERE room = 'r' AND key = 'hot'",
                                       {"text": body})
                else:
                    await conn.execute("SELECT 1 FROM mycelium.write_memory('r', $1, $2, 'w', p_meta => $3)",
                                       "hot" if j % 3 else f"side/{i}", body, {"relates-to": [f"t/{j}"]})
        finally:
            await conn.close()

    await asyncio.gather(*(writer(i) for i in range(8)))
    assert await admin_conn.fetch("SELECT * FROM mycelium.link_drift()") == []
    body = await admin_conn.fetchval("SELECT body FROM mycelium.memories WHERE room = 'r' AND key = 'hot'")
    stored = await admin_conn.fetch(
        "SELECT target FROM mycelium.memory_links WHERE room = 'r' AND source_key = 'hot' AND kind <> 'relation'"
        " ORDER BY ord")
    assert [r["target"] for r in stored] == [
        body.split("[[")[1].split("]]")[0], "t/" + body.split("myc://t/")[1].split(" ")[0], "g"]


async def test_link_drift_finds_rows_written_around_the_triggers(client, room, admin_conn):
    await write(client, {"key": "a", "value": "# A\n[[b]]", "meta": {"part-of": "c"}})
    assert await admin_conn.fetch("SELECT * FROM mycelium.link_drift('r')") == []
    around = admin_conn.transaction()
    await around.start()
    try:
        await admin_conn.execute("ALTER TABLE mycelium.memory_links DISABLE TRIGGER t05_memory_links_derived")
        await admin_conn.execute("UPDATE mycelium.memory_links SET target = 'forged' WHERE ord = 1")
        assert [tuple(r) for r in await admin_conn.fetch("SELECT * FROM mycelium.link_drift()")] == [("r", "a")]
        await admin_conn.execute("SELECT mycelium.rebuild_links('r')")
        assert await admin_conn.fetch("SELECT * FROM mycelium.link_drift()") == []
    finally:
        await around.rollback()


# -- the CLI, against a real hub process ------------------------------------------------------------

@pytest.mark.slow
def test_the_cli_shows_links_checks_them_and_expands_a_memory(db_dsn, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MYCELIUM_EMBEDDER": "none", "MYCELIUM_API_URL": f"http://127.0.0.1:{port}",
           "MYCELIUM_ROOM": "r", "MYCELIUM_HANDLE": "cli-test"}
    hub = subprocess.Popen(
        [sys.executable, "-m", "mycelium.cli.main", "up", "--database-url", db_dsn, "--port", str(port),
         "--no-mirror", "--data-dir", str(tmp_path), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return mycelium(*args, base=env)

    try:
        for _ in range(600):
            assert hub.poll() is None, hub.stderr.read().decode() if hub.stderr else "hub exited"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert cli("room", "create", "r").returncode == 0
        assert cli("memory", "set", "g", "# G\n## Part\npulled in", "--expandable").returncode == 0
        assert cli("memory", "set", "a", "see ![[g#Part]] and [[missing]]").returncode == 0

        shown = cli("memory", "links", "g")
        assert shown.returncode == 0, shown.stderr
        assert "a -> g#part  [transclusion]  ok" in shown.stdout

        checked = cli("memory", "links", "a", "--check")
        assert checked.returncode == 1
        assert "broken: [[missing]] (not_found)" in checked.stderr

        expanded = cli("memory", "get", "a", "--expand", "--raw")
        assert expanded.returncode == 0, expanded.stderr
        assert expanded.stdout.strip() == "see pulled in and [[missing]]"
    finally:
        hub.terminate()
        hub.wait(timeout=30)
