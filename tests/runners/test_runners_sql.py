"""sql/runners.sql tried with plain SQL, as a person in psql would: definitions refused before
anything is written, a wake written with its message, one start per wake however many claim, the
wake an awaiting process answered skipped, approval holding a job, failures retried by the rules
and never in a loop."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

RUNNER = "SELECT * FROM mycelium.add_runner('atlas', $1, $2::text[], $3, $4::text[], p_by => 'ops')"


async def refused(conn: asyncpg.Connection, sql: str, *args: object) -> asyncpg.PostgresError:
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.execute(sql, *args)
    return caught.value


@pytest.fixture
async def room(admin_conn: asyncpg.Connection) -> asyncpg.Connection:
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    return admin_conn


async def connect(dsn: str) -> asyncpg.Connection:
    from mycelium.db.pool import setup_connection

    conn = await asyncpg.connect(dsn)
    await setup_connection(conn)
    return conn


async def mention(conn: asyncpg.Connection, handle: str, text: str = "over to you") -> int:
    row = await conn.fetchrow("SELECT position FROM mycelium.post_message('atlas', 'alice', $1)",
                              f"@{handle} {text}")
    return row["position"]


async def jobs(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM mycelium.runner_jobs ORDER BY id")


async def claim(conn: asyncpg.Connection, worker: str = "w1", limit: int = 10) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM mycelium.claim_runner_jobs($1, $2, 30)", worker, limit)


async def finish(conn: asyncpg.Connection, job: int, code: int | None, reason: str | None = None,
                 worker: str = "w1") -> asyncpg.Record:
    return await conn.fetchrow("SELECT * FROM mycelium.finish_runner_job('atlas', $1, $2, $3, $4, 'out', 'err')",
                               job, worker, code, reason)


@pytest.mark.parametrize(("command", "cwd", "env", "code", "words"), [
    ([], "", [], "missing_command", "needs a command"),
    ([" "], "", [], "missing_command", "needs a command"),
    (["pi", "{room}", "{nope}"], "", [], "unknown_placeholder", "{nope} is not a placeholder"),
    (["pi"], "../elsewhere", [], "cwd_outside_data", "leads outside the data folder"),
    (["pi"], "a/../../b", [], "cwd_outside_data", "leads outside the data folder"),
    (["pi"], "", ["OPENAI_API_KEY=sk-1"], "bad_env_name", "is not a variable name"),
])
async def test_a_runner_that_cannot_run_is_refused_naming_the_problem_and_nothing_is_written(
        room, command, cwd, env, code, words):
    err = await refused(room, RUNNER, "bob", command, cwd, env)
    assert err.sqlstate == "MY422" and code in err.detail and words in str(err)
    assert await room.fetchval("SELECT count(*) FROM mycelium.runners") == 0


async def test_a_runner_inside_the_data_folder_or_absolute_is_taken_and_an_engine_s_handle_is_not(room):
    await room.fetchrow(RUNNER, "bob", ["pi", "-p", "{room}/{handle}/{task}/{episode}"], "agents/./bob", ["HOME"])
    await room.fetchrow(RUNNER, "carol", ["pi"], "/srv/work", [])
    await room.execute("SELECT mycelium.create_engine('atlas', 'conductor', 'conductor', '', 'ops')")
    err = await refused(room, RUNNER, "conductor", ["pi"], "", [])
    assert err.sqlstate == "MY422" and "runner_for_engine" in err.detail


async def test_a_turn_for_a_handle_with_a_runner_is_one_wake_and_later_messages_share_it(room):
    await room.fetchrow(RUNNER, "bob", ["agent", "{room}", "{handle}"], "", [])
    first = await mention(room, "bob")
    await mention(room, "bob", "and this")
    await mention(room, "carol")  # no runner: no job
    got = await jobs(room)
    assert [(j["handle"], j["state"], j["wake_position"]) for j in got] == [("bob", "queued", first)]


async def test_two_workers_claiming_at_once_start_one_process_for_one_wake(db_dsn, room):
    await room.fetchrow(RUNNER, "bob", ["agent"], "", [])
    await mention(room, "bob")
    conns = [await connect(db_dsn) for _ in range(4)]
    try:
        for _ in range(20):  # every round: four workers race for what is queued
            taken = await asyncio.gather(*(claim(c, f"w{i}") for i, c in enumerate(conns)))
            if any(taken):
                break
        started = [j for batch in taken for j in batch]
        assert len(started) == 1 and started[0]["command"] == ["agent"]
        # another message while it runs is a new wake, which waits for a free slot (max_concurrent 1)
        await mention(room, "bob", "more")
        assert not any(await asyncio.gather(*(claim(c, f"w{i}") for i, c in enumerate(conns))))
    finally:
        for c in conns:
            await c.close()


async def test_a_wake_an_awaiting_process_answered_is_skipped(room):
    await room.fetchrow(RUNNER, "bob", ["agent"], "", [])
    await room.execute("SELECT mycelium.touch_presence('atlas', 'bob', 30)")  # bob is awaiting
    await mention(room, "bob")
    j = (await jobs(room))[0]
    assert j["not_before"] > j["created_at"]  # a present handle's wake waits its grace
    await room.execute("SELECT * FROM mycelium.take_next('atlas', 'bob')")  # bob's await took it
    await room.execute("UPDATE mycelium.runner_jobs SET not_before = now()")
    assert await claim(room) == []
    j = (await jobs(room))[0]
    assert j["state"] == "skipped" and "took the message" in j["reason"]


async def test_placeholders_are_filled_from_the_wake(room):
    await room.fetchrow(RUNNER, "bob", ["agent", "--room={room}", "{handle}", "{task}", "{episode}"], "", [])
    await room.execute("SELECT 1 FROM mycelium.create_task('atlas', 'Ship it', 'alice')")
    key = await room.fetchval("SELECT key FROM mycelium.memories WHERE key LIKE 'work/%'")
    episode = await room.fetchval("SELECT mycelium.episode_short_id(episode) FROM mycelium.memories WHERE key = $1",
                                  key)
    await room.execute("SELECT 1 FROM mycelium.post_message('atlas', 'alice', '@bob take it', $1)", episode)
    (job,) = await claim(room)
    assert job["command"] == ["agent", "--room=atlas", "bob", key, episode]


async def test_approval_holds_a_job_until_an_operator_approves_it(room):
    await room.execute("SELECT mycelium.add_runner('atlas', 'bob', '{agent}', p_approval => 'required', p_by => 'ops')")
    await mention(room, "bob")
    (j,) = await jobs(room)
    assert j["state"] == "waiting" and await claim(room) == []
    err = await refused(room, "SELECT mycelium.decide_runner_job('atlas', $1, true)", j["id"])
    assert "missing_author" in err.detail
    await room.execute("SELECT mycelium.decide_runner_job('atlas', $1, true, 'ops')", j["id"])
    (started,) = await claim(room)
    assert started["approved_by"] == "ops"
    err = await refused(room, "SELECT mycelium.decide_runner_job('atlas', $1, false, 'ops')", j["id"])
    assert err.sqlstate == "MY409" and "job_not_waiting" in err.detail


async def test_a_failing_runner_is_retried_with_backoff_then_given_up_and_paused_never_in_a_loop(room):
    await room.execute("SELECT mycelium.add_runner('atlas', 'bob', '{agent}', p_max_attempts => 3, p_by => 'ops')")
    await room.execute("SELECT mycelium.set_config('runners.pause_after', '4')")
    await mention(room, "bob")
    for attempt in (1, 2, 3):
        await room.execute("UPDATE mycelium.runner_jobs SET not_before = now() WHERE state = 'queued'")
        (j,) = await claim(room)
        assert j["attempt"] == attempt
        done = await finish(room, j["id"], 1)
        assert done["state"] == "failed" and done["reason"] == "exited with 1" and done["stderr_tail"] == "err"
    queued = await room.fetch("SELECT * FROM mycelium.runner_jobs WHERE state = 'queued'")
    assert queued == []  # three attempts, then it is given up
    retry = await room.fetchrow("SELECT * FROM mycelium.runner_jobs WHERE attempt = 2")
    assert retry["retry_of"] is not None and retry["not_before"] > retry["created_at"]
    # the next message is a new wake; its failure is the fourth in a row: the runner pauses
    await mention(room, "bob", "again")
    (j,) = await claim(room)
    await finish(room, j["id"], None, "could not start 'agent': No such file or directory")
    runner = await room.fetchrow("SELECT * FROM mycelium.runners")
    assert "paused after 4 failed jobs in a row" in runner["paused_reason"]
    assert await room.fetchval("SELECT count(*) FROM mycelium.runner_jobs WHERE state = 'queued'") == 0
    await mention(room, "bob", "hello?")  # a paused runner is not woken
    assert await room.fetchval("SELECT count(*) FROM mycelium.runner_jobs WHERE state = 'queued'") == 0
    await room.execute("SELECT mycelium.pause_runner('atlas', 'bob', NULL)")  # resumed
    await mention(room, "bob", "back")
    assert await room.fetchval("SELECT count(*) FROM mycelium.runner_jobs WHERE state = 'queued'") == 1


async def test_a_job_whose_worker_died_is_failed_and_retried_by_whoever_claims_next(room):
    await room.fetchrow(RUNNER, "bob", ["agent"], "", [])
    await mention(room, "bob")
    (j,) = await claim(room, "dead-worker")
    await room.execute("UPDATE mycelium.runner_jobs SET taken_until = now() - interval '1 second' WHERE id = $1",
                       j["id"])
    await room.execute("UPDATE mycelium.runner_jobs SET not_before = now()")  # (the retry's backoff)
    assert await claim(room, "w2") == []  # reaped; its retry waits out its backoff
    gone = await room.fetchrow("SELECT * FROM mycelium.runner_jobs WHERE id = $1", j["id"])
    assert gone["state"] == "failed" and "dead-worker stopped" in gone["reason"]
    await room.execute("UPDATE mycelium.runner_jobs SET not_before = now() WHERE state = 'queued'")
    (again,) = await claim(room, "w2")
    assert again["retry_of"] == j["id"] and again["attempt"] == 2
    err = await refused(room, "SELECT mycelium.finish_runner_job('atlas', $1, 'dead-worker', 0)", j["id"])
    assert err.sqlstate == "MY409" and "job_not_held" in err.detail


async def test_a_job_that_exits_without_reading_its_message_is_not_started_again_for_it(room):
    await room.fetchrow(RUNNER, "bob", ["agent"], "", [])
    await mention(room, "bob")
    (j,) = await claim(room)
    done = await finish(room, j["id"], 0)
    assert done["state"] == "done" and "without taking a message" in done["reason"]
    assert await room.fetchval("SELECT count(*) FROM mycelium.runner_jobs WHERE state = 'queued'") == 0


async def test_a_one_shot_agent_that_took_its_turn_is_started_again_for_what_still_waits(room):
    await room.fetchrow(RUNNER, "bob", ["agent"], "", [])
    await mention(room, "bob", "one")
    (j,) = await claim(room)
    later = await mention(room, "bob", "two")  # arrives while it runs: a wake of its own, queued
    await room.execute("SELECT * FROM mycelium.take_next('atlas', 'bob')")  # it takes "one" and exits
    await finish(room, j["id"], 0)
    (again,) = await claim(room)
    assert again["wake_position"] == later
    await room.execute("SELECT * FROM mycelium.take_next('atlas', 'bob')")
    await finish(room, again["id"], 0)
    assert await claim(room) == []  # nothing waits: nothing starts


async def test_a_runner_stops_at_its_turns_in_the_room(room):
    await room.execute("SELECT mycelium.add_runner('atlas', 'bob', '{agent}', p_max_turns_per_room => 1, p_by => 'ops')")
    await mention(room, "bob")
    (j,) = await claim(room)
    await room.execute("SELECT * FROM mycelium.take_next('atlas', 'bob')")
    await finish(room, j["id"], 0)
    await mention(room, "bob", "once more")
    assert await claim(room) == []
    last = (await jobs(room))[-1]
    assert last["state"] == "skipped" and "max_turns_per_room" in last["reason"]
