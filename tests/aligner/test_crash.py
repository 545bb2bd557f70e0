"""A worker killed with SIGKILL in the middle of a negotiation: another worker takes the run over
when its lease runs out, replays the recorded moves into a fresh NEGMAS mechanism and finishes it,
with no move asked twice and the outcome a crash-free run of the same script gets."""

from __future__ import annotations

import asyncpg
import pytest

from tests.aligner.conftest import closed, eventually, make_task, questions, run_of, setup_room, summon, trace

pytestmark = pytest.mark.slow

ENV = {"MYCELIUM_ENGINE_LEASE_SECONDS": "2", "MYCELIUM_ALIGNER_ROUND_TIMEOUT_S": "120"}
OPEN_A = "[[mycelium: offer price=10 vendor=acme confidence=0.6]]"
OPEN_B = "[[mycelium: offer price=30 vendor=globex confidence=0.5]]"
MOVES = {
    ("alice", 1): "[[mycelium: offer price=15 vendor=acme]]",
    ("bob", 2): "[[mycelium: offer price=25 vendor=acme]]",
    ("alice", 3): "[[mycelium: offer price=20 vendor=acme confidence=0.7]]",
    ("bob", 4): "Fine. [[mycelium: accept confidence=0.8]]",
}


def member(handle: str, skip: int | None = None):
    def rule(text: str) -> str | None:
        if "· opening positions ·" in text:
            return OPEN_A if handle == "alice" else OPEN_B
        for (who, n), said in MOVES.items():
            if who == handle and f"· move {n} of" in text and n != skip:
                return said
        return None

    return rule


def moves_of(entries: list[dict]) -> list[tuple]:
    return [(e["who"], e["action"], tuple(sorted((e.get("offer") or {}).items()))) for e in entries
            if e["step"] == "round"]


async def test_a_worker_killed_mid_negotiation_is_replaced_and_the_outcome_is_the_crash_free_one(
    admin_conn: asyncpg.Connection, engine_workers, agents
):
    # the crash-free run, in a room of its own
    await setup_room(admin_conn, "orbit")
    key, episode = await make_task(admin_conn, "orbit", "Calm")
    calm = engine_workers(**ENV)
    calm.wait_ready()
    agents("alice", member("alice"), room="orbit")
    agents("bob", member("bob"), room="orbit")
    await summon(admin_conn, "orbit", key, "@aligner @alice @bob: price and vendor")
    baseline = await closed(admin_conn, episode, room="orbit")
    assert baseline["state"] == "converged"
    expected = moves_of(await trace(admin_conn, baseline["id"], room="orbit"))
    assert len(expected) == 4
    calm.kill()

    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Crash")
    first = engine_workers(**ENV)
    first.wait_ready()
    agents("alice", member("alice"))
    agents("bob", member("bob", skip=2))  # bob's second move is written while no worker runs
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: price and vendor")

    async def asking_bob():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and list(r["waiting"]) == ["bob"] and r["turn"] == 2 else None

    before = await eventually(asking_bob)
    assert before["lease_owner"].split(":")[1] == str(first.proc.pid)
    first.kill()  # SIGKILL: the lease stays until it runs out
    await admin_conn.execute(
        "SELECT * FROM mycelium.reply('atlas', 'bob', $1, NULL, $2)", MOVES[("bob", 2)], episode
    )
    second = engine_workers(**ENV)
    second.wait_ready()
    run = await closed(admin_conn, episode)

    assert run["state"] == "converged" == baseline["state"]
    assert run["assignments"] == baseline["assignments"] == {"price": "20", "vendor": "acme"}
    entries = await trace(admin_conn, run["id"])
    assert moves_of(entries) == expected
    rows = await admin_conn.fetch(
        "SELECT turn, worker FROM mycelium.engine_trace WHERE room = 'atlas' AND run_id = $1 ORDER BY turn",
        run["id"],
    )
    assert [r["turn"] for r in rows] == [1, 2, 3, 4, 5]
    pids = [r["worker"].split(":")[1] for r in rows]
    assert pids[:2] == [str(first.proc.pid)] * 2 and pids[2:] == [str(second.proc.pid)] * 3
    # nothing was asked twice: one opening, then moves 1..4, each once
    asked = await questions(admin_conn, episode)
    assert [(q["step"], q.get("round")) for q in asked] == [
        ("opening", None), ("round", 1), ("round", 2), ("round", 3), ("round", 4)
    ]
    assert run["metrics"] == baseline["metrics"]
