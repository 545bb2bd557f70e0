"""Negotiations end to end on the engines loop, with scripted members and the real NEGMAS."""

from __future__ import annotations

import asyncpg

from tests.aligner.conftest import closed, make_task, questions, scripted, setup_room, summon, trace

OPEN_A = "Cheap and from acme. [[mycelium: offer price=10 vendor=acme confidence=0.6]]"
OPEN_B = "[[mycelium: offer price=30 vendor=globex confidence=0.5]] I need margin."


async def test_an_offer_accepted_ends_the_negotiation_at_once_converged(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Buy the widgets")
    await engines_hub(MYCELIUM_ALIGNER_ROUND_TIMEOUT_S="30")
    agents("alice", scripted(OPEN_A, ["Meet me halfway. [[mycelium: offer price=20 vendor=acme confidence=0.8]]"]))
    agents("bob", scripted(OPEN_B, ["Deal. [[mycelium: accept confidence=0.7]]"]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    run = await closed(admin_conn, episode)
    assert run["state"] == "converged", run["reason"]
    assert run["kind"] == "aligner"
    assert run["assignments"] == {"price": "20", "vendor": "acme"}
    moves = await trace(admin_conn, run["id"])
    rounds = [m for m in moves if m["step"] == "round"]
    # unanimity: NEGMAS stopped the moment bob accepted: two moves, two questions
    assert [(m["who"], m["action"]) for m in rounds] == [("alice", "offer"), ("bob", "accept")]
    asked = [q for q in await questions(admin_conn, episode) if q["step"] == "round"]
    assert [q["to"] for q in asked] == [["alice"], ["bob"]]
    assert moves[0]["issues"] == {"price": ["10", "15", "20", "25", "30"], "vendor": ["acme", "globex"]}
    m = run["metrics"]
    assert m["mpc"] == 0.75 and m["participants"] == 2
    assert m["satisfaction"] == {"alice": 0.75, "bob": 0.25} and m["min_satisfaction"] == 0.25
    commit = await admin_conn.fetchrow(
        "SELECT * FROM mycelium.messages WHERE episode = $1 AND kind = 'commit'", episode
    )
    assert commit["subkind"] == "converged" and commit["payload"]["assignments"] == run["assignments"]
    print(commit["content"])
