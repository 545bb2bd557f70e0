"""Two hub replicas on one database and one SLIM node (``mycelium slim``), each a real process: one
publishes a room's channel; ``kill -9`` it mid-stream and the other takes the room over from the
position the dead one recorded, with no gap and no message delivered twice."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import pytest

import mycelium.slim
from tests.support.processes import CliProcess, free_port

pytestmark = pytest.mark.slow

TOTAL = 600


@pytest.fixture
def node_process(tmp_path):
    listen = f"127.0.0.1:{free_port()}"
    node = CliProcess(["slim", "--listen", listen], tmp_path / "node.log", {})
    from mycelium.slim.runtime import reachable

    for _ in range(200):
        if reachable(listen, 0.1):
            break
        assert node.proc.poll() is None, (tmp_path / "node.log").read_text()
        import time

        time.sleep(0.05)
    yield f"http://{listen}"
    node.stop()


async def test_a_killed_publisher_s_room_is_taken_over_with_no_gap_and_no_repeat(
        hub_processes, node_process, admin_conn):
    env = {"MYCELIUM_SLIM": "on", "MYCELIUM_SLIM_ENDPOINT": node_process, "MYCELIUM_SLIM_SERVE": "false",
           "MYCELIUM_MIGRATE_ON_START": "false"}
    replicas = [hub_processes(env=env), hub_processes(env=env)]
    first = replicas[0]
    async with httpx.AsyncClient(base_url=first.url, trust_env=False, timeout=30) as http:
        assert (await http.post("/api/rooms", json={"name": "atlas"})).status_code == 201
        for _ in range(200):
            publisher = (await http.get("/api/rooms/atlas/slim")).json()["publisher"]
            if publisher:
                break
            await asyncio.sleep(0.05)
    pid = int(publisher.rsplit(":", 1)[1])
    doomed = next(r for r in replicas if r.proc.pid == pid)
    survivor = next(r for r in replicas if r is not doomed)
    got: list[dict] = []
    member = mycelium.slim.join("atlas", "julia", api_url=survivor.url, join_seconds=15)
    async with member:
        async def write() -> None:
            for start in range(0, TOTAL, 20):  # a stream of commits while the publisher dies
                await admin_conn.execute(
                    "INSERT INTO mycelium.messages (room, sender, content) "
                    "SELECT 'atlas', 'bob', 'm' || g FROM generate_series($1::int, $2::int) g",
                    start + 1, start + 20)
                await asyncio.sleep(0.02)

        writer = asyncio.create_task(write())
        while len(got) < TOTAL // 3:
            got.append(await member.next(20))
        os.kill(doomed.proc.pid, signal.SIGKILL)  # mid-stream: no unlock, no goodbye
        doomed.proc.wait(timeout=10)
        await writer
        while len(got) < TOTAL:
            try:
                got.append(await member.next(60))
            except TimeoutError:
                pytest.fail(f"{len(got)} of {TOTAL} arrived; the survivor's log:\n{survivor.log.read_text()}")
        assert member.sessions >= 2, "the member followed the new moderator"
    assert [m["position"] for m in got] == list(range(1, TOTAL + 1))  # no gap, in order
    assert len({m["id"] for m in got}) == TOTAL  # each once (repeats are dropped by id)
    row = await admin_conn.fetchrow("SELECT published, publisher FROM mycelium.slim_channels WHERE room = 'atlas'")
    for _ in range(100):
        if row["published"] == TOTAL:
            break
        await asyncio.sleep(0.05)
        row = await admin_conn.fetchrow("SELECT published, publisher FROM mycelium.slim_channels "
                                        "WHERE room = 'atlas'")
    assert row["published"] == TOTAL and row["publisher"].endswith(f":{survivor.proc.pid}")
