"""Engine work on real `mycelium worker` processes: two workers share many runs with no step asked
twice and no post duplicated; a worker killed with SIGKILL in the middle of a run is replaced by
another, which carries on at the step the database says is current."""

from __future__ import annotations

from collections import Counter

import asyncpg
import pytest

from tests.engines.conftest import closed_run, coordinate, eventually, make_task, run_of, setup_room, trace_of
from tests.engines.test_flows import gated_rules

pytestmark = pytest.mark.slow

ENV = {"MYCELIUM_ENGINE_LEASE_SECONDS": "2", "MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S": "120"}


async def turn_posts(conn: asyncpg.Connection, episode: str) -> list[tuple[int, str]]:
    """Every question the conductor posted in a thread, read from the timeline itself."""
    rows = await conn.fetch(
        "SELECT payload -> 'conductor' AS line FROM mycelium.messages WHERE episode = $1 AND sender = 'conductor' "
        "AND payload -> 'conductor' ->> 'event' = 'turn' ORDER BY position",
        episode,
    )
    return [(r["line"]["turn"], r["line"]["step"]) for r in rows]


async def test_two_workers_share_fifty_runs_and_nothing_is_asked_or_posted_twice(
    admin_conn: asyncpg.Connection, engine_workers, agents
):
    await setup_room(admin_conn)
    tasks = [await make_task(admin_conn, "atlas", f"Page {i}") for i in range(50)]
    workers = [engine_workers(**ENV) for _ in range(2)]
    ids = [w.wait_ready() for w in workers]
    assert len(set(ids)) == 2
    nova_rule, _ = gated_rules()
    agents("nova", nova_rule)
    agents("julia", lambda text: "Ship it [[mycelium: stance=accept]]" if "· check ·" in text else None)
    for key, _ in tasks:  # at once, from one connection each time: the summons land together
        await coordinate(admin_conn, "atlas", key, "gated @nova @julia: ship it")

    async def all_closed():
        n = await admin_conn.fetchval("SELECT count(*) FROM mycelium.engine_runs WHERE state <> 'open'")
        return n == 50

    await eventually(all_closed, timeout=180, step=0.2)

    by_worker: Counter[str] = Counter()
    for _key, episode in tasks:
        run = await run_of(admin_conn, "atlas", episode)
        assert run["state"] == "resolved" and run["turn"] == 2
        trace = await trace_of(admin_conn, "atlas", run["id"])
        assert [(t["turn"], t["step"]) for t in trace] == [(1, "propose"), (2, "check")]
        by_worker.update(t["worker"].rsplit(":", 1)[0] for t in trace)
        assert await turn_posts(admin_conn, episode) == [(1, "propose"), (2, "check")]
        events = await admin_conn.fetch(
            "SELECT payload -> 'conductor' ->> 'event' AS e FROM mycelium.messages "
            "WHERE episode = $1 AND sender = 'conductor' ORDER BY position",
            episode,
        )
        assert [e["e"] for e in events] == ["open", "turn", "turn", "edge", "close"]
    # every summon answered once, and both processes did some of the work
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.engine_summons") == 50
    assert await admin_conn.fetchval("SELECT count(DISTINCT run_id) FROM mycelium.engine_summons") == 50
    dup = await admin_conn.fetchval(
        "SELECT count(*) FROM (SELECT run_id, turn, event FROM mycelium.engine_posts WHERE event = 'turn' "
        "GROUP BY 1, 2, 3 HAVING count(*) > 1) d"
    )
    assert dup == 0
    assert len(by_worker) == 2, by_worker


