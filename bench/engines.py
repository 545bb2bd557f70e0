"""Engines on workers: what one conductor step costs, beside a raw post -> await round trip in the
same run, and how many runs two `mycelium worker` processes carry at once.

(a) one run at a time on one worker process: a member replies, the worker reads the reply, takes
    the edge and posts the next question, the other member is woken by it. Per step: the latency
    from the reply's commit to the next question in the member's hands, and the worker's CPU
    (its /proc times over the steps). The limit: the same two members passing a message back and
    forth with nothing in between (post, the other's await wakes, it answers).
(b) 100 runs at once across 2 worker processes: steps per second, step latency p50/p99, and
    whether any question was posted twice.

Members are asyncpg connections here (one LISTEN connection per process of members, as the hub's
`await` has), replying through the database's own verbs. ``python bench/engines.py [--runs 100]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from _db import bench_database
from _report import machine, stamp, table, write_section

ROOM = "bench"
FLOW = {"name": "relay", "description": "Each member in turn, many rounds.", "roles": [], "max_steps": 200,
        "steps": [{"id": "talk", "to": "each", "rounds": 1, "prompt": "Round {round}: {ask}", "next": "done"},
                  {"id": "done", "end": "resolved"}]}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Members:
    """Members answering every turn addressed to them: one connection each, one LISTEN connection for
    all of them."""

    def __init__(self, dsn: str, handles: list[str]) -> None:
        self.dsn = dsn
        self.handles = handles
        self.sent: dict[tuple[str, int], float] = {}   # (thread, turn answered) -> when the reply committed
        self.latency: list[float] = []                  # reply committed -> next question taken
        self._wakes = {h: asyncio.Event() for h in handles}

    async def run(self, stop: asyncio.Event) -> None:
        listen = await asyncpg.connect(self.dsn)

        def woke(*_: object) -> None:
            for e in self._wakes.values():
                e.set()
        await listen.add_listener("mycelium_wakes", woke)
        try:
            await asyncio.gather(*(self._member(h, stop) for h in self.handles))
        finally:
            await listen.close()

    async def _member(self, handle: str, stop: asyncio.Event) -> None:
        work = await asyncpg.connect(self.dsn)
        wake = self._wakes[handle]
        try:
            while not stop.is_set():
                wake.clear()
                row = await work.fetchrow("SELECT * FROM mycelium.take_next($1, $2)", ROOM, handle)
                if row is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), 0.5)
                    continue
                if row["sender"] == "system":
                    continue
                payload = json.loads(row["payload"]) if isinstance(row["payload"], str) else row["payload"]
                line = payload.get("conductor") or {}
                if line.get("event") != "turn":
                    continue
                before = self.sent.pop((row["episode"], line["turn"] - 1), None)
                if before is not None:
                    self.latency.append(time.perf_counter() - before)
                await work.execute("SELECT 1 FROM mycelium.reply($1, $2, 'ok', NULL, $3)", ROOM, handle,
                                   row["episode"])
                self.sent[(row["episode"], line["turn"])] = time.perf_counter()
        finally:
            await work.close()


async def raw_round_trip(dsn: str, hops: int) -> list[float]:
    """Two members passing one message back and forth: post, the other's wake, its take."""
    a, b, listen = [await asyncpg.connect(dsn) for _ in range(3)]
    woke = asyncio.Event()
    await listen.add_listener("mycelium_wakes", lambda *_: woke.set())
    out = []
    conns = {"ann": a, "bob": b}
    try:
        me, other = "ann", "bob"
        for _ in range(hops):
            woke.clear()
            start = time.perf_counter()
            await conns[me].execute("SELECT 1 FROM mycelium.post_message($1, $2, 'ping', NULL, ARRAY[$3])",
                                    ROOM, me, other)
            while (await conns[other].fetchrow("SELECT * FROM mycelium.take_next($1, $2)", ROOM, other)) is None:
                await asyncio.wait_for(woke.wait(), 5)
                woke.clear()
            out.append(time.perf_counter() - start)
            me, other = other, me
    finally:
        for c in (a, b, listen):
            await c.close()
    return out


def start_worker(dsn: str, folder: Path, name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MYCELIUM_EMBEDDER": "none", "MYCELIUM_MIGRATE_ON_START": "false",
           "MYCELIUM_ENGINE_LEASE_SECONDS": "10", "MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S": "120"}
    log = open(folder / f"{name}.log", "w")  # noqa: SIM115 - the process keeps it
    proc = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "worker", "--only", "engines",
                             "--database-url", dsn, "--data-dir", str(folder / name)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while "loops engines" not in (folder / f"{name}.log").read_text():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError((folder / f"{name}.log").read_text())
        time.sleep(0.1)
    return proc


