"""Negotiations on workers: what one aligner move costs, beside a raw post -> await round trip in
the same run; 20 negotiations at once on 2 `mycelium worker` processes; the mechanism's replay.

(a) one negotiation on one worker process, two members who never agree, to NEGMAS's deadline: per
    move, the latency from the member's reply committing to the next question in a member's hands,
    the worker's CPU (its /proc times, idle polling included; the worker keeps the mechanism it
    moved last and steps it once per move) and the database server's (the postmaster and its
    children), both per move from the first round on (after NEGMAS's import and the opening, which
    a negotiation pays once; the whole run's figure is given beside). The limit: two members passing a
    message back and forth with nothing in between (post, the other's await wakes, it answers), in a
    task's thread as a move's question and reply are (and, beside it, in the room's channel),
    measured before (a) and again after it, on a machine whose load moves. The negotiation's
    overhead per move is a move's latency less that round trip.
(b) 20 negotiations at once across 2 worker processes, each agreeing at its 10th move: moves per
    second, move latency p50/p99, questions posted twice.
(c) the mechanism's replay after a crash: a fresh NEGMAS SAOMechanism brought to the state of a
    20-move log (what a worker taking a negotiation over does), in this process.

Members are asyncpg connections replying through the database's own verbs, woken by
``mycelium_wakes``. ``python bench/negotiate.py [--moves 40] [--runs 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from _db import bench_database
from _report import machine, stamp, table, write_section
from engines import cpu_seconds, pct, raw_round_trip
from mycelium.engines.aligner.mechanism import Mechanism, Turn

ROOM = "bench"
ISSUES = {"price": ["10", "15", "20", "25", "30"], "vendor": ["acme", "globex"]}
LINES = {"a": "[[mycelium: offer price=10 vendor=acme confidence=0.6]]",
         "b": "[[mycelium: offer price=30 vendor=globex confidence=0.5]]"}


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds of the database server: the postmaster and its children (the backends)."""
    if postmaster is None:
        return 0.0
    total = cpu_seconds(postmaster)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == postmaster:
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Members:
    """Two sides per negotiation: side a is the first member named, b the second. Each answers the
    opening with its line, then holds it (offers it again) until ``agree_at``, when it accepts."""

    def __init__(self, dsn: str, handles: list[str], agree_at: int | None) -> None:
        self.dsn = dsn
        self.handles = handles
        self.agree_at = agree_at
        self.sent: dict[str, float] = {}     # thread -> when its last reply committed
        self.latency: list[float] = []       # reply committed -> next question taken
        self._wakes = {h: asyncio.Event() for h in handles}

    async def run(self, stop: asyncio.Event) -> None:
        listen = await asyncpg.connect(self.dsn)

        def woke(_c: object, _pid: int, _channel: str, payload: str) -> None:
            named = payload.split("\t")[-1]  # each member woken by the hints that name it, as await is
            for h, e in self._wakes.items():
                if named == "*" or h in named.split(","):
                    e.set()
        await listen.add_listener("mycelium_wakes", woke)
        try:
            await asyncio.gather(*(self._member(h, "ab"[i], stop) for i, h in enumerate(self.handles)))
        finally:
            await listen.close()

    async def _member(self, handle: str, side: str, stop: asyncio.Event) -> None:
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
                payload = json.loads(row["payload"]) if isinstance(row["payload"], str) else row["payload"]
                line = (payload or {}).get("aligner") or {}
                if line.get("event") != "turn":
                    continue
                before = self.sent.pop(row["episode"], None)
                if before is not None:
                    self.latency.append(time.perf_counter() - before)
                n = line.get("round") or 0
                text = "[[mycelium: accept]]" if self.agree_at and n >= self.agree_at else LINES[side]
                await work.execute("SELECT 1 FROM mycelium.reply($1, $2, $3, NULL, $4)", ROOM, handle, text,
                                   row["episode"])
                self.sent[row["episode"]] = time.perf_counter()
        finally:
            await work.close()


def start_worker(dsn: str, folder: Path, name: str, max_steps: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MYCELIUM_EMBEDDER": "none", "MYCELIUM_MIGRATE_ON_START": "false",
           "MYCELIUM_ENGINE_LEASE_SECONDS": "10", "MYCELIUM_ALIGNER_ROUND_TIMEOUT_S": "120",
           "MYCELIUM_ALIGNER_MAX_STEPS": str(max_steps)}
    env.pop("MYCELIUM_MODEL_SCRIPT", None)
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