async def test_a_worker_killed_mid_run_is_replaced_and_the_trace_has_no_gap_or_repeat(
    admin_conn: asyncpg.Connection, engine_workers, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Survive a crash")
    first = engine_workers(**ENV)
    first.wait_ready()
    nova_rule, _ = gated_rules()
    agents("nova", nova_rule)
    await coordinate(admin_conn, "atlas", key, "gated @nova @julia: ship it")

    async def checking():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and r["step"] == "check" and r["asked_position"] else None

    before = await eventually(checking)
    assert before["lease_owner"].split(":")[1] == str(first.proc.pid)
    first.kill()  # SIGKILL: no goodbye, the lease stays until it runs out
    # julia answers while no worker runs; her block is in the database, not in any process
    await admin_conn.execute(
        "SELECT * FROM mycelium.reply('atlas', 'julia', 'Needs a rollback. [[mycelium: stance=block]]', NULL, $1)",
        episode,
    )
    second = engine_workers(**ENV)
    second.wait_ready()
    # (the question she already answered is still in her inbox: she answers only the next one)
    agents(
        "julia", lambda text: "Good now [[mycelium: stance=accept]]" if "· check · turn 4" in text else None
    )
    run = await closed_run(admin_conn, "atlas", episode, timeout=60)
    assert run["state"] == "resolved"
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert [(t["turn"], t["step"]) for t in trace] == [
        (1, "propose"),
        (2, "check"),
        (3, "revise"),
        (4, "check"),
    ]
    pids = [t["worker"].split(":")[1] for t in trace]
    assert pids[0] == str(first.proc.pid) and pids[1:] == [str(second.proc.pid)] * 3
    # the question julia was asked before the crash was not asked again; nothing was posted twice
    assert await turn_posts(admin_conn, episode) == [
        (1, "propose"),
        (2, "check"),
        (3, "revise"),
        (4, "check"),
    ]
    assert trace[1]["entry"]["stances"] == {"julia": "reject"}


async def test_a_stale_worker_changes_nothing(admin_conn: asyncpg.Connection, engines_hub, agents):
    """A move computed from a state the database has left (another seq, a lease lost) is refused."""
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Stale")
    await engines_hub(**ENV)
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: x")

    async def asked():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and r["asked_position"] else None

    run = await eventually(asked)
    for worker, seq, error in (
        (run["lease_owner"], run["seq"] - 1, "step_moved"),
        ("someone-else", run["seq"], "lease_lost"),
    ):
        async with admin_conn.transaction():
            await admin_conn.execute("SELECT mycelium.acting(NULL, 'conductor', 'engine')")
            with pytest.raises(asyncpg.PostgresError) as refused:
                await admin_conn.execute(
                    "SELECT * FROM mycelium.engine_step('atlas', $1, $2, $3, '{}'::jsonb, "
                    "'[{\"event\": \"turn\", \"content\": \"again\"}]'::jsonb, 'draft', '{}', NULL, '{}'::jsonb)",
                    run["id"],
                    worker,
                    seq,
                )
            assert refused.value.sqlstate == "MY409" and error in refused.value.detail
    assert await turn_posts(admin_conn, episode) == [(1, "draft")]


async def test_a_run_the_conductor_cannot_walk_fails_on_the_record_and_the_loop_goes_on(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Broken flow")
    key2, episode2 = await make_task(admin_conn, "atlas", "Fine flow")
    await engines_hub(**ENV)
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: x")

    async def asked():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and r["asked_position"] else None

    await eventually(asked)
    # somebody with the owner's rights breaks the stored flow; the next move cannot be computed
    await admin_conn.execute(
        "UPDATE mycelium.engine_runs SET flow = jsonb_set(flow, '{protocol,steps}', '[]') WHERE episode = $1",
        episode,
    )
    await admin_conn.execute("SELECT * FROM mycelium.reply('atlas', 'nova', 'draft', NULL, $1)", episode)
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "failed" and "FlowError" in run["reason"]
    close = await admin_conn.fetchrow(
        "SELECT subkind, content FROM mycelium.messages WHERE episode = $1 AND kind = 'commit'", episode
    )
    assert close["subkind"] == "rejected" and "could not go on" in close["content"]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.floors WHERE episode = $1", episode) == 0
    # the loop carries on with other runs
    agents("nova", lambda text: "Draft" if "· draft ·" in text else None)
    agents("julia", lambda text: "Yes [[mycelium: stance=accept]]" if "· review ·" in text else None)
    await coordinate(admin_conn, "atlas", key2, "review @nova @julia: y")
    assert (await closed_run(admin_conn, "atlas", episode2))["state"] == "resolved"


async def test_a_worker_told_its_kinds_never_takes_a_run_of_another_kind(
    admin_conn: asyncpg.Connection, engine_workers, agents
):
    """A conductor-only worker takes over a conductor's run whose lease is free, and leaves an open
    negotiation (an aligner's run with no worker) alone, however often it claims."""
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Negotiate the price")
    key2, episode2 = await make_task(admin_conn, "atlas", "Ship it")
    negotiation = await admin_conn.fetchval(
        "INSERT INTO mycelium.engine_runs (room, engine, kind, episode, task_key, summon_id, protocol, flow) "
        "VALUES ('atlas', 'aligner', 'aligner', $1, $2, 0, 'negotiate', '{}') RETURNING id",
        episode,
        key,
    )
    worker = engine_workers(MYCELIUM_ENGINE_KINDS="conductor", **ENV)
    worker.wait_ready()
    nova_rule, _ = gated_rules()
    agents("nova", nova_rule)
    await coordinate(admin_conn, "atlas", key2, "gated @nova @julia: ship it")

    async def checking():
        r = await run_of(admin_conn, "atlas", episode2)
        return r if r is not None and r["step"] == "check" and r["asked_position"] else None

    before = await eventually(checking)
    # its lease given back (as a worker that stops gives it): only a claim takes the run again
    await admin_conn.execute(
        "UPDATE mycelium.engine_runs SET lease_owner = NULL, lease_until = NULL WHERE id = $1", before["id"]
    )
    await admin_conn.execute(
        "SELECT * FROM mycelium.reply('atlas', 'julia', 'Ship it [[mycelium: stance=accept]]', NULL, $1)",
        episode2,
    )
    run = await closed_run(admin_conn, "atlas", episode2, timeout=60)
    assert run["state"] == "resolved"
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert [t["step"] for t in trace] == ["propose", "check"]
    assert {t["worker"].split(":")[1] for t in trace} == {str(worker.proc.pid)}
    left = await admin_conn.fetchrow(
        "SELECT state, seq, lease_owner FROM mycelium.engine_runs WHERE id = $1", negotiation
    )
    assert dict(left) == {"state": "open", "seq": 0, "lease_owner": None}


async def test_only_a_reply_a_run_waits_for_hints_the_engine_workers(
    admin_conn: asyncpg.Connection, db_dsn: str
):
    """mycelium_engines carries the run of a reply its question waits for, and nothing for the other
    messages of the room: a member it does not wait for, another thread, the room's channel."""
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Hinted")
    _, other = await make_task(admin_conn, "atlas", "Elsewhere")
    asked = await admin_conn.fetchval("SELECT max(position) FROM mycelium.messages WHERE room = 'atlas'")
    run = await admin_conn.fetchval(
        "INSERT INTO mycelium.engine_runs (room, engine, episode, task_key, summon_id, protocol, flow, "
        "asked_position, waiting) VALUES ('atlas', 'conductor', $1, $2, 0, 'gated', '{}', $3, '{nova}') "
        "RETURNING id",
        episode,
        key,
        asked,
    )
    listener = await asyncpg.connect(db_dsn)
    heard: list[str] = []
    await listener.add_listener("mycelium_engines", lambda *a: heard.append(a[-1]))
    try:
        for who, where in (("julia", episode), ("nova", other), ("nova", None)):
            await admin_conn.execute("SELECT * FROM mycelium.reply('atlas', $1, 'hm', NULL, $2)", who, where)
        await admin_conn.execute("SELECT * FROM mycelium.reply('atlas', 'nova', 'Draft', NULL, $1)", episode)

        async def hinted() -> bool:
            return bool(heard)

        await eventually(hinted, timeout=5)
        assert heard == [f"atlas\t{run}"]
    finally:
        await listener.close()
