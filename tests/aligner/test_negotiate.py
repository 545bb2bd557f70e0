"""Negotiations end to end on the engines loop, with scripted members and the real NEGMAS."""

from __future__ import annotations

import asyncpg
import pytest

from tests.aligner.conftest import (
    closed,
    eventually,
    make_task,
    questions,
    run_of,
    scripted,
    setup_room,
    summon,
    trace,
)

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


async def test_members_who_never_agree_end_rejected_at_negmas_deadline_with_nothing_invented(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Stalemate")
    await engines_hub(MYCELIUM_ALIGNER_MAX_STEPS="6")
    agents("alice", scripted(OPEN_A, ["[[mycelium: offer price=10 vendor=acme]]", "[[mycelium: reject]]"]))
    agents("bob", scripted(OPEN_B, ["No. [[mycelium: offer price=30 vendor=globex]]", "Still no."]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    run = await closed(admin_conn, episode)
    assert run["state"] == "rejected" and run["assignments"] is None
    assert "NEGMAS's 6 steps" in run["reason"]
    rounds = [m for m in await trace(admin_conn, run["id"]) if m["step"] == "round"]
    assert len(rounds) == 6  # NEGMAS's n_steps, each move asked once, none asked after the end
    assert [m["who"] for m in rounds] == ["alice", "bob"] * 3
    assert len([q for q in await questions(admin_conn, episode) if q["step"] == "round"]) == 6
    # a reject and unreadable prose (no model here) hold the member's own line, never the other's
    assert all(m["action"] == "offer" for m in rounds)
    assert {tuple(sorted(m["offer"].items())) for m in rounds if m["who"] == "alice"} == {
        (("price", "10"), ("vendor", "acme"))
    }
    assert {m["how"] for m in rounds if m["who"] == "bob"} == {"marker", "held"}
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM mycelium.messages WHERE episode = $1 AND kind = 'commit' AND subkind = 'converged'",
        episode,
    ) == 0
    # the roster and the floor are given back when it closes
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.rosters WHERE episode = $1", episode) == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.floors WHERE episode = $1", episode) == 0


@pytest.mark.slow
async def test_an_unreadable_proposer_never_adopts_the_standing_offer(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    """No phantom convergence: bob's off-grid offer, his prose with no model, and his silence each
    hold his own line; had any adopted alice's standing offer, NEGMAS would have converged."""
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Phantom")
    await engines_hub(MYCELIUM_ALIGNER_MAX_STEPS="6", MYCELIUM_ALIGNER_ROUND_TIMEOUT_S="1")
    agents("alice", scripted(OPEN_A, ["[[mycelium: offer price=20 vendor=acme]]"]))
    agents("bob", scripted(OPEN_B, ["[[mycelium: offer price=1000 vendor=acme]]", "Sounds about right to me", None]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    run = await closed(admin_conn, episode)
    assert run["state"] == "rejected" and run["assignments"] is None
    bob = [m for m in await trace(admin_conn, run["id"]) if m.get("who") == "bob"]
    assert [m["how"] for m in bob] == ["held", "held", "silent"]
    assert all(m["offer"] == {"price": "30", "vendor": "globex"} for m in bob)
    assert "does not fit the issues" in bob[0]["said"] and "no model" in bob[1]["said"]


async def test_fewer_than_two_members_is_refused_with_no_episode(admin_conn: asyncpg.Connection, engines_hub):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Alone")
    await engines_hub()
    await summon(admin_conn, "atlas", key, "@aligner @alice: the price")

    async def answered():
        return await admin_conn.fetchrow(
            "SELECT * FROM mycelium.engine_summons WHERE episode = $1 AND state = 'done'", episode
        )


    s = await eventually(answered)
    assert s["outcome"] == "refused" and s["run_id"] is None
    said = await admin_conn.fetchval("SELECT content FROM mycelium.messages WHERE id = $1", s["answer_id"])
    assert "at least two agents" in said
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.engine_runs") == 0


async def test_the_roster_is_frozen_for_the_run_and_a_membership_change_aborts_it(
    admin_conn: asyncpg.Connection, engines_hub, agents, client
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Frozen")
    await engines_hub()
    agents("alice", scripted(OPEN_A, ["[[mycelium: offer price=20 vendor=acme]]"]))
    agents("bob", scripted(OPEN_B, [None]))  # bob thinks: the negotiation waits on him
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    async def waiting_on_bob():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and list(r["waiting"]) == ["bob"] else None

    run = await eventually(waiting_on_bob)
    roster = await admin_conn.fetchrow("SELECT * FROM mycelium.rosters WHERE episode = $1", episode)
    assert list(roster["members"]) == ["alice", "bob"] and roster["frozen_by"] == "aligner"
    # an outsider is refused from HTTP and from plain SQL, and nothing lands
    before = await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE episode = $1", episode)
    r = await client.post(
        "/api/rooms/atlas/messages", json={"sender_handle": "carol", "content": "me too", "episode": episode}
    )
    assert r.status_code == 403 and r.json()["error"] == "not_in_roster"
    with pytest.raises(asyncpg.PostgresError) as refused:
        await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'carol', 'hi', $1)", episode)
    assert refused.value.sqlstate == "MY403"
    with pytest.raises(asyncpg.PostgresError) as refused:
        await admin_conn.execute(
            "INSERT INTO mycelium.messages (room, sender, content, episode) VALUES ('atlas', 'julia', 'x', $1)",
            episode,
        )
    assert refused.value.sqlstate == "MY403"
    # a member not addressed now is refused by the floor
    with pytest.raises(asyncpg.PostgresError) as refused:
        await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'alice', 'hm', $1)", episode)
    assert refused.value.sqlstate == "MY409"
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE episode = $1", episode) == before
    # a membership change (the roster frozen again with carol in it) aborts the negotiation
    await admin_conn.execute(
        "SELECT mycelium.freeze_roster('atlas', $1, ARRAY['alice', 'bob', 'carol'], 'julia')", episode
    )
    done = await closed(admin_conn, episode, timeout=30)
    assert done["state"] == "rejected"
    assert done["reason"] == (
        "the negotiation's membership changed: @carol added to the roster; the roster frozen again by @julia"
    )
    assert done["assignments"] is None and done["id"] == run["id"]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.rosters WHERE episode = $1", episode) == 0
    commit = await admin_conn.fetchrow("SELECT * FROM mycelium.messages WHERE episode = $1 AND kind = 'commit'", episode)
    assert commit["subkind"] == "rejected"


async def test_a_converged_negotiation_leaves_a_team_prior_the_next_one_reads(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    await engines_hub()
    agents("alice", scripted(OPEN_A, ["[[mycelium: offer price=20 vendor=acme confidence=0.8]]"]))
    agents("bob", scripted(OPEN_B, ["[[mycelium: accept confidence=0.7]]"]))
    seen: list[int] = []
    for title in ("First order", "Second order"):
        key, episode = await make_task(admin_conn, "atlas", title)
        await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")
        run = await closed(admin_conn, episode)
        assert run["state"] == "converged"
        prior = await admin_conn.fetchrow(
            "SELECT * FROM mycelium.memories WHERE room = 'atlas' AND key = 'l9/rule_update/price-vendor'"
        )
        l9 = prior["meta"]["l9"]
        assert l9["revision_cause"] == "converged_episode" and l9["episode_id"] == run["short_id"]
        assert l9["posterior"] == run["metrics"]["mpc"]
        seen.append(l9["episode_count"])
        asked = await admin_conn.fetch(
            "SELECT content FROM mycelium.messages WHERE episode = $1 AND sender = 'aligner' "
            "AND payload -> 'aligner' ->> 'step' = 'round'",
            episode,
        )
        assert any("Last time this team settled" in a["content"] for a in asked) == (title == "Second order")
    assert seen == [1, 2]
    # the negotiation never touched the task's status or lease
    rows = await admin_conn.fetch("SELECT meta FROM mycelium.memories WHERE room = 'atlas' AND key LIKE 'work/%'")
    assert len(rows) == 2 and all(r["meta"]["status"] == "open" for r in rows)
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.assignments WHERE room = 'atlas'") == 0
