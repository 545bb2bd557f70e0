"""Transition ledger throughput, against upstream and against the raw SQL limit, in the same run.

Measured on one database (embedded PostgreSQL, or DATABASE_URL), rounds interleaved so that host
noise hits every variant alike; each figure is the median of the rounds:

* raw SQL limit: one bare INSERT … ON CONFLICT plus one UPDATE per call, 8 connections, 8 tasks;
  and the same with the UPDATE also moving one shared row (the shape of one receipt chain, one agent
  and lane: every cycle's second commit waits for the previous one's);
* the gate alone: ``mycelium.claim_transition`` + ``mycelium.complete`` called directly (8 conns),
  with receipts (always on) for one agent and for one agent per worker, and once more with the guard's
  update trigger switched off (bench database only: no receipts) to show what the receipt chains cost;
* the SDK: ``@ledger`` (async, 8 concurrent tasks, one pool) and ``@ledger_sync`` (8 threads) around
  a no-op KEYED_MUTATE tool, receipts on;
* upstream: mycelium-runtime's ``PostgresLedgerStorage`` through ``@ledger_sync`` with the same
  binding (8 threads and 8 processes), installed by this script into bench/.peer-venv;
* a redispatch storm: 10,000 dispatches of 100 distinct calls from 4 processes × 8 tasks, each
  call's body taking 20 ms; the side effects that actually ran are counted.

With the embedded server, each variant is also reported as CPU per cycle: the server's (the postmaster
and its children, from /proc) and this process's. It moves far less than throughput with other load on
the machine, and 2 cores divided by it is the rate an idle machine would allow.

``python bench/transitions.py --stores`` measures the SDK's other stores instead (section
``transition-stores``): in memory, a file folder and Redis (a redis-server started here, append-only
with an fsync per write), each beside upstream's store of the same kind in the same round.

``python bench/transitions.py [--rounds 3] [--seconds 5] [--no-peer] [--no-write] [--stores]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _db import with_database
from _report import machine, stamp, table, write_section

HERE = Path(__file__).resolve().parent
PEER_VENV = HERE / ".peer-venv"
PEER_VERSION = "1.38.5"
WORKERS = 8

RAW_SETUP = """
CREATE TABLE IF NOT EXISTS bench_raw (id text PRIMARY KEY, state text NOT NULL, owner text, fence int NOT NULL,
                                      lease_until timestamptz, result text);
CREATE TABLE IF NOT EXISTS bench_chain (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench_chain VALUES (1, 0) ON CONFLICT DO NOTHING;
"""
RAW_INSERT = (
    "INSERT INTO bench_raw (id, state, owner, fence, lease_until) "
    "VALUES ($1, 'IN_FLIGHT', $2, 1, now() + interval '60 s') ON CONFLICT DO NOTHING"
)
RAW_UPDATE = "UPDATE bench_raw SET state = 'COMPLETED', result = $2 WHERE id = $1 AND fence = 1"
RAW_UPDATE_CHAIN = (
    "WITH done AS (UPDATE bench_raw SET state = 'COMPLETED', result = $2 WHERE id = $1 AND fence = 1 RETURNING 1) "
    "UPDATE bench_chain SET n = n + 1 WHERE id = 1"
)
# called as the SDK calls them: in the select list (no function scan)
VERB_CLAIM = "SELECT (mycelium.claim_transition($1, $1, 'noop', $2, 'keyed_mutate', $3, 'v1')).action"
VERB_COMPLETE = "SELECT mycelium.complete_ack($1, $2, 1, NULL)"


class CpuProbe:
    """CPU seconds of the embedded server and of this process, read around a variant's timed window.

    The server's is its postmaster, the live children and the children it has reaped (a backend that
    exits in the window is counted once, by its parent)."""

    def __init__(self, postmaster: int | None) -> None:
        self.postmaster = postmaster
        self._at: tuple[float | None, float] = (None, 0.0)

    def server_seconds(self) -> float | None:
        if self.postmaster is None:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                pid = int(entry.name)
                if pid != self.postmaster and int(fields[1]) != self.postmaster:
                    continue
                with open(f"/proc/{entry.name}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e9
                if pid == self.postmaster:
                    total += (int(fields[13]) + int(fields[14])) / ticks  # reaped children
            except (OSError, ValueError, IndexError):
                continue
        return total

    def start(self) -> None:
        self._at = (self.server_seconds(), time.process_time())

    def per_cycle(self, cycles: int, client: bool = True) -> tuple[float | None, float | None]:
        """Microseconds per cycle since start(): (server, this process or None)."""
        server0, client0 = self._at
        server1 = self.server_seconds()
        if not cycles:
            return None, None
        server = None if server0 is None or server1 is None else (server1 - server0) / cycles * 1e6
        return server, (time.process_time() - client0) / cycles * 1e6 if client else None


def children_seconds() -> float:
    """CPU seconds of this process's children (and theirs) that have been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cost(run: Callable[[], tuple[float, int]]) -> tuple[float, int, float | None, float]:
    """(rate, cycles, server seconds, client seconds of the child processes) of one run."""
    server0, client0 = PROBE.server_seconds(), children_seconds()
    rate, cycles = run()
    server1, client1 = PROBE.server_seconds(), children_seconds()
    server = None if server0 is None or server1 is None else server1 - server0
    return rate, cycles, server, client1 - client0


