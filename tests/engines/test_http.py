"""The engines over HTTP: register, list agents, summon by name, episodes in upstream's shapes, and
clear 4xx for bad input."""

from __future__ import annotations

from tests.engines.conftest import closed_run, eventually, make_task
from tests.engines.test_flows import gated_rules


async def test_engines_agents_coordinate_and_episodes_over_http(
    client, db_dsn, admin_conn, engines_hub, agents
):
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    made = await client.post(
        "/api/rooms/atlas/engines", json={"handle": "conductor", "kind": "conductor", "created_by": "julia"}
    )
    assert made.status_code == 201, made.text
    assert made.json()["adapter"] == "engine" and made.json()["kind"] == "conductor"
    again = await client.post(
        "/api/rooms/atlas/engines", json={"handle": "conductor", "kind": "conductor", "created_by": "julia"}
    )
    assert again.status_code == 409 and again.json()["error"] == "engine_exists"
    bad = await client.post(
        "/api/rooms/atlas/engines", json={"handle": "x", "kind": "oracle", "created_by": "j"}
    )
    assert bad.status_code in (400, 422)
    bad_handle = await client.post(
        "/api/rooms/atlas/engines", json={"handle": "-no", "kind": "persona", "created_by": "julia"}
    )
    assert bad_handle.status_code == 422 and bad_handle.json()["error"] == "invalid_handle"
    missing = await client.post(
        "/api/rooms/nowhere/engines", json={"handle": "c", "kind": "conductor", "created_by": "julia"}
    )
    assert missing.status_code == 404

    key, episode = await make_task(admin_conn, "atlas", "Ship the pricing page")
    await admin_conn.execute("SELECT * FROM mycelium.touch_presence('atlas', 'nova')")
    listed = (await client.get("/api/rooms/atlas/agents")).json()
    assert {(a["handle"], a["adapter"], a["present"]) for a in listed} >= {
        ("conductor", "engine", True),
        ("nova", "agent", True),
    }

    await engines_hub()
    nova_rule, julia_rule = gated_rules(blocks=0)
    agents("nova", nova_rule)
    agents("julia", julia_rule)
    nobody = await client.post(
        "/api/rooms/atlas/coordinate",
        json={"key": key, "engine": "maestro", "text": "gated", "sender_handle": "julia"},
    )
    assert nobody.status_code == 404 and nobody.json()["error"] == "engine_not_found"
    no_row = await client.post(
        "/api/rooms/atlas/coordinate",
        json={"key": "work/nope", "engine": "conductor", "text": "x", "sender_handle": "julia"},
    )
    assert no_row.status_code == 404
    summoned = await client.post(
        "/api/rooms/atlas/coordinate",
        json={
            "key": key,
            "engine": "conductor",
            "text": "gated @nova @julia: ship it",
            "sender_handle": "julia",
        },
    )
    assert summoned.status_code == 201, summoned.text
    assert summoned.json()["episode"] == episode and summoned.json()["mentions"][0] == "conductor"
    run = await closed_run(admin_conn, "atlas", episode)

    listing = (await client.get("/api/rooms/atlas/episodes")).json()["episodes"]
    (summary,) = listing
    assert summary["short_id"] == run["short_id"] and summary["outcome"] == "resolved"
    assert summary["subkind"] == "resolved" and summary["within"] == episode
    assert summary["participants"] == ["nova", "julia"] and summary["flow"]["name"] == "gated"
    assert summary["flow"]["bound"] == {"proposer": "nova", "guardian": "julia"}
    assert [t["step"] for t in summary["trace"]] == ["propose", "check"]
    detail = (await client.get(f"/api/rooms/atlas/episodes/{run['short_id']}")).json()
    kinds = [(m["sender_handle"], m["kind"]) for m in detail["messages"]]
    assert kinds[0] == ("julia", "exchange") and kinds[-1] == ("conductor", "commit")
    assert ("nova", "exchange") in kinds and ("julia", "exchange") in kinds[1:]
    assert detail["message_count"] == len(detail["messages"])
    gone = await client.get("/api/rooms/atlas/episodes/nothere")
    assert gone.status_code == 404 and gone.json()["error"] == "episode_not_found"
    assert (await client.get("/api/rooms/nowhere/episodes")).status_code == 404

    flows = (await client.get("/api/rooms/atlas/protocols")).json()
    assert [f["name"] for f in flows if f["source"] == "built-in"] == [
        "gated",
        "review",
        "fan-out",
        "round-robin",
        "swarm",
        "concord",
        "accord",
    ]

    invoked = await client.post(
        "/api/rooms/atlas/engines/conductor/invoke", json={"text": "list", "sender_handle": "julia"}
    )
    assert invoked.status_code == 201

    async def answered():
        return await admin_conn.fetchval(
            "SELECT outcome FROM mycelium.engine_summons WHERE message_id = $1::text::uuid",
            invoked.json()["id"],
        )

    assert await eventually(answered) == "answered"
