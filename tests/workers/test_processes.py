"""Real processes on one database: two `mycelium worker`s and an HTTP-only replica. One leads each
loop that needs a leader and the lead passes within a lease period of its `kill -9`; the indexer's
and the receipt signer's work is shared and done once; /health shows every loop and every worker;
a loop that keeps failing shows as failing; a worker stopped by SIGTERM exits 0 and says so."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from mycelium.ledger import receipts as r
from mycelium.workers.supervisor import LEASE_SECONDS
from tests.board.conftest import backdate, notices, task
from tests.ledger.conftest import claim
from tests.support.processes import HubProcess
from tests.workers.conftest import WorkerProcess, leaders, lock_holders, report

pytestmark = pytest.mark.slow

SWEEPER_LOCK, MIRROR_LOCK = "mycelium.lease-sweeper", "mycelium.markdown-mirror"


async def eventually(check, timeout: float = 30.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s (last: {got!r})")
        await asyncio.sleep(step)


def health(url: str) -> dict:
    response = httpx.get(url + "/health", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def spawned():
    procs: list[WorkerProcess | HubProcess] = []
    yield procs
    for p in procs:
        if p.proc.poll() is None:
            p.kill()


async def test_one_leader_per_loop_hands_over_within_a_lease_after_kill_9(db_dsn, tmp_path, admin_conn, spawned):
    workers = [WorkerProcess(data_dir=tmp_path / f"w{i}", database_url=db_dsn) for i in range(2)]
    replica = HubProcess(data_dir=tmp_path / "replica", database_url=db_dsn, extra=["--no-workers"])
    spawned.extend([*workers, replica])
    ids = [w.wait_ready() for w in workers]
    replica.wait_ready()

    async def both_lead():
        return len(await leaders(admin_conn, "sweeper")) == 1 and len(await leaders(admin_conn, "mirror")) == 1
    await eventually(both_lead)
    for _ in range(10):  # exactly one leader, and it is the session holding the lock
        for loop, lock in (("sweeper", SWEEPER_LOCK), ("mirror", MIRROR_LOCK)):
            (leader,) = await leaders(admin_conn, loop)
            assert leader in ids
            assert await lock_holders(admin_conn, lock) == [f"mycelium worker {leader} {loop}"]
        await asyncio.sleep(0.2)

    body = health(replica.url)
    assert body["status"] == "ok" and body["loops"] == [] and body["worker"] is None
    seen = {w["worker_id"]: w for w in body["workers"]}
    assert set(seen) == set(ids)
    for w in seen.values():
        assert w["alive"] and w["kind"] == "worker"
        assert {lp["loop"]: lp["state"] for lp in w["loops"]} == {
            "sweeper": "running" if w["worker_id"] == body["leaders"]["sweeper"] else "waiting",
            "settings": "done", "receipts": "running", "engines": "running", "compile": "running",
            "runners": "running", "mirror": "running" if w["worker_id"] == body["leaders"]["mirror"] else "waiting"}
    assert set(body["leaders"]) == {"sweeper", "mirror"}

    (sweeper_leader,) = await leaders(admin_conn, "sweeper")
    doomed = workers[ids.index(sweeper_leader)]
    survivor = workers[1 - ids.index(sweeper_leader)]
    doomed.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    took: dict[str, float] = {}

    async def survivor_holds_both():
        for loop, lock in (("sweeper", SWEEPER_LOCK), ("mirror", MIRROR_LOCK)):
            if loop not in took and await lock_holders(admin_conn, lock) == [f"mycelium worker {survivor.worker_id} {loop}"]:
                took[loop] = time.monotonic() - killed
        return len(took) == 2
    await eventually(survivor_holds_both, timeout=LEASE_SECONDS + 5, step=0.02)
    doomed.proc.wait(timeout=10)
    assert max(took.values()) < LEASE_SECONDS, took
    # the report agrees at once: the dead worker's rows still beat recently, but its sessions are gone
    await eventually(lambda: _leads(admin_conn, survivor.worker_id), timeout=3)

    # the new leaders do the work: a lease running out is announced once, a memory reaches the mirror
    await admin_conn.execute("SELECT mycelium.create_room('handover')")
    key = await task(admin_conn, "Lease that runs out", room="handover")
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task('handover', $1, 'agent', 1)", key)
    await backdate(admin_conn, key, 0.99, room="handover")
    await eventually(lambda: notices(admin_conn, "handover", "expired"), timeout=15)
    await admin_conn.execute("SELECT 1 FROM mycelium.write_memory('handover', 'note', '\"after the kill\"', 'psql')")
    mirrored = tmp_path / survivor.log.stem.removeprefix("worker-") / "rooms" / "handover" / "note.md"
    await eventually(lambda: asyncio.sleep(0, result=mirrored.exists()), timeout=15)
    assert len(await notices(admin_conn, "handover", "expired")) == 1

    assert survivor.signal(signal.SIGTERM) == 0
    assert "mycelium worker: stopped" in survivor.log.read_text()
    rows = await report(admin_conn)
    assert {r["state"] for r in rows if str(r["worker_id"]) == survivor.worker_id} == {"stopped"}
    # the killed worker never said it stopped: its rows stay as they were, and it soon stops counting as alive
    assert {r["state"] for r in rows if str(r["worker_id"]) == doomed.worker_id} != {"stopped"}
    assert not any(r["leader"] for r in rows)


async def _leads(conn, worker_id: str) -> bool:
    return (await leaders(conn, "sweeper"), await leaders(conn, "mirror")) == ([worker_id], [worker_id])


async def test_two_workers_store_every_vector_once_and_sign_every_receipt_once(db_dsn, tmp_path, admin_conn,
                                                                               spawned):
    env = {"MYCELIUM_EMBEDDER": "minilm"}
    workers = [WorkerProcess(data_dir=tmp_path / f"w{i}", database_url=db_dsn, env=env,
                             extra=["--only", "indexer,receipts"]) for i in range(2)]
    spawned.extend(workers)
    ids = [w.wait_ready() for w in workers]

    # every vector written is logged with the session that wrote it (the hub's own verbs run as the
    # owner, so the log is written with the owner's rights); made once the workers are up, since an
    # upgrade drops every trigger sql/ does not define
    await admin_conn.execute("""
        CREATE TABLE public.vector_writes (room text, key text, version integer, writer text);
        CREATE FUNCTION public.log_vector_write() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
        BEGIN
          INSERT INTO public.vector_writes VALUES (NEW.room, NEW.key, NEW.version, current_setting('application_name'));
          RETURN NEW;
        END $$;
        CREATE TRIGGER log_vector_write AFTER UPDATE OF embedding ON mycelium.memories
          FOR EACH ROW WHEN (NEW.embedding IS NOT NULL) EXECUTE FUNCTION public.log_vector_write();
    """)

    n_memories, n_receipts = 192, 120
    await admin_conn.execute("SELECT mycelium.create_room('shared')")
    await admin_conn.execute(
        """SELECT count(*) FROM generate_series(1, $1) i,
             LATERAL mycelium.write_memory('shared', 'note/' || i,
               jsonb_build_object('text', 'note ' || i || ' on the ' || (ARRAY['tides', 'bees', 'moss', 'glass'])[1 + i % 4]),
               'psql') m""", n_memories)
    for i in range(n_receipts):
        await claim(admin_conn, f"req-{i}", "w:1", agent=f"agent-{i % 3}")
        await admin_conn.execute("SELECT 1 FROM mycelium.complete($1, 'w:1', 1, '{\"ok\": 1}'::jsonb)", f"req-{i}")

    async def all_done():
        left = await admin_conn.fetchrow(
            """SELECT (SELECT count(*) FROM mycelium.memories WHERE embedding IS NULL) AS vectors,
                      (SELECT count(*) FROM mycelium.receipts r
                       WHERE NOT EXISTS (SELECT 1 FROM mycelium.receipt_signatures s WHERE s.id = r.id)) AS receipts""")
        return left["vectors"] == 0 and left["receipts"] == 0
    await eventually(all_done, timeout=240, step=0.5)

    writes = await admin_conn.fetch("SELECT room, key, count(*) AS n FROM public.vector_writes GROUP BY room, key")
    assert len(writes) == n_memories
    assert [w for w in writes if w["n"] != 1] == []  # no memory embedded twice
    writers = {row["writer"] for row in await admin_conn.fetch("SELECT DISTINCT writer FROM public.vector_writes")}
    assert writers == {f"mycelium worker {wid} indexer" for wid in ids}  # and both took part

    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.receipt_signatures") == n_receipts
    exported = json.loads(json.dumps(
        [dict(x) for x in await admin_conn.fetch("SELECT * FROM mycelium.receipt_export ORDER BY id")], default=str))
    ring = {k["key_id"]: bytes(k["public_key"]) for k in await admin_conn.fetch("SELECT * FROM mycelium.receipt_keys")}
    assert len(ring) == 2  # one key per worker (each has its own data folder)
    assert r.verify_records(exported, ring) == (n_receipts, [])
    marks = await admin_conn.fetch(
        """SELECT h.agent_id, h.lane, h.seq, s.seq AS signed FROM mycelium.receipt_heads h
           JOIN mycelium.receipts_signed_through s USING (agent_id, lane)""")
    assert len(marks) == await admin_conn.fetchval("SELECT count(*) FROM mycelium.receipt_heads")
    for w in workers:
        assert w.signal(signal.SIGTERM) == 0


async def test_a_mirror_that_cannot_write_warns_and_the_process_shows_as_degraded(db_dsn, tmp_path, admin_conn,
                                                                                    spawned):
    data = tmp_path / "hub"
    data.mkdir()
    (data / "rooms").write_text("the mirror's folder is a file\n")
    hub = HubProcess(data_dir=data, database_url=db_dsn)
    spawned.append(hub)
    first = hub.wait_ready()
    assert first["status"] == "ok" and {lp["loop"] for lp in first["loops"]} == {"sweeper", "settings", "mirror",
                                                                                 "receipts", "engines", "compile",
                                                                                 "runners"}
    await admin_conn.execute("SELECT mycelium.create_room('broken')")
    await admin_conn.execute("SELECT 1 FROM mycelium.write_memory('broken', 'note', '\"cannot be written\"', 'psql')")

    def mirror_of(body: dict) -> dict:
        return next(lp for lp in body["loops"] if lp["loop"] == "mirror")

    async def warned():
        body = health(hub.url)
        return body if mirror_of(body)["warning"] else None
    body = await eventually(warned, timeout=30, step=0.2)
    mirror = mirror_of(body)
    # the file cannot be written: the loop goes on (other rooms would be mirrored) and says so
    assert mirror["state"] == "running" and mirror["failures"] == 0
    assert mirror["warning"].startswith("1 mirror file cannot be written; latest: room 'broken' key 'note'")
    assert body["status"] == "degraded" and body["problems"] == [f"mirror: {mirror['warning']}"]
    (me,) = body["workers"]
    assert me["worker_id"] == body["worker"]["worker_id"] and me["kind"] == "hub" and me["alive"]
    assert {lp["loop"]: lp["warning"] for lp in me["loops"]}["mirror"] == mirror["warning"]
    # the others are fine, and keep beating
    assert {lp["loop"]: lp["state"] for lp in body["loops"]} == {
        "sweeper": "running", "settings": "done", "receipts": "running", "mirror": "running",
        "engines": "running", "compile": "running", "runners": "running"}
    assert hub.signal(signal.SIGTERM) == 0


def test_the_worker_refuses_unknown_loops_and_a_missing_database(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MYCELIUM_DATABASE_URL")}

    def worker(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mycelium.cli.main", "worker", "--data-dir", str(tmp_path / "d"),
                               *args], capture_output=True, text=True, env=env, timeout=60)

    unknown = worker("--only", "indexer,cleanup")
    assert unknown.returncode == 2 and "no loop named cleanup" in unknown.stderr
    off = worker("--only", "mirror", "--no-mirror")
    assert off.returncode == 2 and "mirror cannot run: the mirror is off" in off.stderr
    nothing = worker("--skip", "indexer,sweeper,settings,mirror,receipts,engines,compile,runners")
    assert nothing.returncode == 2 and "no loop left" in nothing.stderr
    missing = worker("--only", "sweeper")
    assert missing.returncode == 1 and f"no hub database in {tmp_path / 'd' / 'pg'}" in missing.stderr
    assert not (tmp_path / "d" / "pg").exists()
