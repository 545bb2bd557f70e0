"""Runners: a message addressed to an idle handle -> its agent process running, beside, in the same
run, the bare ``fork+exec`` of the same command from this process (the limit).

The agent is ``python -S -c`` that writes ``time.monotonic()`` as its first instruction; the clock is
CLOCK_MONOTONIC, shared by the processes. A wake's latency is from just before the POST that
addresses the handle is written to that first instruction: the POST, the commit (whose trigger
writes the job), the hint, the worker's claim, the fork+exec and the interpreter's start. The bare
row is the fork+exec and the interpreter's start alone. One hub process (``mycelium up``, its
``runners`` loop claiming), PostgreSQL (embedded unless ``DATABASE_URL``) and this client share the
machine's cores. Wakes are one at a time: the next is sent once the previous job has ended.

    python bench/runners.py                 # 100 wakes, 3 runs
    python bench/runners.py --wakes 30 --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from tests.support.processes import HubProcess
from wake import Pool, pct, tree_cpu

ROOM = "bench"
FIRST = "import sys, time; t = time.monotonic(); open(sys.argv[1], 'a').write(repr(t) + chr(10))"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def lines(path: Path) -> list[float]:
    return [float(x) for x in path.read_text().split()] if path.exists() else []


async def wake_row(http: Pool, hub: HubProcess, record: Path, wakes: int, postmaster: int | None) -> dict[str, float]:
    seen, latencies = len(lines(record)), []
    cpu0 = tree_cpu(hub.proc.pid) + (tree_cpu(postmaster) if postmaster else 0.0)
    for n in range(wakes):
        t0 = time.monotonic()
        status, _ = await http.request("POST", f"/api/rooms/{ROOM}/messages",
                                       {"sender_handle": "alice", "content": f"@idle wake {n}"})
        assert status == 201, status
        while True:  # its first instruction has written its line
            got = lines(record)
            if len(got) > seen:
                break
            await asyncio.sleep(0.0005)
        seen = len(got)
        latencies.append((got[-1] - t0) * 1000)
        while True:  # the job ends (the agent exits) before the next wake: the handle is idle again
            status, body = await http.request("GET", f"/api/rooms/{ROOM}/jobs?limit=1")
            if body[0]["state"] not in ("queued", "running"):  # type: ignore[index]
                break
            await asyncio.sleep(0.002)
    cpu = tree_cpu(hub.proc.pid) + (tree_cpu(postmaster) if postmaster else 0.0) - cpu0
    return {"p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99), "cpu_ms": cpu * 1000 / wakes}


def bare_row(argv: list[str], record: Path, starts: int) -> dict[str, float]:
    latencies = []
    cpu0 = children_cpu()
    for _ in range(starts):
        t0 = time.monotonic()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        latencies.append((lines(record)[-1] - t0) * 1000)
    return {"p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99),
            "cpu_ms": (children_cpu() - cpu0) * 1000 / starts}


async def measure(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    folder = Path(tempfile.mkdtemp(prefix="mycelium-bench-runners-"))
    record, bare = folder / "woken.txt", folder / "bare.txt"
    rows: dict[str, list[dict[str, float]]] = {"wake": [], "bare": []}
    async with bench_database("bench_runners") as db:
        hub = HubProcess(data_dir=folder / "hub", database_url=db.dsn, extra=["--no-mirror"],
                         env={"MYCELIUM_SLIM": "off", "MYCELIUM_MIGRATE_ON_START": "false"})
        try:
            hub.wait_ready()
            http = Pool("127.0.0.1", hub.port, 4)
            status, _ = await http.request("POST", "/api/rooms", {"name": ROOM})
            assert status == 201, status
            runner = {"handle": "idle", "command": [sys.executable, "-S", "-c", FIRST, str(record)],
                      "created_by": "bench", "max_turns_per_room": 1_000_000}
            status, body = await http.request("POST", f"/api/rooms/{ROOM}/runners", runner)
            assert status == 201, body
            await wake_row(http, hub, record, 5, db.postmaster)  # warm up
            bare_row([sys.executable, "-S", "-c", FIRST, str(bare)], bare, 5)
            for _ in range(args.runs):
                rows["wake"].append(await wake_row(http, hub, record, args.wakes, db.postmaster))
                rows["bare"].append(bare_row([sys.executable, "-S", "-c", FIRST, str(bare)], bare, args.wakes))
        finally:
            hub.stop()
    return rows


def report(args: argparse.Namespace, rows: dict[str, list[dict[str, float]]]) -> None:
    names = {"wake": "message to an idle handle -> its agent's first instruction (cold start)",
             "bare": "bare fork+exec of the same command -> its first instruction (the limit)"}
    medians: dict[str, dict[str, float]] = {}
    out = []
    for key, runs in rows.items():
        m = {k: statistics.median(r[k] for r in runs) for k in ("p50", "p99", "cpu_ms")}
        medians[key] = m
        out.append([names[key], f"{m['p50']:.1f}", f"{m['p99']:.1f}",
                    " / ".join(f"{r['p50']:.1f}" for r in runs), f"{m['cpu_ms']:.1f}"])
    wake, bare = medians["wake"], medians["bare"]
    target = 1.5 * bare["p50"] + 50
    text = f"""## Runners: cold start (`bench/runners.py`) — {stamp()}

`python bench/runners.py --wakes {args.wakes} --runs {args.runs}` ({machine()}). One hub process
(`mycelium up`, its `runners` loop claiming), PostgreSQL ({'at DATABASE_URL' if os.environ.get('DATABASE_URL') else 'embedded, fsync on'})
and the client share the cores. The agent is `python -S -c` writing `time.monotonic()` as its first
instruction. A wake is timed from just before the POST addressing the handle is written; the bare
row from just before this process forks. Wakes go one at a time (the next once the job has ended).
Medians over the runs.

{table(["path", "p50 ms", "p99 ms", "p50 per run ms",
        "CPU ms per start (wake: hub with its agents + PostgreSQL; bare: the child)"], out)}

A cold start's p50 is {wake['p50']:.1f} ms against {bare['p50']:.1f} ms for the bare fork+exec: the hub adds
{wake['p50'] - bare['p50']:.1f} ms (the POST and its commit, the hint, the claim under the runner's row lock, the
pid's record). Target: at most 1.5x the bare start plus 50 ms = {target:.1f} ms: {'met' if wake['p50'] <= target else 'NOT met'}
at p50{', and at p99 (' + format(wake['p99'], '.1f') + ' ms)' if wake['p99'] <= 1.5 * bare['p99'] + 50 else ''}.
"""
    print(text)
    if not args.no_write:
        write_section("runners", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wakes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    report(args, asyncio.run(measure(args)))


if __name__ == "__main__":
    main()
