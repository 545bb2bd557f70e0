"""Swarms over HTTP: a bad request is a 4xx naming the problem and writes nothing; a good one files
the task, makes the workers and starts the flow, and the room lists it as it stands."""

from __future__ import annotations

import pytest


@pytest.fixture
async def lab(client):
    r = await client.post("/api/rooms", json={"name": "lab"})
    assert r.status_code == 201, r.text
    return client


@pytest.mark.parametrize(("body", "status", "code", "words"), [
    ({"goal": "Ship it", "team": []}, 422, "invalid_request", "team"),
    ({"goal": "", "team": ["ann"]}, 422, "invalid_request", "goal"),
    ({"goal": "   ", "team": ["ann"]}, 422, "missing_goal", "needs a goal"),
    ({"goal": "Ship it", "team": "@ann @bob @ANN"}, 422, "bad_team", "@ann is named twice"),
    ({"goal": "Ship it", "team": ["ann", "no one"]}, 422, None, "team"),
    ({"goal": "Ship it", "team": ["ann"], "conductor": "pia"}, 409, "not_a_conductor", "@pia is a persona"),
])
async def test_a_bad_swarm_is_refused_naming_the_problem_and_nothing_is_written(lab, body, status, code, words):
    await lab.post("/api/rooms/lab/engines", json={"handle": "pia", "kind": "persona", "created_by": "ops"})
    r = await lab.post("/api/rooms/lab/swarms", json={"created_by": "julia", **body})
    assert r.status_code == status, r.text
    assert (code is None or r.json()["error"] == code) and words in r.text
    assert (await lab.get("/api/rooms/lab/swarms")).json() == []
    keys = [m["key"] for m in (await lab.get("/api/rooms/lab/memory/")).json()]
    assert keys == ["agents/pia"]  # (its engine's manifest): no task, no worker's
    engines = [e["handle"] for e in (await lab.get("/api/rooms/lab/engines")).json()]
    assert engines == ["pia"]


async def test_a_swarm_is_started_listed_and_read(lab):
    r = await lab.post("/api/rooms/lab/swarms", json={"goal": "Ship passkey login\n\nBy Friday.",
                                                      "team": "@ann, @bob", "created_by": "julia"})
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["key"], made["title"], made["lead"], made["team"], made["conductor"]) == (
        "work/ship-passkey-login", "Ship passkey login", "ann", ["ann", "bob"], "conductor")
    assert made["members"] == [{"handle": "ann", "as": "worker"}, {"handle": "bob", "as": "worker"}]
    kinds = {e["handle"]: e["kind"] for e in (await lab.get("/api/rooms/lab/engines")).json()}
    assert kinds == {"ann": "worker", "bob": "worker", "conductor": "conductor"}
    (listed,) = (await lab.get("/api/rooms/lab/swarms")).json()
    assert (listed["key"], listed["status"], listed["parts"], listed["goal"]) == (
        made["key"], "open", 0, "Ship passkey login\n\nBy Friday.")
    one = await lab.get(f"/api/rooms/lab/swarms/{made['key']}")
    assert one.status_code == 200 and one.json()["team"] == ["ann", "bob"]
    missing = await lab.get("/api/rooms/lab/swarms/work/nothing")
    assert missing.status_code == 404 and missing.json()["error"] == "swarm_not_found"
    nowhere = await lab.get("/api/rooms/nowhere/swarms")
    assert nowhere.status_code == 404
    # the same team again: its members are workers already
    again = await lab.post("/api/rooms/lab/swarms", json={"goal": "Ship it again", "team": ["bob", "ann"],
                                                          "created_by": "julia"})
    assert again.status_code == 201 and [m["as"] for m in again.json()["members"]] == ["engine", "engine"]
