"""Swarms with real processes: `mycelium swarm` against two `mycelium up` replicas whose worker
engines run the scripted agent command, to the end; and a `mycelium worker` killed with -9 in the
middle of a worker's turn: its agent goes with it, another worker takes the turn again, and what the
turn says is applied once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import asyncpg
import httpx
import pytest

from tests.runners.test_runner_processes import until
from tests.support.cli import mycelium
from tests.swarms.conftest import TEAM_SCRIPT, scripted_command
from tests.workers.conftest import WorkerProcess

pytestmark = pytest.mark.slow


def test_mycelium_swarm_runs_a_team_of_three_to_the_end_on_two_replicas(hub_processes, tmp_path, db_dsn):
    env = {"MYCELIUM_SLIM": "off", "MYCELIUM_WORKER_COMMAND": scripted_command(tmp_path, TEAM_SCRIPT),
           "MYCELIUM_ENGINE_LEASE_SECONDS": "3"}
    a, b = hub_processes(env=env), hub_processes(env=env)
    assert httpx.post(a.url + "/api/rooms", json={"name": "lab"}).status_code == 201
    done = mycelium("swarm", "Ship passkey login", "--team", "@ann", "@bob", "@cy", "--wait", "120",
                    "--room", "lab", "--as", "julia", env={"MYCELIUM_API_URL": b.url}, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("swarm on work/ship-passkey-login (Ship passkey login): lead @ann; "
                                  "@ann (worker), @bob (worker), @cy (worker)")
    assert done.stdout.rstrip().splitlines()[-1].startswith("work/ship-passkey-login\tresolved\tparts 2/2")
    (listed,) = httpx.get(a.url + "/api/rooms/lab/swarms").json()
    assert (listed["status"], listed["run_state"], listed["parts"], listed["parts_settled"]) == (
        "resolved", "resolved", 2, 2)

    async def check() -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            notices = await conn.fetch(
                "SELECT payload ->> 'key' AS key, payload ->> 'by' AS by FROM mycelium.messages "
                "WHERE room = 'lab' AND payload_type = 'notice' AND payload ->> 'subkind' = 'resolved' ORDER BY 1")
            assert [tuple(n) for n in notices] == [("work/build-the-passkey-api", "bob"),
                                                   ("work/ship-passkey-login", "ann"),
                                                   ("work/write-the-login-page", "cy")]
            assert await conn.fetchval("SELECT count(*) FROM mycelium.memories WHERE room = 'lab' "
                                       "AND meta ->> 'part-of' = 'work/ship-passkey-login'") == 2
        finally:
            await conn.close()
    asyncio.run(check())
    # each part is on its worker's branch, in the repository of the replica that ran its turn
    for handle, name in (("bob", "build-the-passkey-api.md"), ("cy", "write-the-login-page.md")):
        holders = []
        for hub in (a, b):
            repo = hub.data_dir / "workspaces" / "lab" / "repo"
            if repo.exists():
                tree = subprocess.run(["git", "ls-tree", "--name-only", f"swarm/{handle}"], cwd=repo,
                                      capture_output=True, text=True).stdout.split()
                if tree:
                    holders.append(tree)
        assert holders == [[name]]
    bad = mycelium("swarm", "Ship it", "--team", "@ann", "@ann", "--room", "lab", "--as", "julia",
                   env={"MYCELIUM_API_URL": a.url})
    assert bad.returncode == 1 and bad.stderr.strip().endswith("team: @ann is named twice"), bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_worker_killed_mid_turn_is_taken_over_and_its_actions_applied_once(tmp_path, db_dsn):
    once = tmp_path / "first-attempt.pid"
    script = {"bob": [{"wake": "filed", "sleep": 60, "once": str(once),
                       "write": {"{slug}.md": "# {title}\n"},
                       "say": "Done, with a follow-up.\n[[new: Document the API -> @cy]]\n[[done]]"}]}
    env = {"MYCELIUM_MIGRATE_ON_START": "false", "MYCELIUM_SLIM": "off", "MYCELIUM_ENGINE_LEASE_SECONDS": "2",
           "MYCELIUM_WORKER_COMMAND": scripted_command(tmp_path, script)}

    async def setup() -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            await conn.execute("SELECT mycelium.create_room('lab')")
            await conn.execute("SELECT mycelium.create_engine('lab', 'bob', 'worker', '', 'julia')")
        finally:
            await conn.close()
    asyncio.run(setup())
    workers = [WorkerProcess(data_dir=tmp_path / f"w{n}", database_url=db_dsn, extra=["--only", "engines"], env=env)
               for n in range(2)]
    try:
        for w in workers:
            w.wait_ready()

        async def file_it() -> None:
            conn = await asyncpg.connect(db_dsn)
            try:
                await conn.execute("SELECT * FROM mycelium.create_task('lab', 'Build the API', 'julia', NULL, 'bob')")
            finally:
                await conn.close()
        asyncio.run(file_it())
        until(lambda: once.exists() and once.read_text(), 60)
        agent = int(once.read_text())

        async def holder() -> str:
            conn = await asyncpg.connect(db_dsn)
            try:
                return await conn.fetchval("SELECT taken_by FROM mycelium.engine_summons WHERE how = 'filed'")
            finally:
                await conn.close()
        taken_by = asyncio.run(holder())
        doomed = next(w for w in workers if f":{w.proc.pid}:" in taken_by)
        doomed.proc.kill()
        doomed.proc.wait(timeout=10)

        def agent_gone() -> bool:
            try:
                os.kill(agent, 0)
            except ProcessLookupError:
                return True
            return False
        until(agent_gone, 10)

        async def outcome() -> dict | None:
            conn = await asyncpg.connect(db_dsn)
            try:
                s = await conn.fetchrow("SELECT state, attempts, taken_by FROM mycelium.engine_summons "
                                        "WHERE how = 'filed'")
                if s["state"] != "done":
                    return None
                return {
                    "summon": dict(s),
                    "replies": await conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE room = 'lab' "
                                                   "AND sender = 'bob' AND payload_type = 'reply'"),
                    "follow_ups": await conn.fetchval("SELECT count(*) FROM mycelium.memories WHERE room = 'lab' "
                                                      "AND key LIKE 'work/document-the-api%'"),
                    "resolved": await conn.fetchval(
                        "SELECT count(*) FROM mycelium.messages WHERE room = 'lab' AND payload_type = 'notice' "
                        "AND payload ->> 'subkind' = 'resolved' AND payload ->> 'key' = 'work/build-the-api'"),
                }
            finally:
                await conn.close()
        deadline = time.monotonic() + 60
        got = None
        while got is None and time.monotonic() < deadline:
            got = asyncio.run(outcome())
            time.sleep(0.2)
        survivor = next(w for w in workers if w is not doomed)
        assert got is not None, survivor.log.read_text()[-3000:]
        assert got["summon"]["attempts"] == 2 and f":{survivor.proc.pid}:" in got["summon"]["taken_by"]
        assert (got["replies"], got["follow_ups"], got["resolved"]) == (1, 1, 1)
        survived = workers.index(survivor)
        repo = tmp_path / f"w{survived}" / "workspaces" / "lab" / "repo"
        tree = subprocess.run(["git", "ls-tree", "--name-only", "swarm/bob"], cwd=repo, capture_output=True,
                              text=True, check=True).stdout.split()
        assert tree == ["build-the-api.md"]
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.kill()