async def run_flows(conn: asyncpg.Connection, runs: int, rounds: int, members: list[str]) -> list[str]:
    flow = {**FLOW, "steps": [{**FLOW["steps"][0], "rounds": rounds}, FLOW["steps"][1]]}
    await conn.execute("SELECT 1 FROM mycelium.write_memory($1, 'protocols/relay', to_jsonb($2::text), 'bench')",
                       ROOM, json.dumps(flow))
    episodes = []
    mentions = " ".join("@" + m for m in members)
    for i in range(runs):
        row = await conn.fetchrow("SELECT key, episode FROM mycelium.create_task($1, $2, 'bench')", ROOM, f"run {i}")
        episodes.append(row["episode"])
        await conn.execute("SELECT 1 FROM mycelium.coordinate($1, $2, 'conductor', $3, 'bench')", ROOM, row["key"],
                           f"relay {mentions}: go")
    return episodes


async def wait_closed(conn: asyncpg.Connection, n: int, timeout: float) -> float:
    start = time.perf_counter()
    while await conn.fetchval("SELECT count(*) FROM mycelium.engine_runs WHERE state <> 'open'") < n:
        if time.perf_counter() - start > timeout:
            raise TimeoutError("the runs did not close")
        await asyncio.sleep(0.05)
    return time.perf_counter() - start


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100, help="steps of the single run (a)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    async with bench_database("bench_engines") as db:
        conn = await asyncpg.connect(db.dsn)
        await conn.execute("SELECT mycelium.create_room($1)", ROOM)
        await conn.execute("SELECT * FROM mycelium.create_engine($1, 'conductor', 'conductor', '', 'bench')", ROOM)
        raw = await raw_round_trip(db.dsn, 200)

        # (a) one run, one worker
        worker = start_worker(db.dsn, folder, "w0")
        members = Members(db.dsn, ["ann", "bob"])
        stop = asyncio.Event()
        task = asyncio.create_task(members.run(stop))
        cpu0 = cpu_seconds(worker.pid)
        await run_flows(conn, 1, args.steps // 2, ["ann", "bob"])
        await wait_closed(conn, 1, 300)
        cpu_a = (cpu_seconds(worker.pid) - cpu0) / args.steps
        single = list(members.latency)
        stop.set()
        await task

        # (b) many runs, two workers
        second = start_worker(db.dsn, folder, "w1")
        members_b = Members(db.dsn, ["cy", "dee"])
        stop_b = asyncio.Event()
        task_b = asyncio.create_task(members_b.run(stop_b))
        cpus = [cpu_seconds(p.pid) for p in (worker, second)]
        started = time.perf_counter()
        await run_flows(conn, args.runs, 5, ["cy", "dee"])
        await wait_closed(conn, 1 + args.runs, 600)
        elapsed = time.perf_counter() - started
        stop_b.set()
        await task_b
        steps_b = await conn.fetchval("SELECT count(*) FROM mycelium.engine_trace WHERE run_id > 1")
        dup = await conn.fetchval(
            "SELECT count(*) FROM (SELECT run_id, turn FROM mycelium.engine_posts WHERE event = 'turn' "
            "GROUP BY 1, 2 HAVING count(*) > 1) d")
        cpu_b = sum(cpu_seconds(p.pid) - c for p, c in zip((worker, second), cpus, strict=True)) / max(steps_b, 1)
        for p in (worker, second):
            p.terminate()
            p.wait(timeout=30)
        await conn.close()

    raw_ms = statistics.median(raw) * 1000
    rows = [
        ["raw post -> await round trip (the limit)", f"{raw_ms:.1f}", f"{pct(raw, 0.99):.1f}", "-", len(raw)],
        ["(a) one conductor step, 1 worker", f"{statistics.median(single) * 1000:.1f}", f"{pct(single, 0.99):.1f}",
         f"{cpu_a * 1000:.1f}", len(single)],
        [f"(b) {args.runs} runs at once, 2 workers", f"{statistics.median(members_b.latency) * 1000:.1f}",
         f"{pct(members_b.latency, 0.99):.1f}", f"{cpu_b * 1000:.1f}", len(members_b.latency)],
    ]
    text = (f"## Engines on workers (`bench/engines.py`) — {stamp()}\n\n{machine()}; PostgreSQL embedded; "
            "members are asyncpg connections replying through `mycelium.reply`, woken by `mycelium_wakes`.\n\n"
            + table(["path", "p50 ms", "p99 ms", "worker CPU ms/step", "samples"], rows)
            + f"\n\n(b): {steps_b} steps in {elapsed:.1f} s = {steps_b / elapsed:.0f} steps/s; "
            f"questions posted twice: {dup}. A step's latency is from the member's reply committing to the "
            "next question in a member's hands; the raw round trip is one post woken and taken.\n\n"
            f"Against issue 10's targets: a step costs {statistics.median(single) / statistics.median(raw):.1f}x "
            f"the raw round trip at p50 (target ≤ 2x); 100 runs: p99 {pct(members_b.latency, 0.99):.0f} ms "
            f"(target ≤ 250 ms); duplicated posts {dup} (target 0). Load average when it ended: "
            f"{os.getloadavg()[0]:.1f} on this shared machine.\n")
    print(text)
    if not args.no_write:
        write_section("engines", text)


if __name__ == "__main__":
    asyncio.run(main())
