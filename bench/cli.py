"""The CLI's start-up: what one ``mycelium`` call costs the machine, beside the floors under it.

Agents shell out to ``mycelium await`` and ``mycelium respond`` in loops, so each call's process
time is paid per turn. Measured here, each command a fresh process as an agent starts it, the
variants interleaved round-robin (so load on the machine hits them alike):

* ``python -c pass``: the interpreter and ``site`` alone (this venv's Python);
* the floor of one request: ``GET /health`` with ``http.client`` (the standard library), and with
  ``httpx`` (``import httpx`` included), from ``python -c``;
* ``mycelium --help``; ``mycelium respond`` (a reply posted into the room); ``mycelium await`` (a
  direct message is waiting for the handle, posted by this script before each call, so the await
  returns at once: start-up, one long-poll answered, exit).

The hub is a real ``mycelium up`` process on a database of the bench's own (embedder off, no
mirror). Process time is user + system CPU of the child from ``os.wait4``; wall time is from just
before the spawn to the reaped exit. Medians and p90 over the repetitions. The children may write
and use compiled bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped), as an installed package's
modules have it; the warm-up calls write it.

``--compare LABEL=SRC`` also runs the three ``mycelium`` commands from another source tree (the
``service/`` folder of an older checkout, on ``PYTHONPATH``), interleaved with the rest, so a change
is measured against what it replaced under the same load.

    python bench/cli.py                  # 40 repetitions of each, after 3 to warm up
    python bench/cli.py --reps 10 --no-write
    python bench/cli.py --compare 6f8fbdb=/tmp/old/service
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from tests.support.processes import HubProcess

ROOM = "bench-cli"
MYCELIUM = str(Path(sys.executable).with_name("mycelium"))

STDLIB_GET = (
    "import http.client, sys, urllib.parse; u = urllib.parse.urlsplit(sys.argv[1]); "
    "c = http.client.HTTPConnection(u.hostname, u.port); c.request('GET', '/health'); "
    "assert c.getresponse().read()"
)
HTTPX_GET = "import httpx, sys; assert httpx.get(sys.argv[1] + '/health').status_code == 200"
ENTRY = "import sys; from mycelium.cli.main import main; sys.exit(main())"  # what the mycelium script runs


def run_once(argv: list[str], env: dict[str, str] | None) -> tuple[float, float]:
    """(process CPU ms, wall ms) of one command, which must exit 0."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited with {proc.returncode}: {err}")
    return (usage.ru_utime + usage.ru_stime) * 1000, wall * 1000


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


async def run(args: argparse.Namespace) -> None:
    async with bench_database("bench_cli") as (dsn, _postmaster):
        measure(args, dsn)