def net_per_cycle(full: tuple[float, int, float | None, float], fixed: tuple[float, int, float | None, float]
                  ) -> tuple[float | None, float | None]:
    """Microseconds per cycle of a run in child processes, less a run of the same processes that
    makes next to no calls (their start-up, imports, connections and warm-up call)."""
    cycles = full[1] - fixed[1]
    if cycles <= 0:
        return None, None
    server = None if full[2] is None or fixed[2] is None else (full[2] - fixed[2]) / cycles * 1e6
    return server, (full[3] - fixed[3]) / cycles * 1e6


PROBE = CpuProbe(None)
CPU: dict[str, list[tuple[float | None, float | None]]] = {}


def measured(key: str, rate: float, cpu: tuple[float | None, float | None]) -> float:
    CPU.setdefault(key, []).append(cpu)
    return rate


# -- the variants ----------------------------------------------------------------------------------


async def sql_cycles(dsn: str, kind: str, seconds: float, agents: int = 1) -> tuple[float, tuple]:
    """kind raw: the two bare statements; raw_chain: the same, the UPDATE also moving one shared row;
    kind gate: the two verbs. ``agents``: how many agents the 8 workers act for (1: all append to one
    agent's receipt lanes)."""
    pool = await asyncpg.create_pool(dsn, min_size=WORKERS, max_size=WORKERS)
    tag = uuid.uuid4().hex[:10]
    counts = [0] * WORKERS
    start = asyncio.Event()

    async def worker(k: int) -> None:
        await start.wait()
        deadline, i = time.perf_counter() + seconds, 0
        while time.perf_counter() < deadline:
            rid = f"{tag}-{k}-{i}"
            async with pool.acquire() as conn:
                if kind.startswith("raw"):
                    await conn.execute(RAW_INSERT, rid, "w")
                    await conn.execute(RAW_UPDATE if kind == "raw" else RAW_UPDATE_CHAIN, rid, "ok")
                else:
                    await conn.fetchval(VERB_CLAIM, rid, "bench:1", f"bench-{k % agents}")
                    await conn.fetchval(VERB_COMPLETE, rid, "bench:1")
            i += 1
        counts[k] = i

    tasks = [asyncio.create_task(worker(k)) for k in range(WORKERS)]
    await asyncio.sleep(0.1)
    PROBE.start()
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    rate = sum(counts) / (time.perf_counter() - t0)
    cpu = PROBE.per_cycle(sum(counts))
    await pool.close()
    return rate, cpu


def ledgered_noop(dsn: str, connections: int = 1) -> tuple[Any, Callable[[str], Awaitable[None]]]:
    """A no-op KEYED_MUTATE tool under @ledger for agent 'bench', on a store of that many connections."""
    from mycelium import ActionLedger, PostgresLedgerStorage, SideEffectClass, ToolTransitionBinding, ledger

    store = PostgresLedgerStorage(dsn, min_size=connections, max_size=connections)
    led = ActionLedger(store, agent_id="bench", policy_version="v1")
    binding = ToolTransitionBinding.for_tool(side_effect_class=SideEffectClass.KEYED_MUTATE)

    @ledger(action_ledger=led, transition_binding=binding)
    async def noop(key: str) -> None:
        return None

    return store, noop


async def one_connection(dsn: str, kind: str, seconds: float) -> tuple[float, tuple]:
    """One connection, back to back: the median latency of a cycle (µs) and the CPU per cycle. Other
    load on the machine moves these far less than it moves throughput. kind raw: the two bare
    statements; gate: the two verbs (one agent); sdk: one @ledger task on a store of one connection."""
    tag, lat = uuid.uuid4().hex[:10], []
    if kind == "sdk":
        store, noop = ledgered_noop(dsn)

        async def cycle(rid: str) -> None:
            await noop(rid)

        close = store.aclose
    else:
        conn = await asyncpg.connect(dsn)

        async def cycle(rid: str) -> None:
            if kind == "raw":
                await conn.execute(RAW_INSERT, rid, "w")
                await conn.execute(RAW_UPDATE, rid, "ok")
            else:
                await conn.fetchval(VERB_CLAIM, rid, "bench:1", "bench")
                await conn.fetchval(VERB_COMPLETE, rid, "bench:1")

        close = conn.close
    for i in range(50):
        await cycle(f"{tag}-warm-{i}")
    PROBE.start()
    deadline, i = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        await cycle(f"{tag}-{i}")
        lat.append(time.perf_counter() - t0)
        i += 1
    cpu = PROBE.per_cycle(i)
    await close()
    return statistics.median(lat) * 1e6, cpu


