"""Runs of any kind over plain HTTP: a negotiation (an aligner's run, whose trace entries are moves and
whose close carries an agreement) shown by its kind and its entries as they are, on the task's flow
panel, in the room's episodes and on its own page; agents' text in a trace is escaped; an unknown
episode is a 404 page."""

from __future__ import annotations

import asyncpg

from mycelium.web import runs

MOVES = [
    {"step": "offer", "by": "nova", "move": "offer", "offer": {"price": 20, "delivery": "monday"}},
    {"step": "counter", "by": "julia", "move": "counter", "offer": {"price": 12}, "note": "<script>alert(1)</script>"},
    {"step": "accept", "by": "nova", "move": "accept", "offer": {"price": 15, "delivery": "friday"}},
]


async def negotiation(conn: asyncpg.Connection, key: str, *, closed: bool) -> str:
    """An aligner's run in ``key``'s thread, written as its engine would leave it (the connection
    encodes jsonb from Python values)."""
    episode = await conn.fetchval("SELECT episode FROM mycelium.memories WHERE room = 'atlas' AND key = $1", key)
    flow = {"protocol": "negotiation", "issues": {"price": [10, 20], "delivery": ["monday", "friday"]},
            "cast": ["nova", "julia"], "ask": "agree a price"}
    run = await conn.fetchrow(
        """INSERT INTO mycelium.engine_runs (room, engine, kind, episode, task_key, summon_id, protocol, flow, state,
                                             turn, step, waiting, reason, closed_at, assignments)
           VALUES ('atlas', 'broker', 'aligner', $1, $2, 1, 'negotiation', $3, $4, 3, $5, $6, $7, $8, $9)
           RETURNING id, short_id""",
        episode, key, flow, "converged" if closed else "open", None if closed else "respond",
        [] if closed else ["julia"], "agreement reached" if closed else None,
        None if not closed else await conn.fetchval("SELECT now()"),
        {"price": 15, "delivery": "friday"} if closed else None)
    for turn, move in enumerate(MOVES, 1):
        await conn.execute("INSERT INTO mycelium.engine_trace (room, run_id, turn, step, entry) "
                           "VALUES ('atlas', $1, $2, $3, $4)", run["id"], turn, move["step"],
                           {**move, "turn": turn})
    return run["short_id"]


async def test_a_negotiation_reads_by_its_kind_its_moves_and_its_agreement(client, admin_conn):
    await client.post("/api/rooms", json={"name": "atlas"})
    row = (await client.post("/api/rooms/atlas/tasks", json={"title": "Agree the price", "handle": "ana"})).json()
    short_id = await negotiation(admin_conn, row["key"], closed=True)

    page = (await client.get(f"/room/atlas/task/{row['key']}")).text
    panel = page.split('data-part="flow"', 1)[1]
    assert "negotiation" in panel and ">aligner<" in panel and "converged" in panel
    # no steps to draw: the flow's own fields; each move with its fields as they are
    assert "issues" in panel and "&#34;price&#34;: [10, 20]" in panel
    assert panel.count("<li data-turn=") == 3
    assert "1 · offer" in panel and "move</dt><dd>counter" in panel and "by</dt><dd>julia" in panel
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in panel and "<script>alert" not in panel
    # the agreement the close carries
    assert "The agreement" in panel
    assert '<th scope="row">price</th><td>15</td>' in panel and '<th scope="row">delivery</th><td>friday</td>' in panel
    assert "No quality metrics" in panel

    listed = (await client.get("/room/atlas/episodes")).text
    assert f'href="/room/atlas/episode/{short_id}"' in listed and "aligner" in listed and "Agree the price" in listed
    one = await client.get(f"/room/atlas/episode/{short_id}")
    assert one.status_code == 200 and "The agreement" in one.text and "The record, as a memory" in one.text
    # the parts the pages' script re-reads (it asks for what was said alone; these are small anyway)
    for path in (f"/room/atlas/episode-parts/{short_id}", "/room/atlas/episodes-parts"):
        for query in ("", "?only=talk"):
            parts = await client.get(path + query)
            assert parts.status_code == 200 and "data-part=" in parts.text and "<html" not in parts.text
            assert short_id in parts.text