def measure(args: argparse.Namespace, dsn: str) -> None:
    hub_dir = Path(tempfile.mkdtemp(prefix="mycelium-bench-hub-"))
    hub = HubProcess(data_dir=hub_dir / "data", database_url=dsn, extra=["--no-mirror", "--log-level", "warning"])
    env = {**os.environ, "MYCELIUM_API_URL": hub.url, "MYCELIUM_ROOM": ROOM}
    for name in ("PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)  # modules run from their compiled bytecode, as an installed package's do
    http = httpx.Client(base_url=hub.url, timeout=30)

    def mail_for_waiter() -> None:
        r = http.post(f"/api/rooms/{ROOM}/messages", json={
            "sender_handle": "bench", "recipient_handle": "waiter", "message_type": "direct",
            "content": "your turn"})
        assert r.status_code == 201, r.text

    commands: list[tuple[str, list[str], object]] = [
        ("`mycelium --help`", ["--help"], None),
        ("`mycelium respond` (one reply posted)", ["respond", "--handle", "replier", "done"], None),
        ("`mycelium await` (a message is waiting)", ["await", "--handle", "waiter", "--timeout", "30"],
         mail_for_waiter),
    ]
    variants: list[tuple[str, list[str], object, dict[str, str] | None]] = [
        ("`python -c pass` (the interpreter)", [sys.executable, "-c", "pass"], None, None),
        ("GET /health with http.client (the floor of a request)", [sys.executable, "-c", STDLIB_GET, hub.url],
         None, None),
        ("GET /health with httpx", [sys.executable, "-c", HTTPX_GET, hub.url], None, None),
        *[(label, [MYCELIUM, *argv], before, None) for label, argv, before in commands],
    ]
    for compare in args.compare:
        name, src = compare.split("=", 1)
        old = {**env, "PYTHONPATH": str(Path(src).resolve())}
        variants += [(f"{label}, {name}", [sys.executable, "-c", ENTRY, *argv], before, old)
                     for label, argv, before in commands]
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label, *_ in variants}
    loads = [os.getloadavg()[0]]
    try:
        hub.wait_ready()
        assert http.post("/api/rooms", json={"name": ROOM}).status_code == 201
        for rep in range(args.warmup + args.reps):
            for label, argv, before, own_env in variants:
                if callable(before):
                    before()
                got = run_once(argv, own_env or env)
                if rep >= args.warmup:
                    samples[label].append(got)
            loads.append(os.getloadavg()[0])
    finally:
        http.close()
        hub.stop()
        shutil.rmtree(hub_dir, ignore_errors=True)

    floor = statistics.median(cpu for cpu, _ in samples[variants[1][0]])
    rows = []
    for label, *_ in variants:
        cpu = [c for c, _ in samples[label]]
        wall = [w for _, w in samples[label]]
        rows.append([label, f"{statistics.median(cpu):.0f}", f"{p90(cpu):.0f}", f"{statistics.median(wall):.0f}",
                     f"{p90(wall):.0f}", f"{statistics.median(cpu) / floor:.2f}×"])
        print(f"{label:<60} CPU {statistics.median(cpu):6.1f} ms (p90 {p90(cpu):6.1f})   "
              f"wall {statistics.median(wall):6.1f} ms (p90 {p90(wall):6.1f})", flush=True)
    compared = "".join(
        f" The rows ending “{c.split('=')[0]}” run the same commands from that source tree, interleaved with"
        " the rest."
        for c in args.compare)
    text = f"""## CLI start-up (`bench/cli.py`)

`python bench/cli.py --reps {args.reps}{"".join(f" --compare '{c.split('=')[0]}=…'" for c in args.compare)}` ({stamp()}; {machine()}). Each command is a fresh process, as
an agent's shell starts it, against a real hub (`mycelium up`, embedder off, no mirror) on this
machine; the variants run interleaved, {args.reps} times each after {args.warmup} to warm up. Process
time is the child's user + system CPU (`os.wait4`); wall is spawn to reaped exit. The 1-minute load
average went from {loads[0]:.1f} to {loads[-1]:.1f} (median {statistics.median(loads):.1f}).

{table(["command", "process CPU ms (median)", "p90", "wall ms (median)", "p90", "CPU vs the http.client floor"],
       rows)}

Target: `mycelium --help`, `respond` and `await` in at most 150 ms of process time. The floor of a
CLI call is the interpreter plus one HTTP request made with the standard library; the HTTP verbs
add their own small modules and `argparse` to it and nothing else (`http.client`, not httpx:
`import httpx` alone costs more than the whole of `mycelium respond`, since with the hub's
dependencies installed it also loads `click`, `rich` and `pygments` for its own command line).
`mycelium --help` imports no command: the commands are listed from a table in `mycelium.cli.main`
and only the one run is imported.{compared}
"""
    print(text)
    if args.write:
        write_section("cli", text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=SRC",
                   help="also run the mycelium commands from this source tree (its service/ folder)")
    p.add_argument("--no-write", dest="write", action="store_false", help="do not update BENCHMARKS.md")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
