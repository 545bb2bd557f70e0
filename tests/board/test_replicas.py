"""Races the database must win: many claimants on one row, two hub processes on one database,
two sweepers, and the CLI against a real hub."""

from __future__ import annotations

import asyncio
import json
import subprocess

import asyncpg
import httpx
import pytest

from tests.board.conftest import backdate, notices, task
from tests.support.cli import mycelium

pytestmark = pytest.mark.slow

ROOM = "race"


async def test_fifty_concurrent_claimants_on_one_row_leave_exactly_one_holder(db_dsn, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room($1)", ROOM)
    key = await task(admin_conn, "Hot row", room=ROOM)
    conns = [await asyncpg.connect(db_dsn) for _ in range(50)]
    try:
        async def one(i: int, conn: asyncpg.Connection) -> str:
            try:
                return await conn.fetchval("SELECT owner FROM mycelium.claim_task($1, $2, $3)", ROOM, key, f"agent{i}")
            except asyncpg.PostgresError as exc:
                assert exc.sqlstate == "MY409", exc
                return ""
        results = await asyncio.gather(*(one(i, c) for i, c in enumerate(conns)))
    finally:
        await asyncio.gather(*(c.close() for c in conns))
    winners = [r for r in results if r]
    assert len(winners) == 1
    holder = await admin_conn.fetchval("SELECT owner FROM mycelium.assignments WHERE key = $1", key)
    assert holder == winners[0]
    assert [n["by"] for n in await notices(admin_conn, ROOM, "claimed")] == winners


async def test_two_sweepers_announce_each_expiry_once(db_dsn, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room($1)", ROOM)
    keys = [await task(admin_conn, f"lease {i}", room=ROOM) for i in range(40)]
    for key in keys:
        await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'worker', 1)", ROOM, key)
        await backdate(admin_conn, key, 0.9, room=ROOM)
    await admin_conn.execute(
        "UPDATE mycelium.assignments SET claimed_at = claimed_at - interval '10 seconds' WHERE room = $1", ROOM)
    a, b = await asyncpg.connect(db_dsn), await asyncpg.connect(db_dsn)
    try:
        async def sweeper(conn: asyncpg.Connection) -> list[str]:
            got: list[str] = []
            for _ in range(20):
                got += [r["key"] for r in await conn.fetch("SELECT key FROM mycelium.sweep_expired_leases(7)")]
            return got
        first, second = await asyncio.gather(sweeper(a), sweeper(b))
    finally:
        await a.close()
        await b.close()
    assert sorted(first + second) == sorted(keys)
    expired = await notices(admin_conn, ROOM, "expired")
    assert sorted(n["key"] for n in expired) == sorted(keys)
    assert await admin_conn.fetch("SELECT * FROM mycelium.sweep_expired_leases()") == []


@pytest.fixture
def hubs(hub_processes):
    procs = [hub_processes(wait=False) for _ in range(2)]
    for p in procs:
        p.wait_ready()
    return procs


async def test_two_hub_replicas_racing_for_one_row_give_it_to_exactly_one_agent(hubs, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room($1)", ROOM)
    key = await task(admin_conn, "Replicated row", room=ROOM)

    async def agent(client: httpx.AsyncClient, url: str, name: str) -> int:
        r = await client.post(f"{url}/api/rooms/{ROOM}/assignments/claim", json={"key": key, "handle": name})
        assert r.status_code in (200, 409), r.text
        return r.status_code

    async with httpx.AsyncClient(timeout=30) as client:
        codes = await asyncio.gather(*(agent(client, hubs[i % 2].url, f"agent{i}") for i in range(24)))
    assert sorted(codes).count(200) == 1
    assert len(await notices(admin_conn, ROOM, "claimed")) == 1


async def test_the_sweepers_of_two_running_hubs_announce_an_expiry_once(hubs, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room($1)", ROOM)
    keys = [await task(admin_conn, f"drain {i}", room=ROOM) for i in range(10)]
    for key in keys:
        await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'worker', 1)", ROOM, key)
        await backdate(admin_conn, key, 0.99, room=ROOM)  # under a second left
    for _ in range(150):  # the sweepers look at least every 5 s; wait up to 30 s for all ten
        if len(await notices(admin_conn, ROOM, "expired")) >= len(keys):
            break
        await asyncio.sleep(0.2)
    # both hubs keep sweeping; give each another full cycle to (wrongly) repeat an announcement
    await asyncio.sleep(6)
    expired = await notices(admin_conn, ROOM, "expired")
    assert sorted(n["key"] for n in expired) == sorted(keys)
    announced = await admin_conn.fetchval("SELECT count(*) FROM mycelium.lease_expiries WHERE room = $1", ROOM)
    assert announced == len(keys)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return mycelium("board", *args, url=url, env={"MYCELIUM_ROOM": ROOM})


async def test_the_board_cli_drives_a_real_hub(hubs, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room($1)", ROOM)
    url = hubs[0].url
    made = cli(url, "new", "Write the docs", "--assign", "@bob", "--as", "julia", "--json")
    assert made.returncode == 0, made.stderr
    row = json.loads(made.stdout)
    short = row["episode"].rsplit(":", 1)[1]
    cli(url, "new", "Schema first", "--as", "julia")
    fields = cli(url, "fields", "work/write-the-docs", "--set", "depends-on=work/schema-first", "--as", "julia")
    assert fields.returncode == 0 and "depends-on: work/schema-first" in fields.stdout
    gate = cli(url, "gate", "on", "--as", "ops")
    assert "dependency gate (room race): on" in gate.stdout
    refused = cli(url, "claim", short, "--as", "bob")
    assert refused.returncode == 1 and "409 waiting" in refused.stderr and "work/schema-first" in refused.stderr
    claimed = cli(url, "claim", short, "--as", "bob", "--force", "--ttl", "10")
    assert claimed.returncode == 0 and "held @bob (fresh)" in claimed.stdout
    listed = json.loads(cli(url, "ls", "--filter", "in-flight", "--json").stdout)
    assert [r["key"] for r in listed] == ["work/write-the-docs"]
    assert cli(url, "block", "work/schema-first", "--on", "#502", "--as", "ops").returncode == 0
    assert "blocked on: #502" in cli(url, "show", "work/schema-first").stdout
    assert cli(url, "unblock", "work/schema-first", "--as", "ops").returncode == 0
    assert cli(url, "resolve", "work/schema-first", "--as", "db").returncode == 0
    resolved = cli(url, "resolve", short, "--as", "bob")
    assert "resolved" in resolved.stdout
    assert "nothing to renew" in cli(url, "renew", "--as", "bob").stdout
    assert cli(url, "dismiss", "work/nope", "--as", "ops").returncode == 1
    subkinds = [n["subkind"] for n in await notices(admin_conn, ROOM)]
    assert subkinds == ["filed", "filed", "claimed", "blocked", "unblocked", "resolved", "unblocked", "resolved"]