async def negotiations(conn: asyncpg.Connection, runs: int, members: list[str], tag: str) -> None:
    mentions = " ".join("@" + m for m in members)
    for i in range(runs):
        row = await conn.fetchrow("SELECT key FROM mycelium.create_task($1, $2, 'bench')", ROOM, f"{tag} {i}")
        await conn.execute("SELECT 1 FROM mycelium.coordinate($1, $2, 'aligner', $3, 'bench')", ROOM, row["key"],
                           f"{mentions}: the price and the vendor")


async def wait_closed(conn: asyncpg.Connection, n: int, timeout: float) -> float:
    start = time.perf_counter()
    while await conn.fetchval("SELECT count(*) FROM mycelium.engine_runs WHERE state <> 'open'") < n:
        if time.perf_counter() - start > timeout:
            raise TimeoutError("the negotiations did not close")
        await asyncio.sleep(0.05)
    return time.perf_counter() - start


async def wait_moves(conn: asyncpg.Connection, n: int, timeout: float) -> None:
    start = time.perf_counter()
    while await conn.fetchval("SELECT count(*) FROM mycelium.engine_trace") < n:
        if time.perf_counter() - start > timeout:
            raise TimeoutError("the negotiation did not move")
        await asyncio.sleep(0.01)


def replay_times(moves: int, repeats: int) -> list[float]:
    turns = [Turn(h, "offer", {"price": "10", "vendor": "acme"} if h == "a" else {"price": "30", "vendor": "globex"})
             for h in ("a", "b") * (moves // 2)]
    Mechanism.replay(ISSUES, ["a", "b"], turns, moves + 1)  # NEGMAS imported and warm, as in a worker
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        m = Mechanism.replay(ISSUES, ["a", "b"], turns, moves + 1)
        out.append(time.perf_counter() - start)
        assert m.ending() is None and m.steps == moves
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moves", type=int, default=40, help="NEGMAS's step cap of the single negotiation (a)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-negotiate-"))
    replay = replay_times(20, 50)
    async with bench_database("bench_negotiate") as db:
        conn = await asyncpg.connect(db.dsn)
        await conn.execute("SELECT mycelium.create_room($1)", ROOM)
        await conn.execute("SELECT * FROM mycelium.create_engine($1, 'aligner', 'aligner', '', 'bench')", ROOM)
        raw = await raw_round_trip(db.dsn, 200)
        thread = await conn.fetchval("SELECT episode FROM mycelium.create_task($1, 'raw round trips', 'bench')", ROOM)
        raw_thread = await raw_round_trip(db.dsn, 200, thread)

        # (a) one negotiation to NEGMAS's deadline, one worker
        worker = start_worker(db.dsn, folder, "w0", args.moves)
        members = Members(db.dsn, ["ann", "bob"], None)
        stop = asyncio.Event()
        task = asyncio.create_task(members.run(stop))
        cpu0, db0 = cpu_seconds(worker.pid), server_cpu(db.postmaster)
        await negotiations(conn, 1, ["ann", "bob"], "alone")
        await wait_moves(conn, 2, 600)  # the opening and the first round
        cpu1, db1 = cpu_seconds(worker.pid), server_cpu(db.postmaster)
        await wait_closed(conn, 1, 600)
        moves_a = await conn.fetchval("SELECT count(*) FROM mycelium.engine_trace")
        cpu2, db2 = cpu_seconds(worker.pid), server_cpu(db.postmaster)
        cpu_a, db_a = (cpu2 - cpu1) / (moves_a - 2), (db2 - db1) / (moves_a - 2)
        whole_a = ((cpu2 - cpu0) / moves_a, (db2 - db0) / moves_a)
        outcome_a = await conn.fetchval("SELECT state || ': ' || reason FROM mycelium.engine_runs")
        single = list(members.latency)
        stop.set()
        await task
        worker.terminate()
        worker.wait(timeout=30)
        raw += await raw_round_trip(db.dsn, 200)  # the limit on both sides of (a): the load moves
        raw_thread += await raw_round_trip(db.dsn, 200, thread)

        # (b) many at once, two workers
        workers = [start_worker(db.dsn, folder, f"w{i + 1}", 20) for i in range(2)]
        members_b = Members(db.dsn, ["cy", "dee"], 10)
        stop_b = asyncio.Event()
        task_b = asyncio.create_task(members_b.run(stop_b))
        cpus = [cpu_seconds(p.pid) for p in workers]
        started = time.perf_counter()
        await negotiations(conn, args.runs, ["cy", "dee"], "crowd")
        await wait_closed(conn, 1 + args.runs, 900)
        elapsed = time.perf_counter() - started
        stop_b.set()
        await task_b
        moves_b = await conn.fetchval("SELECT count(*) FROM mycelium.engine_trace WHERE run_id > 1")
        converged = await conn.fetchval(
            "SELECT count(*) FROM mycelium.engine_runs WHERE id > 1 AND state = 'converged'")
        dup = await conn.fetchval(
            "SELECT count(*) FROM (SELECT run_id, turn FROM mycelium.engine_posts WHERE event = 'turn' "
            "GROUP BY 1, 2 HAVING count(*) > 1) d")
        cpu_b = sum(cpu_seconds(p.pid) - c for p, c in zip(workers, cpus, strict=True)) / max(moves_b, 1)
        for p in workers:
            p.terminate()
            p.wait(timeout=30)
        await conn.close()

    raw_ms = statistics.median(raw) * 1000
    raw_thread_ms = statistics.median(raw_thread) * 1000
    move_ms = statistics.median(single) * 1000
    rows = [
        ["raw post -> await round trip, room channel", f"{raw_ms:.1f}", f"{pct(raw, 0.99):.1f}", "-", "-", len(raw)],
        ["raw post -> await round trip, task thread (the limit)", f"{raw_thread_ms:.1f}", f"{pct(raw_thread, 0.99):.1f}",
         "-", "-", len(raw_thread)],
        [f"(a) one aligner move, 1 worker ({outcome_a.split(':')[0]} at NEGMAS's deadline)", f"{move_ms:.1f}",
         f"{pct(single, 0.99):.1f}", f"{cpu_a * 1000:.1f}", f"{db_a * 1000:.1f}", len(single)],
        [f"(b) {args.runs} negotiations at once, 2 workers", f"{statistics.median(members_b.latency) * 1000:.1f}",
         f"{pct(members_b.latency, 0.99):.1f}", f"{cpu_b * 1000:.1f}", "-", len(members_b.latency)],
        ["(c) replay of a 20-move log into a fresh SAOMechanism", f"{statistics.median(replay) * 1000:.1f}",
         f"{pct(replay, 0.99):.1f}", "-", "-", len(replay)],
    ]
    text = (f"## Negotiations on workers (`bench/negotiate.py`) — {stamp()}\n\n{machine()}; PostgreSQL "
            "embedded; NEGMAS 0.16; members are asyncpg connections replying with move markers through "
            "`mycelium.reply`, woken by `mycelium_wakes`; no model (markers need none).\n\n"
            + table(["path", "p50 ms", "p99 ms", "worker CPU ms/move", "database CPU ms/move", "samples"], rows)
            + "\n\nThe raw round trip is measured before (a) and again after it (200 hops each). "
            f"(a): {moves_a} moves (the opening and {args.moves} rounds); the CPU per move is over "
            f"rounds 2 to {args.moves} (the close and its record included), the worker's with NEGMAS's step and "
            "the loop's polling while it waits; over the whole run, NEGMAS's import and the opening included: "
            f"worker {whole_a[0] * 1000:.1f}, database {whole_a[1] * 1000:.1f} ms/move. "
            f"(b): {moves_b} moves in {elapsed:.1f} s = {moves_b / elapsed:.1f} moves/s; {converged} of "
            f"{args.runs} converged at their 10th round; questions posted twice: {dup}. A move's latency is from "
            "the member's reply committing to the next question in a member's hands.\n\n"
            f"Against issue 11's targets: the negotiation's overhead per move (a move's latency less the raw "
            f"round trip in a thread, which a move's question and reply are) is {move_ms - raw_thread_ms:.1f} ms = "
            f"{(move_ms - raw_thread_ms) / raw_thread_ms:.1f}x that round trip at p50 (target ≤ 3x; a whole move is "
            f"{move_ms / raw_thread_ms:.1f}x it, {move_ms / raw_ms:.1f}x the channel's); the replay of a 20-move negotiation takes {statistics.median(replay) * 1000:.1f} ms "
            f"(target ≤ 50 ms). Load average when it ended: {os.getloadavg()[0]:.1f} on this shared machine.\n")
    print(text)
    if not args.no_write:
        write_section("negotiate", text)


if __name__ == "__main__":
    asyncio.run(main())
