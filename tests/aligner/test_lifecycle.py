"""How a negotiation ends without one: nothing to negotiate leaves its explanation and no episode;
a member who leaves (the room, or the roster) aborts it as rejected, naming who left."""

from __future__ import annotations

import asyncpg
import pytest

from tests.aligner.conftest import closed, eventually, make_task, run_of, scripted, setup_room, summon, trace

OPEN_A = "Cheap and from acme. [[mycelium: offer price=10 vendor=acme]]"
OPEN_B = "[[mycelium: offer price=30 vendor=globex]] I need margin."


async def no_episode(conn: asyncpg.Connection, episode: str, run: asyncpg.Record) -> str:
    """The run ended with its explanation in the thread, no commit and no record; the explanation."""
    assert run["state"] == "rejected" and run["assignments"] is None
    assert await conn.fetchval(
        "SELECT count(*) FROM mycelium.memories WHERE room = 'atlas' AND key = 'log/episodes/' || $1",
        run["short_id"],
    ) == 0
    assert await conn.fetchval(
        "SELECT count(*) FROM mycelium.messages WHERE episode = $1 AND kind = 'commit'", episode
    ) == 0
    said = await conn.fetchval(
        "SELECT content FROM mycelium.messages WHERE episode = $1 AND sender = 'aligner' "
        "AND payload -> 'aligner' ->> 'event' = 'close'",
        episode,
    )
    assert said is not None and "nothing to negotiate" in said and "Record:" not in said
    # no episode to list either (the run itself stays, closed rejected with its reason)
    assert await conn.fetchval("SELECT count(*) FROM mycelium.episodes WHERE run_id = $1", run["id"]) == 0
    # the thread is given back: no roster, no floor
    assert await conn.fetchval("SELECT count(*) FROM mycelium.rosters WHERE episode = $1", episode) == 0
    assert await conn.fetchval("SELECT count(*) FROM mycelium.floors WHERE episode = $1", episode) == 0
    return said


async def test_members_who_already_agree_have_nothing_to_negotiate_and_leave_no_episode(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Agreed already")
    await engines_hub()
    agents("alice", scripted("[[mycelium: offer price=20 vendor=acme]]", [None]))
    agents("bob", scripted("Same here. [[mycelium: offer price=20 vendor=acme]]", [None]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    run = await closed(admin_conn, episode)
    said = await no_episode(admin_conn, episode, run)
    assert "already agree on every term" in said and "already agree" in run["reason"]
    assert [m["step"] for m in await trace(admin_conn, run["id"])] == ["opening"]


@pytest.mark.slow
async def test_fewer_than_two_opening_positions_leave_an_explanation_and_no_episode(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Half a negotiation")
    await engines_hub(MYCELIUM_ALIGNER_ROUND_TIMEOUT_S="1")
    agents("alice", scripted(OPEN_A, [None]))  # bob never states a position
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    run = await closed(admin_conn, episode)
    said = await no_episode(admin_conn, episode, run)
    assert "fewer than two members stated an opening position" in said


async def waiting_on(conn: asyncpg.Connection, episode: str, handle: str) -> asyncpg.Record:
    async def ready():
        r = await run_of(conn, "atlas", episode)
        return r if r is not None and list(r["waiting"]) == [handle] else None

    return await eventually(ready)


async def test_a_member_removed_from_the_room_aborts_the_negotiation_naming_them(
    admin_conn: asyncpg.Connection, engines_hub, agents, client
):
    await setup_room(admin_conn)
    r = await client.patch("/api/rooms/atlas", json={"members": ["alice", "bob", "julia"], "by": "julia"})
    assert r.status_code == 200, r.text
    key, episode = await make_task(admin_conn, "atlas", "Walkout")
    await engines_hub(MYCELIUM_ALIGNER_ROUND_TIMEOUT_S="60")
    agents("alice", scripted(OPEN_A, ["[[mycelium: offer price=20 vendor=acme]]"]))
    agents("bob", scripted(OPEN_B, [None]))  # bob thinks: the negotiation waits on him
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")
    run = await waiting_on(admin_conn, episode, "bob")
    assert run["flow"]["enrolled"] == ["alice", "bob"]

    # a change that takes nobody out of the negotiation changes nothing
    r = await client.patch("/api/rooms/atlas", json={"members": ["alice", "bob"], "by": "julia"})
    assert r.status_code == 200, r.text
    same = await run_of(admin_conn, "atlas", episode)
    assert same["seq"] == run["seq"] and same["state"] == "open"

    r = await client.patch("/api/rooms/atlas", json={"members": ["alice"], "by": "julia"})
    assert r.status_code == 200, r.text
    # the database moved the run on at once: a step computed before the change is refused
    moved = await run_of(admin_conn, "atlas", episode)
    assert moved["seq"] > run["seq"] or moved["state"] != "open"
    done = await closed(admin_conn, episode, timeout=20)  # long before bob's round timeout
    assert done["state"] == "rejected" and done["id"] == run["id"]
    assert done["reason"] == "the negotiation's membership changed: @bob left the room"
    commit = await admin_conn.fetchrow(
        "SELECT * FROM mycelium.messages WHERE episode = $1 AND kind = 'commit'", episode
    )
    assert commit["subkind"] == "rejected" and "bob left the room" in commit["content"]
    assert (await trace(admin_conn, run["id"]))[-1]["aborted"] == done["reason"]
    record = await admin_conn.fetchval(
        "SELECT body FROM mycelium.memories WHERE room = 'atlas' AND key = 'log/episodes/' || $1", run["short_id"]
    )
    assert "outcome: **rejected**" in record and "bob left the room" in record


@pytest.mark.slow
async def test_an_operator_thawing_the_roster_aborts_the_negotiation(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Thawed")
    await engines_hub(MYCELIUM_ALIGNER_ROUND_TIMEOUT_S="60")
    agents("alice", scripted(OPEN_A, ["[[mycelium: offer price=20 vendor=acme]]"]))
    agents("bob", scripted(OPEN_B, [None]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")
    run = await waiting_on(admin_conn, episode, "bob")
    assert await admin_conn.fetchval("SELECT mycelium.thaw_roster('atlas', $1)", episode)
    done = await closed(admin_conn, episode, timeout=20)
    assert done["state"] == "rejected" and done["id"] == run["id"]
    assert done["reason"] == "the negotiation's membership changed: the thread's roster was thawed"
