"""Flows end to end: a conductor summoned into a task's thread walks the flow with scripted agents,
holding the floor for exactly the members each step addresses, and closes with upstream's commit."""

from __future__ import annotations

import asyncpg
import pytest

from mycelium.errors import Refusal
from tests.engines.conftest import (
    closed_run,
    coordinate,
    eventually,
    make_task,
    posts_of,
    run_of,
    setup_room,
    trace_of,
)


def gated_rules(blocks: int = 1):
    left = {"n": blocks}

    def nova(text: str) -> str | None:
        if "· propose ·" in text or "· revise ·" in text:
            return "Plan: a static page behind a flag."
        return None

    def julia(text: str) -> str | None:
        if "· check ·" not in text:
            return None
        if left["n"] > 0:
            left["n"] -= 1
            return "It needs a rollback plan. [[mycelium: stance=block]]"
        return "Fine by me. [[mycelium: stance=accept confidence=0.9]]"

    return nova, julia


async def test_gated_runs_to_resolved_with_the_floor_passing_between_the_addressed(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Ship the pricing page")
    nova_rule, julia_rule = gated_rules(blocks=1)
    await engines_hub(MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="30")
    nova, julia = agents("nova", nova_rule), agents("julia", julia_rule)
    await coordinate(admin_conn, "atlas", key, "gated @nova @julia: ship the pricing page")

    async def done():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and r["state"] != "open" else None

    run = await eventually(done, timeout=60, step=0.01)

    assert run["state"] == "resolved" and run["turn"] == 4
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert [t["turn"] for t in trace] == [1, 2, 3, 4]
    assert [(t["step"], t["entry"]["next"]) for t in trace] == [
        ("propose", "check"),
        ("check", "revise"),
        ("revise", "check"),
        ("check", "passed"),
    ]
    assert [t["entry"]["stances"] for t in trace] == [
        {"nova": "none"},
        {"julia": "reject"},
        {"nova": "none"},
        {"julia": "accept"},
    ]
    posts = await posts_of(admin_conn, "atlas", run["id"])
    events = [p["event"] for p in posts]
    assert events == ["open", "turn", "turn", "edge", "turn", "turn", "edge", "close"]
    turns = [p for p in posts if p["event"] == "turn"]
    assert [list(p["recipients"]) for p in turns] == [["nova"], ["julia"], ["nova"], ["julia"]]
    assert turns[1]["content"].startswith("gated · check · turn 2 of 6 · julia")
    assert all(p["payload"]["conductor"]["event"] == p["event"] for p in posts)
    close = posts[-1]
    assert (close["kind"], close["subkind"]) == ("commit", "resolved")
    assert close["content"] == f"✓ gated: resolved after 4 step(s). Record: log/episodes/{run['short_id']}."
    assert close["payload"]["within"] == key
    assert [p["content"] for p in posts if p["event"] == "edge"] == [
        "gated: julia blocked, on to revise",
        "gated: julia accepted, on to passed",
    ]
    # the floor, as its notices record every change: the conductor alone at the start, then exactly
    # whom each step addressed; released at the end, and gone
    floors = await admin_conn.fetch(
        "SELECT payload ->> 'holder' AS holder, payload ->> 'speakers' AS speakers, payload ? 'released' AS released "
        "FROM mycelium.messages WHERE room = 'atlas' AND payload_type = 'notice' AND payload ->> 'subkind' = 'floor' "
        "AND payload ->> 'episode' = $1 ORDER BY position", episode)
    assert (floors[0]["holder"], floors[0]["speakers"]) == ("conductor", "")
    assert [f["speakers"] for f in floors if not f["released"]] == ["", "nova", "julia", "nova", "julia"]
    assert all(f["holder"] == "conductor" for f in floors)
    assert [f["released"] for f in floors] == [False] * 5 + [True]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.floors WHERE episode = $1", episode) == 0
    # a run never writes the task's status or lease
    row = await admin_conn.fetchrow(
        "SELECT meta, version FROM mycelium.memories WHERE room = 'atlas' AND key = $1", key
    )
    assert row["version"] == 1 and row["meta"].get("status", "open") == "open"
    assert nova.answered and julia.answered


async def test_the_floor_admits_exactly_the_addressed_member_even_from_plain_sql(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Review login")
    await engines_hub(MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="30")
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: the login page")

    async def asked():
        r = await run_of(admin_conn, "atlas", episode)
        return r if r is not None and r["step"] == "draft" and r["asked_position"] else None

    await eventually(asked)
    # julia is the reviewer: not addressed by the draft step, so the database refuses her write
    with pytest.raises(asyncpg.PostgresError) as refused:
        await admin_conn.execute(
            "SELECT * FROM mycelium.reply('atlas', 'julia', 'me first', NULL, $1)", episode
        )
    assert refused.value.sqlstate == "MY409" and "@julia does not have the floor" in refused.value.message
    with pytest.raises(asyncpg.PostgresError) as raw:
        await admin_conn.execute(
            "INSERT INTO mycelium.messages (room, episode, sender, content) "
            "VALUES ('atlas', $1, 'mallory', 'sneaking in')",
            episode,
        )
    assert raw.value.sqlstate == "MY409"
    # nobody may write as the conductor but the conductor
    with pytest.raises(asyncpg.PostgresError) as forged:
        await admin_conn.execute(
            "SELECT * FROM mycelium.post_message('atlas', 'conductor', 'resolved!', $1)", episode
        )
    assert forged.value.sqlstate == "MY403"
    # nova is addressed: her draft lands and the floor moves to julia alone
    await admin_conn.execute("SELECT * FROM mycelium.reply('atlas', 'nova', 'Draft v1', NULL, $1)", episode)

    async def reviewing():
        f = await admin_conn.fetchrow("SELECT speakers FROM mycelium.floors WHERE episode = $1", episode)
        return f if f is not None and list(f["speakers"]) == ["julia"] else None

    await eventually(reviewing)
    with pytest.raises(asyncpg.PostgresError) as now_refused:
        await admin_conn.execute(
            "SELECT * FROM mycelium.reply('atlas', 'nova', 'one more thing', NULL, $1)", episode
        )
    assert now_refused.value.sqlstate == "MY409"
    await admin_conn.execute(
        "SELECT * FROM mycelium.reply('atlas', 'julia', 'Approved [[mycelium: stance=accept]]', NULL, $1)",
        episode,
    )
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved" and run["turn"] == 2


async def test_silence_until_the_timeout_takes_the_silent_edge_never_consent(admin_conn, engines_hub, agents):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Quiet review")
    await engines_hub(MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="0.5")
    agents("nova", lambda text: "Draft" if "· draft ·" in text else None)
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: anything")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "rejected"
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert [(t["step"], t["entry"]["stance"], t["entry"]["next"]) for t in trace] == [
        ("draft", None, "review"),
        ("review", "silent", "unreviewed"),
    ]


async def test_the_step_cap_rejects_a_flow_that_never_passes(admin_conn, engines_hub, agents):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Never good enough")
    nova_rule, julia_rule = gated_rules(blocks=100)
    await engines_hub()
    agents("nova", nova_rule)
    agents("julia", julia_rule)
    await coordinate(admin_conn, "atlas", key, "gated @nova @julia: try")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "rejected" and "step cap" in run["reason"] and run["turn"] == 6
    close = (await posts_of(admin_conn, "atlas", run["id"]))[-1]
    assert close["subkind"] == "rejected" and "step cap" in close["content"]


async def test_summons_answered_in_place_refused_from_the_room_and_while_a_run_goes(admin_conn, engines_hub):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Busy")
    await engines_hub()

    async def answers():
        return await admin_conn.fetch(
            "SELECT s.outcome, m.content, s.episode FROM mycelium.engine_summons s "
            "LEFT JOIN mycelium.messages m ON m.id = s.answer_id ORDER BY s.id"
        )

    await admin_conn.execute(
        "SELECT * FROM mycelium.invoke_engine('atlas', 'conductor', 'list', NULL, 'julia')"
    )
    await admin_conn.execute(
        "SELECT * FROM mycelium.invoke_engine('atlas', 'conductor', 'show gated', NULL, 'julia')"
    )
    await admin_conn.execute(
        "SELECT * FROM mycelium.invoke_engine('atlas', 'conductor', 'gated @a @b: go', NULL, 'julia')"
    )
    await admin_conn.execute(
        "SELECT * FROM mycelium.invoke_engine('atlas', 'conductor', 'tango @a: go', NULL, 'julia')"
    )
    await coordinate(admin_conn, "atlas", key, "gated @nova: one is too few")
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: go")

    async def drafting():
        r = await run_of(admin_conn, "atlas", episode)
        return r is not None and r["asked_position"] is not None

    await eventually(drafting)  # nova has the floor
    # julia is not admitted by the floor (the database refuses her write: nothing is queued); nova is,
    # and her re-summon is answered with a refusal, not queued
    with pytest.raises(asyncpg.PostgresError) as floored:
        await coordinate(admin_conn, "atlas", key, "review @nova @julia: again")
    assert floored.value.sqlstate == "MY409"
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: again", by="nova")

    async def all_done():
        rows = await answers()
        return rows if len(rows) == 7 and all(r["outcome"] for r in rows) else None

    rows = await eventually(all_done)
    outcomes = [r["outcome"] for r in rows]
    assert outcomes == ["answered", "answered", "refused", "refused", "refused", "started", "refused"]
    assert "gated" in rows[0]["content"] and "concord" in rows[0]["content"]
    assert "protocols/gated" in rows[1]["content"] and "```json" in rows[1]["content"]
    assert "A run needs a task" in rows[2]["content"] and "board coordinate" in rows[2]["content"]
    assert "No flow 'tango'" in rows[3]["content"] and "Built in:" in rows[3]["content"]
    assert "1 were named" in rows[4]["content"]
    assert "already going" in rows[6]["content"]
    # one open run in the thread, whatever is asked
    assert (
        await admin_conn.fetchval("SELECT count(*) FROM mycelium.engine_runs WHERE episode = $1", episode)
        == 1
    )
    # the database refuses a second open run too
    with pytest.raises(asyncpg.UniqueViolationError):
        await admin_conn.execute(
            "INSERT INTO mycelium.engine_runs (room, engine, episode, summon_id, protocol, flow) "
            "SELECT room, engine, episode, summon_id + 1000, protocol, flow FROM mycelium.engine_runs"
        )
    # the engine's posts neutralise every @: they summon and wake nobody
    assert all("@a" not in r["content"] for r in rows if r["content"])


async def test_the_gateway_refuses_unknown_kinds_and_duplicate_engines(hub):
    from mycelium.verbs import Actor, verbs_of

    verbs = verbs_of(hub)
    julia = Actor("julia", "person")
    await hub.db.execute("SELECT mycelium.create_room('atlas')")
    made = await verbs.call(
        julia,
        "create_engine",
        room="atlas",
        handle="Maestro",
        kind="conductor",
        description="walks flows",
        by=None,
    )
    assert made["handle"] == "maestro" and made["created_by"] == "julia"
    manifest = await hub.db.fetchrow(
        "SELECT meta FROM mycelium.memories WHERE room = 'atlas' AND key = 'agents/maestro'"
    )
    assert manifest["meta"] == {"adapter": "engine", "kind": "conductor", "handle": "maestro"}
    with pytest.raises(Refusal) as dup:
        await verbs.call(
            julia, "create_engine", room="atlas", handle="maestro", kind="persona", description="", by=None
        )
    assert dup.value.status == 409
    with pytest.raises(Refusal) as kind:
        await verbs.call(
            julia, "create_engine", room="atlas", handle="other", kind="oracle", description="", by=None
        )
    assert kind.value.status == 422 and kind.value.error == "unknown_engine_kind"
    with pytest.raises(Refusal) as forged:
        await verbs.call(
            Actor("julia"),
            "post_message",
            room="atlas",
            sender="maestro",
            content="hi",
            episode=None,
            recipients=[],
            kind="exchange",
            subkind=None,
            payload_type="message",
            payload={},
            parents=[],
            sender_role="agent",
        )
    assert forged.value.status == 403 and forged.value.error in ("reserved_handle", "actor_mismatch")


def by_step(**answers: str):
    """A rule answering the steps named (``rate="[[mycelium: A=80]]"``), silent otherwise."""

    def rule(text: str) -> str | None:
        for step, answer in answers.items():
            if f"· {step.replace('_', '-')} ·" in text:
                return answer
        return None

    return rule


async def test_round_robin_asks_each_member_in_turn_for_two_rounds(admin_conn, engines_hub, agents):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Talk it over")
    await engines_hub()
    for h in ("ann", "bob", "cy"):
        agents(h, by_step(talk=f"{h} thinks so"))
    await coordinate(admin_conn, "atlas", key, "round-robin @ann @bob @cy: what next?")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved" and run["turn"] == 6
    turns = [p for p in await posts_of(admin_conn, "atlas", run["id"]) if p["event"] == "turn"]
    assert [list(p["recipients"]) for p in turns] == [["ann"], ["bob"], ["cy"]] * 2
    assert [p["payload"]["conductor"]["round"] for p in turns] == [1, 1, 1, 2, 2, 2]
    assert "Round 2 of 2" in turns[3]["content"] and "ann: ann thinks so" in turns[3]["content"]


async def test_fan_out_gives_every_worker_the_floor_at_once_then_the_lead_combines(
    admin_conn, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Split the work")
    await engines_hub()
    agents("lead", by_step(combine="Combined."))
    agents("w1", by_step(work="part one"))
    speakers: list[list[str]] = []

    async def floor_then_answer():
        f = await admin_conn.fetchrow("SELECT speakers FROM mycelium.floors WHERE episode = $1", episode)
        if f and list(f["speakers"]) not in speakers:
            speakers.append(list(f["speakers"]))
        return len(speakers) >= 1 and ["w1", "w2"] in speakers

    await coordinate(admin_conn, "atlas", key, "fan-out @lead @w1 @w2: build it")
    await eventually(floor_then_answer, step=0.01)
    await admin_conn.execute("SELECT * FROM mycelium.reply('atlas', 'w2', 'part two', NULL, $1)", episode)
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved"
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert [(t["step"], t["entry"]["to"]) for t in trace] == [("work", ["w1", "w2"]), ("combine", ["lead"])]
    combine = [p for p in await posts_of(admin_conn, "atlas", run["id"]) if p["event"] == "turn"][-1]
    assert "w1: part one" in combine["content"] and "w2: part two" in combine["content"]


async def test_concord_repairs_once_then_converges_and_saves_the_decision(admin_conn, engines_hub, agents):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Pick a launch day")
    await engines_hub()
    agents("ann", by_step(suggest="Friday", rate="[[mycelium: A=90 B=40]]", rerate="[[mycelium: C=85]]"))
    agents("bob", by_step(suggest="  friday ", rate="[[mycelium: A=80 B=60]]", rerate="[[mycelium: C=75]]"))
    agents(
        "cy",
        by_step(
            suggest="Monday",
            rate="[[mycelium: A=50 B=90]]",
            fix="Saturday",
            rerate="[[mycelium: C=80 confidence=0.8]]",
        ),
    )
    await coordinate(admin_conn, "atlas", key, "concord @ann @bob @cy: which day do we launch?")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "converged", run["reason"]
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert [t["step"] for t in trace] == ["suggest"] * 3 + ["rate", "pick", "fix", "rerate", "pick"]
    first_pick, last_pick = trace[4]["entry"]["select"], trace[7]["entry"]["select"]
    assert (first_pick["pick"], first_pick["outcome"], first_pick["least_happy"]) == ("A", "infeasible", "cy")
    assert (last_pick["pick"], last_pick["outcome"], last_pick["lowest"]) == ("C", "feasible", 75)
    assert trace[5]["entry"]["to"] == ["cy"]  # the least happy proposes the fix
    posts = await posts_of(admin_conn, "atlas", run["id"])
    close = posts[-1]
    assert (close["kind"], close["subkind"]) == ("commit", "converged")
    assert close["content"] == "✓ Everyone's on board: going with C: Saturday"
    assert close["payload"]["assignments"] == {"decision": "Saturday"}
    assert close["payload"]["metrics"] == {"min_satisfaction": 0.75} and close["payload"]["within"] == key
    decision = await admin_conn.fetchrow(
        "SELECT body, created_by, meta FROM mycelium.memories WHERE room = 'atlas' AND key = $1",
        "context/decision/" + key.removeprefix("work/"),
    )
    assert decision["body"] == "Saturday" and decision["created_by"] == "conductor"
    # the folded duplicate credits both authors
    assert run["pending"]["options"][0] == {"label": "A", "text": "Friday", "authors": ["ann", "bob"]}


async def test_concord_without_agreement_is_rejected_with_the_best_option_named(
    admin_conn, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "No deal")
    await engines_hub()
    agents("ann", by_step(suggest="Tea", rate="[[mycelium: A=90 B=10]]", rerate="[[mycelium: C=10 D=10]]"))
    agents(
        "bob",
        by_step(
            suggest="Coffee", rate="[[mycelium: A=10 B=90]]", fix="Water", rerate="[[mycelium: C=10 D=10]]"
        ),
    )
    await coordinate(admin_conn, "atlas", key, "concord @ann @bob: what do we drink?")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "rejected"
    close = (await posts_of(admin_conn, "atlas", run["id"]))[-1]
    assert close["content"].startswith("✗ Couldn't get everyone there. Best was ")
    assert (
        await admin_conn.fetchval(
            "SELECT count(*) FROM mycelium.memories WHERE key LIKE 'context/decision/%'"
        )
        == 0
    )


async def test_the_episode_record_and_its_metrics_are_in_the_database(admin_conn, engines_hub, agents):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Measured")
    await engines_hub()
    agents("nova", by_step(draft="v1 [[mycelium: confidence=0.5]]", rework="v2 [[mycelium: confidence=0.8]]"))
    seen = {"n": 0}

    def julia(text: str) -> str | None:
        if "· review ·" not in text:
            return None
        seen["n"] += 1
        return (
            "Not yet [[mycelium: stance=reject confidence=0.6]]"
            if seen["n"] == 1
            else "Yes [[mycelium: stance=accept confidence=0.9]]"
        )

    agents("julia", julia)
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: measure it")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved" and run["turn"] == 4
    quality = await admin_conn.fetchval(
        "SELECT quality FROM mycelium.episodes WHERE short_id = $1", run["short_id"]
    )
    assert quality == {"mpc": 0.85, "gar": 1, "scr": 0, "provenance_weight": 1, "participants": 2}
    record = await admin_conn.fetchrow(
        "SELECT body, created_by FROM mycelium.memories WHERE key = $1", f"log/episodes/{run['short_id']}"
    )
    assert record["created_by"] == "conductor"
    body = record["body"]
    assert body.startswith(f"# Episode urn:ioc:mycelium:episode:atlas:{run['short_id']}")
    assert (
        "- outcome: **resolved**" in body
        and "MPC 0.8500 · GAR 1.0000" in body
        and f"- within: `{episode}`" in body
    )
    assert body.count('"step": ') >= 4 and "## Trace" in body and "## Flow" in body


async def test_the_trace_is_append_only_and_goes_with_its_room(admin_conn, engines_hub, agents):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Short")
    await engines_hub()
    agents("nova", by_step(draft="Draft"))
    agents("julia", by_step(review="Yes [[mycelium: stance=accept]]"))
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: x")
    run = await closed_run(admin_conn, "atlas", episode)
    for sql in ("UPDATE mycelium.engine_trace SET step = 'forged'", "DELETE FROM mycelium.engine_trace"):
        with pytest.raises(asyncpg.PostgresError) as refused:
            await admin_conn.execute(sql)
        assert refused.value.sqlstate == "MY409"
    assert len(await trace_of(admin_conn, "atlas", run["id"])) == 2
    await admin_conn.execute("SELECT mycelium.delete_room('atlas')")
    for table in ("engines", "engine_summons", "engine_runs", "engine_trace", "engine_posts", "persona_turns"):
        assert await admin_conn.fetchval(f"SELECT count(*) FROM mycelium.{table}") == 0
