"""A room's own flows: a protocols/<name> memory that is not a flow is refused at write time, from
psql and from HTTP alike, with every problem named; a valid one overrides or adds a flow the
conductor runs."""

from __future__ import annotations

import json

import asyncpg
import pytest

from mycelium.engines.flows import BUILT_IN, VOCABULARY, FlowError, parse_protocol
from tests.engines.conftest import closed_run, coordinate, make_task, setup_room, trace_of
from tests.engines.test_core import BAD_FLOWS
from tests.engines.test_flows import by_step

PAIR = {
    "name": "pair",
    "description": "Two members, one pass each.",
    "roles": ["driver", "navigator"],
    "steps": [
        {"id": "drive", "to": "driver", "prompt": "Drive: {ask}", "next": "navigate"},
        {
            "id": "navigate",
            "to": "navigator",
            "require": "stance",
            "prompt": "Navigate: {reply}",
            "next": {"accept": "done", "default": "stop"},
        },
        {"id": "done", "end": "resolved"},
        {"id": "stop", "end": "rejected"},
    ],
}


async def write_protocol(conn: asyncpg.Connection, name: str, text: str) -> None:
    await conn.execute(
        "SELECT 1 FROM mycelium.write_memory('atlas', $1, to_jsonb($2::text), 'julia')",
        f"protocols/{name}",
        text,
    )


@pytest.mark.parametrize(("spec", "problem"), BAD_FLOWS)
async def test_the_database_refuses_what_the_flow_model_refuses(
    admin_conn: asyncpg.Connection, spec, problem
):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    with pytest.raises(FlowError):
        parse_protocol(spec)
    if not isinstance(spec, dict):
        return
    with pytest.raises(asyncpg.PostgresError) as refused:
        await write_protocol(admin_conn, "x", json.dumps(spec))
    assert refused.value.sqlstate == "MY422" and "invalid_flow" in refused.value.detail
    assert json.loads(refused.value.detail)["problems"]
    assert (
        await admin_conn.fetchval("SELECT count(*) FROM mycelium.memories WHERE key LIKE 'protocols/%'") == 0
    )


async def test_the_database_and_the_flow_model_share_one_step_vocabulary(admin_conn: asyncpg.Connection):
    assert await admin_conn.fetchval("SELECT mycelium.flow_vocabulary()") == VOCABULARY


async def test_a_problem_the_database_finds_is_a_problem_the_model_finds(admin_conn: asyncpg.Connection):
    """Each bad flow's problem is said in the same words on both sides."""
    for spec, problem in BAD_FLOWS:
        if not isinstance(spec, dict):
            continue
        with pytest.raises(FlowError, match=problem):
            parse_protocol(spec)
        found = await admin_conn.fetchval("SELECT mycelium.flow_problems($1::jsonb, $2)", spec, spec["name"])
        assert any(problem in p for p in found), (problem, found)


async def test_every_built_in_and_its_shown_form_pass_the_database(admin_conn: asyncpg.Connection):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    for name, p in BUILT_IN.items():
        await write_protocol(admin_conn, name, json.dumps(p.as_dict()))
        assert (
            await admin_conn.fetchval("SELECT mycelium.flow_problems($1::jsonb, $2)", p.as_dict(), name) == []
        )
    with pytest.raises(asyncpg.PostgresError) as yaml_text:
        await write_protocol(admin_conn, "gated", "name: gated\nsteps: []\n")
    assert yaml_text.value.sqlstate == "MY422"


async def test_a_protocol_write_over_http_that_is_not_a_flow_is_a_422(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    bad = await client.post(
        "/api/rooms/atlas/memory",
        json={
            "items": [
                {
                    "key": "protocols/broken",
                    "value": json.dumps({"name": "broken", "steps": [{"id": "a", "to": "all"}]}),
                    "created_by": "julia",
                }
            ]
        },
    )
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_flow"
    assert "needs next" in bad.json()["message"] and bad.json()["problems"]
    good = await client.post(
        "/api/rooms/atlas/memory",
        json={"items": [{"key": "protocols/pair", "value": json.dumps(PAIR), "created_by": "julia"}]},
    )
    assert good.status_code == 201, good.text
    flows = (await client.get("/api/rooms/atlas/protocols")).json()
    assert [(f["name"], f["source"]) for f in flows][:2] == [("pair", "room"), ("gated", "built-in")]


async def test_a_room_flow_runs_and_overrides_a_built_in(admin_conn, engines_hub, agents):
    await setup_room(admin_conn)
    await write_protocol(admin_conn, "pair", json.dumps(PAIR))
    short_gated = {**BUILT_IN["gated"].as_dict(), "max_steps": 2}
    await write_protocol(admin_conn, "gated", json.dumps(short_gated))
    await engines_hub()
    agents("nova", by_step(drive="Driving.", propose="Plan.", revise="Plan again."))
    agents(
        "julia", by_step(navigate="Good [[mycelium: stance=accept]]", check="No [[mycelium: stance=reject]]")
    )
    key, episode = await make_task(admin_conn, "atlas", "Pair on it")
    await coordinate(admin_conn, "atlas", key, "pair @nova @julia: fix the bug")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved" and run["protocol"] == "pair"
    assert [t["step"] for t in await trace_of(admin_conn, "atlas", run["id"])] == ["drive", "navigate"]
    key2, episode2 = await make_task(admin_conn, "atlas", "Gate it")
    await coordinate(admin_conn, "atlas", key2, "gated @nova @julia: ship")
    run2 = await closed_run(admin_conn, "atlas", episode2)
    assert run2["state"] == "rejected" and "step cap of 2" in run2["reason"]
