"""Runners over HTTP and the CLI: a bad definition is a 422 naming the problem (one line from the
CLI, never a traceback) and writes nothing; the rest of the API answers in its shapes."""

from __future__ import annotations

import pytest

from tests.support.cli import mycelium


@pytest.fixture
async def lab(client):
    r = await client.post("/api/rooms", json={"name": "lab"})
    assert r.status_code == 201, r.text
    return client


@pytest.mark.parametrize(("body", "code", "words"), [
    ({"command": []}, "missing_command", "needs a command"),
    ({"command": "pi -p '{prompt}'"}, "unknown_placeholder", "{prompt} is not a placeholder"),
    ({"command": ["pi"], "cwd": "../../etc"}, "cwd_outside_data", "leads outside the data folder"),
    ({"command": ["pi"], "env": ["KEY=value"]}, "bad_env_name", "is not a variable name"),
    ({"command": ["pi"], "max_concurrent": 0}, "bad_runner_limit", "max_concurrent"),
    ({"command": ["pi"], "timeout_s": -1}, "bad_runner_limit", "timeout_s"),
])
async def test_a_bad_runner_is_refused_with_a_422_naming_the_problem_and_nothing_written(lab, body, code, words):
    r = await lab.post("/api/rooms/lab/runners", json={"handle": "bob", "created_by": "ops", **body})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == code and words in r.json()["message"]
    assert (await lab.get("/api/rooms/lab/runners")).json() == []


async def test_a_runner_is_registered_listed_redefined_tested_and_removed(lab):
    body = {"handle": "@Bob", "command": "pi -p '{room} {handle}'", "env": ["HOME"], "created_by": "ops"}
    r = await lab.post("/api/rooms/lab/runners", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["handle"] == "bob" and r.json()["command"] == ["pi", "-p", "{room} {handle}"]
    r = await lab.post("/api/rooms/lab/runners", json={**body, "command": ["pi"], "timeout_s": 30})
    assert r.status_code == 201 and r.json()["timeout_s"] == 30  # redefined in place
    (listed,) = (await lab.get("/api/rooms/lab/runners")).json()
    assert listed["command"] == ["pi"] and listed["running"] == 0
    job = await lab.post("/api/rooms/lab/runners/bob/test")
    assert job.status_code == 202 and job.json()["kind"] == "test" and job.json()["state"] == "queued"
    again = await lab.post("/api/rooms/lab/runners/bob/test")
    assert again.status_code == 409 and again.json()["error"] == "job_pending"
    got = await lab.get(f"/api/rooms/lab/jobs/{job.json()['id']}")
    assert got.status_code == 200 and got.json()["stdout_tail"] is None
    assert (await lab.get("/api/rooms/lab/jobs", params={"state": "queued"})).json()[0]["id"] == job.json()["id"]
    bad = await lab.get("/api/rooms/lab/jobs", params={"state": "sleeping"})
    assert bad.status_code == 400 or bad.status_code == 422, bad.text
    assert (await lab.get("/api/rooms/lab/jobs/999")).json()["error"] == "job_not_found"
    paused = await lab.post("/api/rooms/lab/runners/bob/pause")
    assert paused.json()["paused_reason"] == "paused by hand"
    assert (await lab.post("/api/rooms/lab/runners/bob/resume")).json()["paused_reason"] is None
    assert (await lab.delete("/api/rooms/lab/runners/bob")).status_code == 200
    missing = await lab.get("/api/rooms/lab/runners/bob")
    assert missing.status_code == 404 and missing.json()["error"] == "runner_not_found"
    assert (await lab.get("/api/rooms/nowhere/runners")).status_code == 404


async def test_an_engine_s_handle_takes_no_runner(lab):
    r = await lab.post("/api/rooms/lab/engines", json={"handle": "conductor", "kind": "conductor", "created_by": "ops"})
    assert r.status_code == 201
    r = await lab.post("/api/rooms/lab/runners", json={"handle": "conductor", "command": ["pi"], "created_by": "ops"})
    assert r.status_code == 422 and r.json()["error"] == "runner_for_engine"


@pytest.mark.parametrize(("args", "words"), [
    (["@bob", "--", "pi", "{nope}"], "{nope} is not a placeholder"),
    (["@bob", "--cwd", "../x", "--", "pi"], "leads outside the data folder"),
    (["@bob", "--"], "give the command after --"),
])
def test_the_cli_refuses_a_bad_runner_in_one_line(shared_hub, shared_room, args, words):
    out = mycelium("runner", "add", "-r", shared_room, *args, url=shared_hub.url, ok=False)
    assert words in out.stderr and out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr


def test_the_cli_adds_lists_and_removes_a_runner(shared_hub, shared_room):
    out = mycelium("runner", "add", "@bob", "--env", "HOME", "-r", shared_room, "--", "pi", "-p", "hello {room}",
                   url=shared_hub.url, ok=True)
    assert "runner for @bob" in out.stdout and "'hello {room}'" in out.stdout
    out = mycelium("runner", "ls", "-r", shared_room, url=shared_hub.url, ok=True)
    assert out.stdout.startswith("@bob\tpi -p 'hello {room}'\t0 running, 0 pending")
    mycelium("runner", "rm", "bob", "-r", shared_room, url=shared_hub.url, ok=True)
    assert mycelium("runner", "ls", "-r", shared_room, url=shared_hub.url, ok=True).stdout.strip() == "(no runners)"
