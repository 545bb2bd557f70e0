"""The CLI's side of the channels: ``mycelium room watch --slim`` follows a room as a member,
``mycelium up`` runs the node in its own process by default, and a process without slim-bindings
says so in one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx
import pytest

from tests.support.processes import free_port

pytestmark = pytest.mark.slow


async def test_room_watch_slim_prints_each_message_the_channel_publishes(slim_hub, tmp_path):
    async with slim_hub.http() as http:
        assert (await http.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    env = {**os.environ, "MYCELIUM_API_URL": slim_hub.url, "NO_PROXY": "*"}
    watch = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mycelium.cli.main", "room", "watch", "--slim", "-r", "atlas", "--as", "julia",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        said = await asyncio.wait_for(watch.stderr.readline(), 30)
        assert b"listening on the SLIM channel of atlas as @julia" in said
        async with slim_hub.http() as http:
            r = await http.post("/api/rooms/atlas/reply", json={"handle": "bob", "text": "over the channel"})
            assert r.status_code == 201
        line = await asyncio.wait_for(watch.stdout.readline(), 30)
        assert b"bob" in line and b"over the channel" in line
    finally:
        watch.terminate()
        await watch.wait()


def test_up_runs_the_node_in_its_own_process_and_health_reports_it(hub_processes):
    endpoint = f"http://127.0.0.1:{free_port()}"
    hub = hub_processes(env={"MYCELIUM_SLIM": "on", "MYCELIUM_SLIM_ENDPOINT": endpoint,
                             "MYCELIUM_MIGRATE_ON_START": "false"})
    slim = httpx.get(hub.url + "/health", timeout=10).json()["slim"]
    assert slim["node"] == "this process" and slim["reachable"] and slim["endpoint"] == endpoint
    assert f"SLIM channels: node in this process on {endpoint}" in hub.log.read_text()


def test_without_slim_bindings_the_cli_says_so_in_one_line(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['slim_bindings'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "MYCELIUM_API_URL": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-m", "mycelium.cli.main", "slim"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "mycelium slim: slim-bindings is not installed (it comes with the hub: pip install 'mycelium-hub[hub]')"]
    assert "Traceback" not in out.stderr