async def sdk_async_cycles(dsn: str, seconds: float) -> tuple[float, tuple]:
    store, noop = ledgered_noop(dsn, WORKERS)
    await noop("warm-" + uuid.uuid4().hex)
    tag, counts = uuid.uuid4().hex[:10], [0] * WORKERS

    async def worker(k: int) -> None:
        deadline, i = time.perf_counter() + seconds, 0
        while time.perf_counter() < deadline:
            await noop(f"{tag}-{k}-{i}")
            i += 1
        counts[k] = i

    PROBE.start()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(WORKERS)))
    rate = sum(counts) / (time.perf_counter() - t0)
    cpu = PROBE.per_cycle(sum(counts))
    await store.aclose()
    return rate, cpu


def sdk_thread_cycles(dsn: str, seconds: float) -> tuple[float, tuple]:
    from mycelium import (
        ActionLedger,
        PostgresLedgerStorage,
        SideEffectClass,
        ToolTransitionBinding,
        ledger_sync,
    )

    store = PostgresLedgerStorage(dsn, min_size=WORKERS, max_size=WORKERS)
    led = ActionLedger(store, agent_id="bench", policy_version="v1")
    binding = ToolTransitionBinding.for_tool(side_effect_class=SideEffectClass.KEYED_MUTATE)

    @ledger_sync(action_ledger=led, transition_binding=binding)
    def noop(key: str) -> None:
        return None

    noop("warm-" + uuid.uuid4().hex)
    tag, counts = uuid.uuid4().hex[:10], [0] * WORKERS
    barrier = threading.Barrier(WORKERS + 1)

    def worker(k: int) -> None:
        barrier.wait()
        deadline, i = time.perf_counter() + seconds, 0
        while time.perf_counter() < deadline:
            noop(f"{tag}-{k}-{i}")
            i += 1
        counts[k] = i

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(WORKERS)]
    for t in threads:
        t.start()
    PROBE.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    rate = sum(counts) / (time.perf_counter() - t0)
    cpu = PROBE.per_cycle(sum(counts))
    store.close()
    return rate, cpu


async def sdk_worker(dsn: str, tag: str, start_at: float, seconds: float) -> int:
    """One of 8 OS processes, each one @ledger task on a pool of 1 (the layout upstream's best run uses)."""
    store, noop = ledgered_noop(dsn)
    await noop(f"warm-{tag}")
    await asyncio.sleep(max(0.0, start_at - time.time()))
    deadline, i = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        await noop(f"{tag}-{i}")
        i += 1
    await store.aclose()
    return i


