"""Done means: agents on different replicas take turns in a task's thread exactly as the floor says,
a write out of turn never lands from any client, and nobody misses or double-receives a turn."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
import pytest

pytestmark = pytest.mark.slow


async def test_agents_on_two_replicas_take_turns_as_the_floor_says(hub_process, task, admin_conn):
    a, b = hub_process(), hub_process()
    replica = {"ana": a.url, "ben": b.url}

    async def hold(speaker: str) -> None:  # the conductor gives the turn, from psql
        await admin_conn.execute("SELECT holder FROM mycelium.hold_floor('atlas', $1, 'conductor', ARRAY[$2])",
                                 task.episode, speaker)

    async with httpx.AsyncClient(timeout=30) as http:
        async def turn(agent: str) -> dict:
            r = await http.get(f"{replica[agent]}/api/rooms/atlas/await",
                               params={"handle": agent, "episode": task.episode, "timeout": 20})
            return r.json()["message"]

        async def reply(agent: str, text: str, via: str | None = None) -> httpx.Response:
            return await http.post(f"{via or replica[agent]}/api/rooms/atlas/reply",
                                   json={"handle": agent, "text": text, "episode": task.episode})

        transcript = []
        for round_no in range(3):
            for agent, other in (("ana", "ben"), ("ben", "ana")):
                waiting = asyncio.create_task(turn(agent))
                await hold(agent)
                await admin_conn.execute(  # the conductor engine, declared as the actor
                    "SELECT id FROM mycelium.post_message(mycelium.acting('atlas', 'conductor', 'engine'),"
                    " 'conductor', $1, $2)", f"@{agent} round {round_no}: your move", task.episode)
                asked = await asyncio.wait_for(waiting, 15)
                assert asked["content"] == f"@{agent} round {round_no}: your move"
                # out of turn: refused on either replica, and through psql
                for via in (a.url, b.url):
                    r = await reply(other, "me first!", via)
                    assert r.status_code == 409 and f"@{other} does not have the floor" in r.json()["message"]
                with pytest.raises(asyncpg.PostgresError):
                    await admin_conn.execute("INSERT INTO mycelium.messages (room, episode, sender, content) "
                                             "VALUES ('atlas', $1, $2, 'me first!')", task.episode, other)
                r = await reply(agent, f"{agent} moves in round {round_no}")
                assert r.status_code == 201, r.text
                transcript.append(f"{agent} moves in round {round_no}")
        await admin_conn.fetchval("SELECT mycelium.release_floor('atlas', $1)", task.episode)

        said = await admin_conn.fetch(
            "SELECT sender, content FROM mycelium.messages WHERE episode = $1 AND sender <> 'conductor' "
            "ORDER BY position", task.episode)
        assert [r["content"] for r in said] == transcript
        assert "me first!" not in [r["content"] for r in said]
        # every turn was delivered once: the conductor's inbox holds exactly the six replies
        got = []
        while (m := (await http.get(f"{a.url}/api/rooms/atlas/await",
                                    params={"handle": "conductor", "timeout": 0.2})).json()["message"]):
            got.append(m["content"])
        assert got == transcript