async def test_an_open_negotiation_shows_whom_it_waits_for_and_no_outcome(client, admin_conn):
    await client.post("/api/rooms", json={"name": "atlas"})
    row = (await client.post("/api/rooms/atlas/tasks", json={"title": "Agree the price", "handle": "ana"})).json()
    await negotiation(admin_conn, row["key"], closed=False)
    panel = (await client.get(f"/room/atlas/task-parts/{row['key']}")).text.split('data-part="flow"', 1)[1]
    assert "running" in panel and "Now at <strong data-current-step>respond</strong>, waiting for @julia" in panel
    assert "Outcome" not in panel and "The agreement" not in panel


async def test_episodes_of_a_room_without_runs_and_an_unknown_episode(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    assert "No engine has run in this room yet" in (await client.get("/room/atlas/episodes")).text
    r = await client.get("/room/atlas/episode/nope")
    assert r.status_code == 404 and "episode_not_found" in r.text and "text/html" in r.headers["content-type"]
    r = await client.get("/room/nowhere/episodes")
    assert r.status_code == 404 and "room_not_found" in r.text


def test_a_conductor_trace_reads_in_words_and_anything_else_as_it_is():
    asked = runs.entry_of({"turn": 2, "step": "check", "to": ["julia"], "stances": {"julia": "reject"},
                           "stance": "reject", "next": "revise", "replies": ["m1"], "reask": ["julia"]})
    assert (asked.turn, asked.step) == (2, "check")
    assert asked.lines == [("asked", "@julia"), ("stances", "@julia: reject"), ("stance", "reject"),
                           ("edge", "→ revise"), ("replies", "1 read"), ("reask", '["julia"]')]
    picked = runs.entry_of({"step": "pick", "select": {"pick": "B", "least_happy": "nova", "lowest": 60},
                            "next": "rate"})
    assert ("pick", "picked B; least happy @nova") in picked.lines and ("select", '{"lowest": 60}') in picked.lines
    assert picked.turn is None


def test_the_graph_marks_the_edges_taken_the_steps_visited_and_the_current_one():
    flow = {"protocol": {"name": "gated", "steps": [
        {"id": "propose", "to": "proposer", "next": "check"},
        {"id": "check", "to": "guardian", "next": {"accept": "passed", "reject": "revise"}},
        {"id": "revise", "to": "proposer", "next": "check"},
        {"id": "passed", "end": "resolved"}]}, "bound": {"proposer": "nova", "guardian": "julia"},
        "cast": ["nova", "julia"]}
    trace = [{"step": "propose", "next": "check"}, {"step": "check", "next": "revise"}]
    steps = {s.id: s for s in runs.steps_of(flow, trace, "revise")}
    assert steps["check"].target == "guardian (@julia)" and steps["check"].members == ["julia"]
    assert [(e.label, e.target, e.taken) for e in steps["check"].edges] == [("accept", "passed", False),
                                                                            ("reject", "revise", True)]
    assert steps["revise"].current and steps["revise"].visited and not steps["passed"].visited
    assert steps["passed"].end == "resolved" and steps["passed"].edges == []


def test_metrics_read_in_words_known_ones_first():
    shown = runs.metrics_of({"mpc": 0.85, "gar": 1.0, "scr": 0, "provenance_weight": 1.0, "participants": 2},
                            {"min_satisfaction": 80, "rounds": 3})
    assert [label for label, _ in shown] == [
        "MPC (mean final confidence)", "GAR (genuine agreement rate)", "SCR (social compliance rate)",
        "provenance weight", "satisfaction (least happy member)", "members who stated a confidence", "rounds"]
    assert shown[1] == ("GAR (genuine agreement rate)", "1")
