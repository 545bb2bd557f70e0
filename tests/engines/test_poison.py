"""A summon that fails every attempt is not left pending in silence: its attempts are bounded by the
database, and the last closes it failed with the error said in its thread; the others go on."""

from __future__ import annotations

import asyncpg
import pytest

from mycelium.workers import engines as engines_loop
from tests.engines.conftest import closed_run, coordinate, eventually, make_task, setup_room
from tests.engines.test_flows import by_step


async def summon_of(conn: asyncpg.Connection, like: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT s.*, m.content AS said, m.sender AS said_by, m.episode AS said_in FROM mycelium.engine_summons s "
        "LEFT JOIN mycelium.messages m ON m.id = s.answer_id WHERE s.content LIKE $1",
        like,
    )


@pytest.mark.slow
async def test_a_summon_that_breaks_every_attempt_is_closed_failed_in_its_thread(
    admin_conn: asyncpg.Connection, engines_hub, agents, monkeypatch
):
    real = engines_loop.EngineWorker.conduct
    tries: list[int] = []

    async def conduct(self, s):  # this summon's answer breaks, whichever worker takes it
        if "poison" in s["content"]:
            tries.append(s["attempts"])
            raise RuntimeError("the answer broke")
        await real(self, s)

    monkeypatch.setattr(engines_loop.EngineWorker, "conduct", conduct)
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Poisoned")
    key2, episode2 = await make_task(admin_conn, "atlas", "Healthy")
    await engines_hub()
    agents("nova", by_step(draft="Draft"))
    agents("julia", by_step(review="Fine [[mycelium: stance=accept]]"))
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: poison")
    await coordinate(admin_conn, "atlas", key2, "review @nova @julia: healthy")
    # the healthy summon behind it runs while the poisoned one waits between its attempts
    assert (await closed_run(admin_conn, "atlas", episode2))["state"] == "resolved"

    async def closed():
        s = await summon_of(admin_conn, "%poison%")
        return s if s["state"] == "done" else None

    s = await eventually(closed, timeout=30)
    assert (s["outcome"], s["attempts"], tries) == ("failed", 5, [1, 2, 3, 4, 5])
    assert s["error"] == "RuntimeError: the answer broke"
    assert s["said_by"] == "conductor" and s["said_in"] == episode
    assert s["said"] == (
        "✗ conductor could not answer this after 5 attempt(s) (RuntimeError: the answer broke); "
        "the summon is closed as failed."
    )
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.engine_runs WHERE episode = $1", episode) == 0


async def test_a_summon_whose_workers_died_with_it_is_given_up_by_the_next_claim(
    admin_conn: asyncpg.Connection, engines_hub
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Crashed")
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: crash")
    # five workers took it and died holding it (as `kill -9` leaves it)
    await admin_conn.execute(
        "UPDATE mycelium.engine_summons SET attempts = 5, taken_by = 'dead', "
        "taken_until = now() - interval '1 second'"
    )
    await engines_hub()

    async def closed():
        s = await summon_of(admin_conn, "%crash%")
        return s if s["state"] == "done" else None

    s = await eventually(closed, timeout=30)
    assert s["outcome"] == "failed" and s["error"] == "its workers stopped while answering it"
    assert "after 5 attempt(s) (its workers stopped while answering it)" in s["said"]
    assert s["said_in"] == episode
