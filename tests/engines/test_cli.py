"""The try-it path: `mycelium up` (which runs the engines in-process), the CLI registering a
conductor, filing a task and coordinating it, scripted agents taking their turns, the episode read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.engines.conftest import closed_run, eventually
from tests.engines.test_flows import by_step
from tests.support.cli import mycelium

pytestmark = pytest.mark.slow


def cli(hub, *args: str) -> subprocess.CompletedProcess[str]:
    return mycelium(*args, url=hub.url, env={"MYCELIUM_ROOM": "atlas", "MYCELIUM_HANDLE": "julia"})


async def test_a_person_coordinates_a_task_from_the_cli_and_reads_the_episode(
    hub_process, admin_conn, agents
):
    hub = hub_process()
    assert cli(hub, "room", "create", "atlas").returncode == 0
    made = cli(hub, "engine", "create", "conductor", "--kind", "conductor")
    assert made.returncode == 0 and "@conductor: conductor engine in atlas" in made.stdout, made.stderr
    dup = cli(hub, "engine", "create", "conductor")
    assert dup.returncode != 0 and "409" in dup.stderr
    filed = cli(hub, "board", "new", "Ship the pricing page", "--json")
    key = json.loads(filed.stdout)["key"]
    agents("nova", by_step(draft="Draft one."))
    agents("julia", by_step(review="Looks right [[mycelium: stance=accept]]"))
    summoned = cli(hub, "board", "coordinate", key, "conductor", "review @nova @julia: the pricing page")
    assert summoned.returncode == 0, summoned.stderr
    episode = await admin_conn.fetchval("SELECT episode FROM mycelium.memories WHERE key = $1", key)
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved"
    listed = json.loads(cli(hub, "engine", "episodes", "--json").stdout)
    assert [e["short_id"] for e in listed] == [run["short_id"]]
    one = cli(hub, "engine", "episodes", run["short_id"])
    assert "review\tresolved\tsteps 2" in one.stdout and "1. draft → review" in one.stdout
    members = cli(hub, "agent", "ls")
    assert "@conductor\tengine\tconductor" in members.stdout
    flows = cli(hub, "engine", "flows")
    assert flows.stdout.splitlines()[0].startswith("gated\tbuilt-in")
    answered = cli(hub, "engine", "invoke", "conductor", "list")
    assert answered.returncode == 0

    async def listed_flows():
        return await admin_conn.fetchval(
            "SELECT m.content FROM mycelium.engine_summons s JOIN mycelium.messages m ON m.id = s.answer_id "
            "WHERE s.content LIKE '%list'"
        )

    assert "concord" in await eventually(listed_flows)


def test_the_flow_demo_runs_review_then_concord_with_member_processes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MYCELIUM_API_URL")}
    done = subprocess.run(
        [sys.executable, "-m", "mycelium.cli.main", "demo", "flow"],  # (also: mycelium engine demo)
        capture_output=True,
        text=True,
        env={**env, "TMPDIR": str(tmp_path)},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "✓ review: resolved after 4 step(s)" in out and "review: julia blocked, on to rework" in out
    assert "✓ Everyone's on board: going with C: Wednesday" in out
    assert "saved decision context/decision/launch-the-pricing-page: Wednesday" in out
    assert "'mpc': 0.8" in out and "min_satisfaction': 0.75" in out
