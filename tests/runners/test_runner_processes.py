"""Runners with real processes: two `mycelium up` replicas and a `mycelium worker` on one database,
a runner whose agent (tests/runners/agent.py) takes its message with `mycelium await` and answers
with `mycelium respond`. One wake starts one process, however many workers claim; a worker killed
with -9 mid-job takes its agent with it and another worker starts it again; a job that needs
approval waits for `mycelium runner approve`; a crashing agent is recorded and retried by the rules,
never in a loop."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.cli import mycelium
from tests.workers.conftest import WorkerProcess

pytestmark = pytest.mark.slow

AGENT = str(Path(__file__).with_name("agent.py"))
FAST = {"MYCELIUM_SLIM": "off", "MYCELIUM_RUNNER_LEASE_SECONDS": "2"}


def until(what, timeout: float = 30.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not reached in {timeout} s")


def starts(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def jobs(url: str, room: str) -> list[dict]:
    r = httpx.get(f"{url}/api/rooms/{room}/jobs", params={"limit": 500})
    assert r.status_code == 200, r.text
    return r.json()


def say(url: str, room: str, text: str) -> dict:
    r = httpx.post(f"{url}/api/rooms/{room}/messages", json={"sender_handle": "alice", "content": text})
    assert r.status_code == 201, r.text
    return r.json()


def replies(url: str, room: str, handle: str) -> list[dict]:
    r = httpx.get(f"{url}/api/rooms/{room}/messages", params={"limit": 500})
    assert r.status_code == 200, r.text
    body = r.json()
    rows = body["messages"] if isinstance(body, dict) else body
    return sorted((m for m in rows if m["sender_handle"] == handle), key=lambda m: m["position"])


def add_runner(url: str, room: str, handle: str, *args: str, **limits: object) -> dict:
    body = {"handle": handle, "command": [sys.executable, AGENT, *args], "created_by": "ops", **limits}
    r = httpx.post(f"{url}/api/rooms/{room}/runners", json=body)
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture
def deployment(hub_processes, db_dsn, tmp_path):
    """Two hub replicas and one `mycelium worker`, all running the runners loop, on one database (the
    worker serves no HTTP: MYCELIUM_API_URL tells its agents where the hub is)."""
    a = hub_processes(env=FAST)
    b = hub_processes(env=FAST)
    w = WorkerProcess(data_dir=tmp_path / "worker", database_url=db_dsn, extra=["--only", "runners"],
                      env={"MYCELIUM_MIGRATE_ON_START": "false", "MYCELIUM_API_URL": a.url, **FAST})
    w.wait_ready()
    r = httpx.post(a.url + "/api/rooms", json={"name": "lab"})
    assert r.status_code == 201, r.text
    yield a, b, w
    if w.proc.poll() is None:
        w.kill()


def test_each_wake_starts_exactly_one_process_across_replicas_and_workers(deployment, tmp_path):
    a, b, _w = deployment
    record = tmp_path / "bob.jsonl"
    add_runner(a.url, "lab", "bob", str(record))
    for n in range(1, 6):
        say((a, b)[n % 2].url, "lab", f"@bob round {n}")
        until(lambda n=n: len(replies(a.url, "lab", "bob")) >= n)
    time.sleep(1.0)  # time for a second start, if one were coming
    seen = starts(record)
    assert len(seen) == 5, '\n'.join(f"{j['id']} {j['state']} {j['reason']} {j['wake_position']} {j['worker']}" for j in jobs(a.url, 'lab'))
    done = jobs(a.url, "lab")
    assert [j["state"] for j in done] == ["done"] * 5, done
    assert len({j["worker"] for j in done}) >= 1
    assert all(Path(s["cwd"]).parts[-2:] == ("workspaces", "lab") for s in seen)  # <data>/workspaces/<room>
    texts = [m["content"] for m in replies(a.url, "lab", "bob")]
    assert texts == [f"done: @bob round {n}" for n in range(1, 6)]


def test_a_worker_killed_mid_job_takes_its_agent_along_and_another_starts_it_again(deployment, tmp_path):
    a, b, w = deployment
    w.stop()  # (its agents reach the hub through one replica's URL, which this test may kill)
    record, once = tmp_path / "carol.jsonl", tmp_path / "carol.once"
    add_runner(a.url, "lab", "carol", str(record), "--sleep", "60", "--once", str(once))
    say(a.url, "lab", "@carol a long one")
    running = until(lambda: [j for j in jobs(a.url, "lab") if j["state"] == "running" and j["pid"]])[0]
    until(lambda: once.exists())  # the agent runs (and sleeps: its turn is a long one)
    holder = next(p for p in (a, b) if f":{p.proc.pid}:" in running["worker"])
    agent_pid = running["pid"]
    holder.proc.kill()  # kill -9: no chance to stop its agent or record anything
    holder.proc.wait(timeout=10)

    def gone() -> bool:
        try:
            os.kill(agent_pid, 0)
        except ProcessLookupError:
            return True
        return False

    until(gone, 10)  # the agent died with its worker (no second copy runs beside a retry)
    survivor = next(p for p in (a, b) if p is not holder)
    try:
        until(lambda: replies(survivor.url, "lab", "carol"), 60)
    except AssertionError:
        raise AssertionError(f"no answer: jobs {jobs(survivor.url, 'lab')}, starts {starts(record)}") from None
    final = jobs(survivor.url, "lab")
    first = next(j for j in final if j["id"] == running["id"])
    assert first["state"] == "failed" and "stopped while it ran" in first["reason"]
    again = [j for j in final if j["retry_of"] == running["id"]]
    assert [(j["state"], j["attempt"]) for j in again] == [("done", 2)]
    assert len(starts(record)) == 2 and len(replies(survivor.url, "lab", "carol")) == 1


def test_approval_holds_a_job_until_an_operator_approves_it(deployment, tmp_path):
    a, _b, _w = deployment
    record = tmp_path / "dan.jsonl"
    add_runner(a.url, "lab", "dan", str(record), approval="required")
    say(a.url, "lab", "@dan please")
    (job,) = until(lambda: jobs(a.url, "lab"))
    time.sleep(1.5)
    assert jobs(a.url, "lab")[0]["state"] == "waiting" and starts(record) == []
    out = mycelium("runner", "approve", str(job["id"]), "-r", "lab", "--as", "ops", url=a.url, ok=True)
    assert "queued" in out.stdout
    until(lambda: replies(a.url, "lab", "dan"))
    (done,) = jobs(a.url, "lab")
    assert done["state"] == "done" and done["approved_by"] == "ops"


def test_a_crashing_agent_is_recorded_and_retried_by_the_rules_never_in_a_loop(deployment, tmp_path):
    a, _b, _w = deployment
    record = tmp_path / "eve.jsonl"
    add_runner(a.url, "lab", "eve", str(record), "--fail", max_attempts=2)
    say(a.url, "lab", "@eve hello")
    until(lambda: len([j for j in jobs(a.url, "lab") if j["state"] == "failed"]) == 2, 30)
    time.sleep(3.0)  # past the next backoff: nothing more starts
    final = jobs(a.url, "lab")
    assert [(j["state"], j["attempt"], j["exit_code"]) for j in final] == [("failed", 2, 3), ("failed", 1, 3)]
    assert len(starts(record)) == 2
    out = mycelium("runner", "job", str(final[-1]["id"]), "-r", "lab", url=a.url, ok=True)
    assert "this agent always fails" in out.stdout and "exit 3" in out.stdout