def sdk_process_run(dsn: str, seconds: float) -> tuple[float, int]:
    tag, start_at = uuid.uuid4().hex[:8], time.time() + 4.0
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--sdk-worker", dsn, f"{tag}-{k}", str(start_at), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(WORKERS)
    ]
    counts = [int(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    return sum(counts) / seconds if seconds else 0.0, sum(counts)


def sdk_process_cycles(dsn: str, seconds: float) -> tuple[float, tuple]:
    """8 processes; CPU per cycle (server and the workers') less that of the same 8 processes making no
    timed calls (start-up, imports, connections, the warm-up call)."""
    fixed = run_cost(lambda: sdk_process_run(dsn, 0.0))
    full = run_cost(lambda: sdk_process_run(dsn, seconds))
    return full[0], net_per_cycle(full, fixed)


# -- upstream, in its own virtual environment ------------------------------------------------------

PEER_SCRIPT = textwrap.dedent("""
    import json, sys, threading, time, uuid, warnings, multiprocessing as mp
    warnings.simplefilter("ignore")
    from mycelium import PostgresLedgerStorage, ledger_sync
    from mycelium.transition import SideEffectClass, ToolTransitionBinding
    DSN, KIND, WORKERS, PER = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    BINDING = ToolTransitionBinding.for_tool(agent_id="bench", policy_version="v1",
                                             side_effect_class=SideEffectClass.KEYED_MUTATE)

    def make(table):
        storage = PostgresLedgerStorage(DSN, table=table)
        @ledger_sync(storage=storage, transition_binding=BINDING)
        def noop(key):
            return None
        return noop, storage.close

    def proc(table, tag, k, ready, go, out):
        noop, close = make(table)
        noop(f"warm-{tag}-{k}")
        ready.put(k); go.wait()
        for i in range(PER):
            noop(f"{tag}-{k}-{i}")
        out.put(time.perf_counter()); close()

    if __name__ == "__main__":
        table = "peer_" + uuid.uuid4().hex[:8]
        tag = uuid.uuid4().hex[:8]
        noop, close = make(table)
        noop("warm-" + tag)
        if KIND == "thread":
            bar = threading.Barrier(WORKERS + 1)
            def w(k):
                bar.wait()
                for i in range(PER):
                    noop(f"{tag}-{k}-{i}")
            ts = [threading.Thread(target=w, args=(k,)) for k in range(WORKERS)]
            for t in ts: t.start()
            bar.wait(); t0 = time.perf_counter()
            for t in ts: t.join()
            rate = WORKERS * PER / (time.perf_counter() - t0)
        else:
            ctx = mp.get_context("spawn")
            ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
            ps = [ctx.Process(target=proc, args=(table, tag, k, ready, go, out)) for k in range(WORKERS)]
            for p in ps: p.start()
            for _ in ps: ready.get(timeout=300)
            t0 = time.perf_counter(); go.set()
            ends = [out.get(timeout=900) for _ in ps]
            for p in ps: p.join()
            rate = WORKERS * PER / (max(ends) - t0)
        close()
        print(json.dumps({"rate": rate}))
""")


def ensure_peer() -> Path | None:
    python = PEER_VENV / "bin" / "python"
    # the extras the comparisons use: its Postgres store, and its Redis store (--stores)
    check = [str(python), "-c", "import redis, importlib.metadata as m; print(m.version('mycelium-runtime'))"]
    if (
        python.exists()
        and subprocess.run(check, capture_output=True, text=True).stdout.strip() == PEER_VERSION
    ):
        return python
    print(f"installing mycelium-runtime {PEER_VERSION} into {PEER_VENV} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"mycelium-runtime[postgres,redis]=={PEER_VERSION}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print("could not install the peer:\n" + done.stderr[-2000:], flush=True)
        return None
    return python


PEER_FIXED = 5  # calls per worker of the run whose cost is subtracted (start-up, imports, warm-up)


def peer_run(python: Path, dsn: str, kind: str, per_worker: int) -> tuple[float, int]:
    script = HERE / ".peer-venv" / "peer_bench.py"
    script.write_text(PEER_SCRIPT)
    done = subprocess.run(
        [str(python), str(script), dsn, kind, str(WORKERS), str(per_worker)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # upstream's package, never ours
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"peer run failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["rate"]), WORKERS * per_worker


def peer_cycles(python: Path, dsn: str, kind: str, per_worker: int) -> tuple[float, tuple]:
    """Upstream's run. CPU per cycle: the server's and upstream's processes', less those of a run of
    PEER_FIXED calls per worker (start-up, imports, table creation, warm-up), as for our processes."""
    fixed = run_cost(lambda: peer_run(python, dsn, kind, PEER_FIXED))
    full = run_cost(lambda: peer_run(python, dsn, kind, per_worker))
    return full[0], net_per_cycle(full, fixed)


# -- the redispatch storm --------------------------------------------------------------------------

STORM_CALLS, STORM_DISPATCHES, STORM_PROCS, STORM_TASKS, STORM_BODY = 100, 10_000, 4, 8, 0.02


async def storm_worker(dsn: str, tag: str, seed: int, dispatches: int) -> dict[str, int]:
    from mycelium import (
        ActionLedger,
        LedgerError,
        PostgresLedgerStorage,
        ToolTransitionBinding,
        ledger,
        side_effect,
    )

    store = PostgresLedgerStorage(dsn, min_size=2, max_size=STORM_TASKS)
    led = ActionLedger(store, agent_id="storm", policy_version="v1", poll_interval=0.01, poll_timeout=120)
    binding = ToolTransitionBinding.for_tool(side_effect_class="non_idempotent_mutate")
    ran = 0

    @ledger(action_ledger=led, transition_binding=binding)
    async def spawn_subagent(call: int) -> dict[str, int]:
        nonlocal ran
        async with side_effect():
            ran += 1
            await asyncio.sleep(STORM_BODY)
        return {"call": call}

    rng = random.Random(seed)
    queue = [rng.randrange(STORM_CALLS) for _ in range(dispatches)]
    errors = 0

    async def task() -> None:
        nonlocal errors
        while queue:
            call = queue.pop()
            try:
                out = await spawn_subagent(call, tool_call_id=f"{tag}-{call}")
                assert out == {"call": call}
            except LedgerError:
                errors += 1

    await asyncio.gather(*(task() for _ in range(STORM_TASKS)))
    await store.aclose()
    return {"ran": ran, "errors": errors}


def storm(dsn: str) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    per = STORM_DISPATCHES // STORM_PROCS
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--storm-worker", dsn, tag, str(seed), str(per)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in range(STORM_PROCS)
    ]
    outs = [json.loads(p.communicate(timeout=1800)[0].strip().splitlines()[-1]) for p in procs]
    elapsed = time.perf_counter() - t0
    return {
        "dispatches": per * STORM_PROCS,
        "calls": STORM_CALLS,
        "ran": sum(o["ran"] for o in outs),
        "errors": sum(o["errors"] for o in outs),
        "seconds": elapsed,
    }


# -- main ------------------------------------------------------------------------------------------


async def set_receipts(dsn: str, on: bool) -> None:
    """Switch the guard's update trigger, which appends the receipts, off or on again (bench database
    only): off shows what the receipt chains and the update's checks cost together."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"ALTER TABLE mycelium.transitions {'ENABLE' if on else 'DISABLE'} TRIGGER t10_transitions_guard"
        )
    finally:
        await conn.close()


# -- the SDK's other stores (--stores) ---------------------------------------------------------------

STORE_KINDS = ("memory", "file", "redis")


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server on a free port, append-only with an fsync per write (what the store asks for)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("--stores needs redis-server (apt-get install -y redis-server)")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--appendonly", "yes",
         "--appendfsync", "always", "--save", "", "--logfile", str(folder / "redis.log")],
    )
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of one process, from /proc; 0 without a process."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def flush_redis(url: str) -> None:
    """Empty the Redis server before a variant (a store's scans must not walk another variant's keys)."""
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()


def store_url(kind: str, folder: Path, redis_url: str) -> str:
    if kind == "memory":
        return "memory:"
    if kind == "file":
        return (folder / f"ours-{uuid.uuid4().hex[:8]}").as_uri()
    return redis_url


def ours_store_cycles(kind: str, url: str, seconds: float, redis_pid: int | None, mode: str) -> tuple[float, tuple]:
    """8 threads calling a @ledger_sync no-op (mode "threads") or 8 tasks a @ledger one ("async")."""
    from mycelium import ActionLedger, ToolTransitionBinding, ledger, ledger_sync
    from mycelium.ledger.stores import storage_for

    storage = storage_for(url)
    led = ActionLedger(storage, agent_id="bench", policy_version="v1")
    binding = ToolTransitionBinding.for_tool(side_effect_class="keyed_mutate")
    tag = uuid.uuid4().hex[:8]
    counts = [0] * WORKERS
    server0, client0 = proc_cpu(redis_pid if kind == "redis" else None), time.process_time()
    if mode == "threads":

        @ledger_sync(action_ledger=led, transition_binding=binding)
        def noop(key: str) -> None:
            return None

        noop("warm-" + tag)
        stop = time.perf_counter() + seconds
        server0, client0 = proc_cpu(redis_pid if kind == "redis" else None), time.process_time()

        def worker(k: int) -> None:
            i = 0
            while time.perf_counter() < stop:
                noop(f"{tag}-{k}-{i}", request_id=f"{tag}-{k}-{i}")
                i += 1
            counts[k] = i

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(WORKERS)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
    else:

        @ledger(action_ledger=led, transition_binding=binding)
        async def anoop(key: str) -> None:
            return None

        async def run() -> float:
            nonlocal server0, client0
            await anoop("warm-" + tag)
            stop = time.perf_counter() + seconds
            server0, client0 = proc_cpu(redis_pid if kind == "redis" else None), time.process_time()

            async def worker(k: int) -> None:
                i = 0
                while time.perf_counter() < stop:
                    await anoop(f"{tag}-{k}-{i}", request_id=f"{tag}-{k}-{i}")
                    i += 1
                counts[k] = i

            started = time.perf_counter()
            await asyncio.gather(*(worker(k) for k in range(WORKERS)))
            took = time.perf_counter() - started
            await storage.aclose()
            return took

        elapsed = asyncio.run(run())
    cycles = sum(counts)
    server = proc_cpu(redis_pid if kind == "redis" else None) - server0
    client = time.process_time() - client0
    storage.close()
    return cycles / elapsed, (server * 1e6 / cycles if kind == "redis" else None, client * 1e6 / cycles)


PEER_STORE_SCRIPT = textwrap.dedent("""
    import json, sys, threading, time, uuid, warnings
    warnings.simplefilter("ignore")
    import mycelium
    from mycelium import ledger_sync
    from mycelium.transition import SideEffectClass, ToolTransitionBinding
    KIND, WHERE, WORKERS, SECONDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    BINDING = ToolTransitionBinding.for_tool(agent_id="bench", policy_version="v1",
                                             side_effect_class=SideEffectClass.KEYED_MUTATE)
    if KIND == "memory":
        storage = mycelium.InMemoryLedgerStorage()
    elif KIND == "file":
        storage = mycelium.FileLedgerStorage(WHERE)
    else:
        storage = mycelium.RedisLedgerStorage(WHERE)

    @ledger_sync(storage=storage, transition_binding=BINDING)
    def noop(key):
        return None

    tag = uuid.uuid4().hex[:8]
    noop("warm-" + tag)
    counts = [0] * WORKERS
    stop = time.perf_counter() + SECONDS
    cpu0 = time.process_time()
    def w(k):
        i = 0
        while time.perf_counter() < stop:
            noop(f"{tag}-{k}-{i}")
            i += 1
        counts[k] = i
    ts = [threading.Thread(target=w, args=(k,)) for k in range(WORKERS)]
    t0 = time.perf_counter()
    for t in ts: t.start()
    for t in ts: t.join()
    took = time.perf_counter() - t0
    print(json.dumps({"rate": sum(counts) / took, "cycles": sum(counts), "cpu": time.process_time() - cpu0}))
""")


def peer_store_cycles(
    python: Path, kind: str, folder: Path, redis_url: str, seconds: float, redis_pid: int | None
) -> tuple[float, tuple]:
    where = str(folder / f"peer-{uuid.uuid4().hex[:8]}.json") if kind == "file" else redis_url
    script = PEER_VENV / "peer_store_bench.py"
    script.write_text(PEER_STORE_SCRIPT)
    server0 = proc_cpu(redis_pid if kind == "redis" else None)
    done = subprocess.run(
        [str(python), str(script), kind, where, str(WORKERS), str(seconds)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"peer run failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    server = proc_cpu(redis_pid if kind == "redis" else None) - server0
    cycles = max(out["cycles"], 1)
    return out["rate"], (server * 1e6 / cycles if kind == "redis" else None, out["cpu"] * 1e6 / cycles)


def stores_main(args: argparse.Namespace) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    folder = Path(tempfile.mkdtemp(prefix="mycelium-bench-stores-"))
    redis_proc, redis_url = start_redis(folder)
    peer = None if args.no_peer else ensure_peer()
    results: dict[str, list[float]] = {}
    cpus: dict[str, list[tuple]] = {}
    loads: list[float] = []

    def record(key: str, outcome: tuple[float, tuple]) -> None:
        results.setdefault(key, []).append(outcome[0])
        cpus.setdefault(key, []).append(outcome[1])

    try:
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            loads.append(os.getloadavg()[0])
            for kind in STORE_KINDS:
                for mode in ("threads", "async"):
                    flush_redis(redis_url)
                    url = store_url(kind, folder, redis_url)
                    record(f"{kind}_{mode}", ours_store_cycles(kind, url, args.seconds, redis_proc.pid, mode))
                if peer is not None:
                    flush_redis(redis_url)
                    record(f"{kind}_peer", peer_store_cycles(peer, kind, folder, redis_url, args.seconds,
                                                             redis_proc.pid))
            loads.append(os.getloadavg()[0])
            print({k: round(v[-1]) for k, v in results.items()}, flush=True)
    finally:
        redis_proc.terminate()
        redis_proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    runs = {k: " / ".join(f"{x:,.0f}" for x in v) for k, v in results.items()}

    def cpu(key: str) -> str:
        server = [c[0] for c in cpus[key] if c[0] is not None]
        client = statistics.median(c[1] for c in cpus[key])
        return f"{statistics.median(server):,.0f} + {client:,.0f}" if server else f"– + {client:,.0f}"

    rows = []
    labels = {"memory": "in memory", "file": "file (fsync per write)", "redis": "Redis (appendfsync always)"}
    for kind in STORE_KINDS:
        peer_rate = med.get(f"{kind}_peer")
        for key, label in (
            (f"{kind}_threads", f"SDK {labels[kind]}: @ledger_sync, 8 threads"),
            (f"{kind}_async", f"SDK {labels[kind]}: @ledger, 8 tasks"),
            (f"{kind}_peer", f"upstream {PEER_VERSION} {labels[kind]}: @ledger_sync, 8 threads"),
        ):
            if key not in med:
                continue
            compared = "–" if key.endswith("_peer") or not peer_rate else f"{med[key] / peer_rate:.2f}× upstream"
            rows.append([label, f"{med[key]:,.0f}", runs[key], compared, cpu(key)])
    load = f"{min(loads):.1f}–{max(loads):.1f}"
    md = f"""
## Transition ledger on the SDK's other stores (`bench/transitions.py --stores`)

{stamp()} · {machine()} · {args.rounds} interleaved rounds of {args.seconds:g} s per variant · median, then every
round. Claim → complete cycles per second of a no-op KEYED_MUTATE tool, each call a distinct key, 8 workers;
each store beside upstream's store of the same kind, in the same round.

{table(["variant", "cycles/s (median)", "rounds", "compared", "CPU µs/cycle: Redis server + client"], rows)}

The file stores write each transition durably (ours: one file per row, fsync'd and renamed, under an fcntl
lock per shard; upstream's: the whole ledger in one JSON file, rewritten on every write, so its cost grows
with the number of rows the run has written). Redis runs with `appendonly yes`, `appendfsync always`
(every acknowledged write on disk), emptied before every variant. CPU per cycle: this process's (client; upstream's is its own process)
and the Redis server's, from /proc, median of the rounds. 1-minute load average {load} at the rounds'
starts and ends (2 shared cores): absolute figures move between rounds; compare within a round.
"""
    print(md)
    if not args.no_write:
        write_section("transition-stores", md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--peer-per-worker", type=int, default=250)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--stores", action="store_true", help="the SDK's memory, file and Redis stores")
    ap.add_argument("--storm-worker", nargs=4, metavar=("DSN", "TAG", "SEED", "N"))
    ap.add_argument("--sdk-worker", nargs=4, metavar=("DSN", "TAG", "START", "SECONDS"))
    args = ap.parse_args()
    if args.stores:
        return stores_main(args)
    if args.sdk_worker:
        dsn, tag, start_at, seconds = args.sdk_worker
        print(asyncio.run(sdk_worker(dsn, tag, float(start_at), float(seconds))))
        return 0
    if args.storm_worker:
        dsn, tag, seed, n = args.storm_worker
        print(json.dumps(asyncio.run(storm_worker(dsn, tag, int(seed), int(n)))))
        return 0

    import warnings

    warnings.filterwarnings("ignore")
    from mycelium.db import migrate
    from mycelium.db.embedded import EmbeddedPostgres

    server = None
    if os.environ.get("DATABASE_URL"):
        admin = os.environ["DATABASE_URL"]
    else:
        scratch = Path(tempfile.mkdtemp(prefix="mycelium-bench-"))
        server = EmbeddedPostgres(scratch)
        admin = server.attach()
    try:

        async def prepare() -> str:
            conn = await asyncpg.connect(admin)
            await conn.execute("DROP DATABASE IF EXISTS bench_transitions WITH (FORCE)")
            await conn.execute("CREATE DATABASE bench_transitions")
            await conn.close()
            dsn = with_database(admin, "bench_transitions")
            c = await asyncpg.connect(dsn)
            await c.execute(RAW_SETUP)
            await c.close()
            return dsn

        dsn = asyncio.run(prepare())
        migrate.upgrade(dsn)
        global PROBE
        PROBE = CpuProbe(server.postmaster_pid() if server is not None else None)
        peer = None if args.no_peer else ensure_peer()

        results: dict[str, list[float]] = {}
        loads: list[float] = []

        def record(key: str, outcome: tuple[float, tuple]) -> None:
            results.setdefault(key, []).append(measured(key, *outcome))

        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            loads.append(os.getloadavg()[0])
            record("raw", asyncio.run(sql_cycles(dsn, "raw", args.seconds)))
            record("raw_chain", asyncio.run(sql_cycles(dsn, "raw_chain", args.seconds)))
            record("gate", asyncio.run(sql_cycles(dsn, "gate", args.seconds)))
            record("gate_8_agents", asyncio.run(sql_cycles(dsn, "gate", args.seconds, agents=WORKERS)))
            asyncio.run(set_receipts(dsn, False))
            record("gate_no_receipts", asyncio.run(sql_cycles(dsn, "gate", args.seconds)))
            asyncio.run(set_receipts(dsn, True))
            for kind in ("raw", "gate", "sdk"):
                record(f"one_{kind}", asyncio.run(one_connection(dsn, kind, args.seconds / 2)))
            record("sdk_async", asyncio.run(sdk_async_cycles(dsn, args.seconds)))
            record("sdk_threads", sdk_thread_cycles(dsn, args.seconds))
            record("sdk_procs", sdk_process_cycles(dsn, args.seconds))
            if peer is not None:
                record("peer_threads", peer_cycles(peer, dsn, "thread", args.peer_per_worker))
                record("peer_procs", peer_cycles(peer, dsn, "process", args.peer_per_worker))
            loads.append(os.getloadavg()[0])
            print({k: round(v[-1]) for k, v in results.items() if v}, flush=True)
        print("redispatch storm ...", flush=True)
        st = storm(dsn)
        print(st, flush=True)
    finally:
        if server is not None:
            server.detach()
            shutil.rmtree(scratch, ignore_errors=True)  # the server's data: nothing here outlives the run

    med = {k: statistics.median(v) for k, v in results.items() if v}
    runs = {k: " / ".join(f"{x:,.0f}" for x in v) for k, v in results.items() if v}
    best_peer = max((med[k] for k in ("peer_threads", "peer_procs") if k in med), default=None)
    best_ours = max(med["sdk_async"], med["sdk_threads"], med["sdk_procs"])

    def ratio(x: float, of: float | None) -> str:
        return "–" if not of else f"{x / of:.2f}×"

    def cpu(key: str) -> list[str]:
        """Median server and client CPU per cycle, and the rate 2 idle cores would allow."""
        server = [c[0] for c in CPU.get(key, []) if c[0] is not None]
        client = [c[1] for c in CPU.get(key, []) if c[1] is not None]
        if not server:
            return ["–", "–"]
        srv = statistics.median(server)
        if not client:
            return [f"{srv:,.0f} + –", "–"]
        cl = statistics.median(client)
        return [f"{srv:,.0f} + {cl:,.0f}", f"{2e6 / (srv + cl):,.0f}"]

    def total_cpu(key: str) -> float | None:
        """Median server + client CPU µs per cycle (None when either is unknown)."""
        server = [c[0] for c in CPU.get(key, []) if c[0] is not None]
        client = [c[1] for c in CPU.get(key, []) if c[1] is not None]
        return statistics.median(server) + statistics.median(client) if server and client else None

    def by_cpu(key: str, of: str) -> str:
        """How the CPU per cycle of ``key`` compares: ``of``'s CPU over ``key``'s."""
        mine, theirs = total_cpu(key), total_cpu(of)
        return "–" if not mine or not theirs else f"{theirs / mine:.0%}"

    def row(label: str, key: str, compared: str) -> list[str]:
        return [label, f"{med[key]:,.0f}", runs[key], compared, *cpu(key)]

    rows = [
        row("raw SQL limit: INSERT … ON CONFLICT + UPDATE, 8 connections", "raw", "1.00× (limit)"),
        row(
            "raw SQL limit of one chain: the same, the UPDATE also moving one shared row",
            "raw_chain",
            f"{med['raw_chain'] / med['raw']:.0%} of raw",
        ),
        row(
            "the gate alone: claim_transition + complete (receipts on)",
            "gate",
            f"{med['gate'] / med['raw']:.0%} of raw ({by_cpu('gate', 'raw')} by CPU), "
            f"{med['gate'] / med['raw_chain']:.0%} of one chain's",
        ),
        row(
            "the gate alone, receipts on, one agent per worker (8 agents)",
            "gate_8_agents",
            f"{med['gate_8_agents'] / med['raw']:.0%} of raw ({by_cpu('gate_8_agents', 'raw')} by CPU)",
        ),
        row(
            "the gate alone, update guard off: no receipts (bench only)",
            "gate_no_receipts",
            f"{med['gate_no_receipts'] / med['raw']:.0%} of raw ({by_cpu('gate_no_receipts', 'raw')} by CPU)",
        ),
        row(
            "SDK @ledger (async, 8 tasks, receipts on)",
            "sdk_async",
            ratio(med["sdk_async"], best_peer) + " upstream",
        ),
        row(
            "SDK @ledger (8 processes, one task each, receipts on)",
            "sdk_procs",
            ratio(med["sdk_procs"], best_peer) + " upstream",
        ),
        row(
            "SDK @ledger_sync (8 threads, receipts on)",
            "sdk_threads",
            ratio(med["sdk_threads"], best_peer) + " upstream",
        ),
    ]
    if best_peer:
        rows += [
            row(
                f"upstream mycelium-runtime {PEER_VERSION} PostgresLedgerStorage, @ledger_sync, 8 threads",
                "peer_threads",
                "–",
            ),
            row(f"upstream mycelium-runtime {PEER_VERSION}, @ledger_sync, 8 processes", "peer_procs", "–"),
        ]
    one_rows = [
        [label, f"{med[key]:,.0f}", runs[key], *cpu(key)[:1]]
        for label, key in (
            ("raw: INSERT … ON CONFLICT + UPDATE", "one_raw"),
            ("the gate: claim_transition + complete (receipts on)", "one_gate"),
            ("SDK @ledger, one task on one connection", "one_sdk"),
        )
    ]
    ours_cpu = {k: total_cpu(k) for k in ("sdk_async", "sdk_threads", "sdk_procs")}
    peer_cpu = {k: total_cpu(k) for k in ("peer_threads", "peer_procs")}
    ours_best = min((v, k) for k, v in ours_cpu.items() if v) if any(ours_cpu.values()) else None
    peer_best = min((v, k) for k, v in peer_cpu.items() if v) if any(peer_cpu.values()) else None
    cpu_line = (
        f"By CPU per cycle (server + client, start-up excluded; the least of each side): ours "
        f"{ours_best[0]:,.0f} µs ({ours_best[1]}), upstream {peer_best[0]:,.0f} µs ({peer_best[1]}): "
        f"**{peer_best[0] / ours_best[0]:.2f}×** less CPU per cycle. The gate with receipts on: "
        f"{med['gate'] / med['raw']:.0%} of the raw limit's rate, **{by_cpu('gate', 'raw')}** of it by CPU per "
        f"cycle (update guard and receipts off: {by_cpu('gate_no_receipts', 'raw')})."
        if ours_best and peer_best else ""
    )
    storm_line = (
        f"Redispatch storm: {st['dispatches']:,} dispatches of {st['calls']} distinct calls "
        f"(4 processes × 8 tasks, each body 20 ms): **{st['ran']} side effects** for {st['calls']} calls "
        f"(duplicates: {st['ran'] - st['calls']}), {st['errors']} errors, {st['seconds']:.1f} s."
    )
    load = f"{min(loads):.1f}–{max(loads):.1f}"
    headers = [
        "variant",
        "cycles/s (median)",
        "rounds",
        "compared",
        "CPU µs/cycle: server + client",
        "2 idle cores allow",
    ]
    md = f"""
## Transition ledger (`bench/transitions.py`)

{stamp()} · {machine()} · {args.rounds} interleaved rounds of {args.seconds:g} s (upstream: {args.peer_per_worker}
calls per worker) · median, then every round. Claim → complete cycles per second, each call a distinct key, a
no-op KEYED_MUTATE tool.

{table(headers, rows)}

Ours vs upstream (best of both sides): **{ratio(best_ours, best_peer)}**. {cpu_line}

{storm_line}

One connection, back to back ({args.seconds / 2:g} s per variant and round; the latency of one claim →
complete cycle, median of the cycles, then of the rounds):

{table(["variant", "µs per cycle (median)", "rounds", "CPU µs/cycle: server + client"], one_rows)}

All 8 workers of a variant act for one agent unless the row says otherwise. Appends to one receipt chain
are serialised (each waits for the previous append's commit), so one chain bounds throughput like the
one-chain raw limit, whose every second commit waits for the previous one. An agent's receipts form 32
chains (lanes, chosen by a hash of the request id), so its 8 workers seldom wait for each other's
appends: one agent does about as well as one agent per worker.

CPU per cycle: the server's (postmaster and children, /proc) and the client's: the benchmark process's,
or, for the variants that run in processes of their own (ours and upstream's), those processes' (from
getrusage), each less what the same processes cost in a run of next to no calls (start-up, imports,
connections, warm-up), median of the rounds; "2 idle cores allow" = 2 s of CPU per second / (server +
client); "by CPU" = the raw limit's CPU per cycle over the variant's. CPU per cycle moves far less than
throughput with whatever else runs on the machine (it still rises under contention: shared caches,
lock waits), so it is the steadier figure to compare variants by.

Noise: the 2 cores are shared with other processes on the machine while this runs (1-minute load
average {load} at the rounds' starts and ends), so absolute figures move by tens of percent between
rounds; the comparisons are within one round on the same database.
"""
    print(md)
    if not args.no_write:
        write_section("transitions", md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
