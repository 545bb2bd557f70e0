"""What the token gate and row-level security cost: the board's claim -> resolve cycle and an await
delivery (a message posted -> the ``await`` it is addressed to returns), through the HTTP API of a
real hub process, with the gate off and on, in the same run and on the same database.

Gated, every request carries a bearer JWT (HS256, a configured issuer) that the hub verifies, the
gateway declares the principal in each statement's transaction, and PostgreSQL filters every read of
a room's tables through its policies (the room is private; the agent is its owner). Open, none of
that happens (the default). The rounds alternate (open, gated, open, gated …), each a fresh hub
process on the same database, so a host that gets busier mid-run weighs on both alike.

Reported per variant: median latency per cycle, and CPU per cycle — the hub process, the database
server (postmaster and children, from /proc) and this client — whose sum does not depend on how busy
the machine is. Target (issue: identity and trust): at most 15 % more CPU per cycle gated.

    python bench/auth.py                     # 400 cycles per round, 2 rounds per variant
    python bench/auth.py --cycles 100 --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import jwt

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from tests.support.processes import HubProcess
from transitions import CpuProbe
from wake import Http, tree_cpu

ISSUER = "https://bench.example"
SECRET = "bench secret, long enough for HS256 keys"
ROOM = "vault"


def token(handle: str) -> str:
    now = int(time.time())
    return jwt.encode({"iss": ISSUER, "aud": "mycelium", "handle": handle, "role": "agent", "iat": now,
                       "exp": now + 3600}, SECRET, algorithm="HS256")


async def round_of(dsn: str, postmaster: int | None, gated: bool, cycles: int) -> dict[str, dict[str, float]]:
    admin = await asyncpg.connect(dsn)
    await admin.execute("SELECT * FROM mycelium.write_setting('auth.gate', 'false', '', 'bench')")
    env = {"MYCELIUM_EMBEDDER": "none"}
    if gated:
        env |= {"MYCELIUM_AUTH": "on", "MYCELIUM_AUTH_ISSUERS": json.dumps([
            {"issuer": ISSUER, "audience": "mycelium", "algorithms": ["HS256"], "secret": SECRET,
             "handle_claim": "handle"}])}
    hub = HubProcess(data_dir=Path(tempfile.mkdtemp(prefix="mycelium-bench-auth-")) / "data", database_url=dsn,
                     extra=["--no-mirror", "--log-level", "warning"], env=env)
    try:
        hub.wait_ready()
        parts = urlsplit(hub.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80

        def client(handle: str) -> Http:
            return Http(host, port, {"Authorization": f"Bearer {token(handle)}"} if gated else None)

        alice, bob = client("alice"), client("bob")
        keys = [await admin.fetchval("SELECT key FROM mycelium.create_task($1, $2, 'bench')", ROOM,
                                     f"row {time.time_ns()} {i}") for i in range(cycles + 20)]

        async def board(i: int) -> None:
            status, body = await alice.request("POST", f"/api/rooms/{ROOM}/assignments/claim",
                                               {"key": keys[i], "handle": "alice"})
            assert status == 200, body
            status, body = await alice.request("POST", f"/api/rooms/{ROOM}/assignments/resolve",
                                               {"key": keys[i], "handle": "alice"})
            assert status == 200, body

        async def delivery(i: int) -> None:
            status, body = await alice.request("POST", f"/api/rooms/{ROOM}/messages",
                                               {"sender_handle": "alice", "content": f"ping {i} @bob"})
            assert status == 201, body
            status, body = await bob.request("GET", f"/api/rooms/{ROOM}/await?handle=bob&timeout=5")
            assert status == 200 and body["prompt"] == f"ping {i} @bob", body  # type: ignore[index]

        out: dict[str, dict[str, float]] = {}
        for name, step, offset in (("board", board, 20), ("await", delivery, 0)):
            for i in range(10):  # warm-up: connections, prepared statements
                await step(cycles + i if name == "board" else 10_000 + i)
            probe = CpuProbe(postmaster)
            hub0 = tree_cpu(hub.proc.pid)
            probe.start()
            laps = []
            for i in range(cycles):
                t0 = time.perf_counter()
                await step(i if name == "board" else i + offset)
                laps.append(time.perf_counter() - t0)
            server_us, client_us = probe.per_cycle(cycles)
            out[name] = {"ms": statistics.median(laps) * 1000, "hub_us": (tree_cpu(hub.proc.pid) - hub0) / cycles * 1e6,
                         "server_us": server_us or 0.0, "client_us": client_us or 0.0}
        return out
    finally:
        hub.stop()
        await admin.close()


async def run(args: argparse.Namespace) -> None:
    results: dict[tuple[str, bool], list[dict[str, float]]] = {}
    async with bench_database("bench_auth") as (dsn, postmaster):
        admin = await asyncpg.connect(dsn)
        await admin.execute("SELECT mycelium.create_room($1, NULL, NULL, false, 'alice', ARRAY['bob'])", ROOM)
        await admin.close()
        for r in range(args.rounds):
            for gated in (False, True):
                got = await round_of(dsn, postmaster, gated, args.cycles)
                for name, value in got.items():
                    results.setdefault((name, gated), []).append(value)
                print(f"round {r + 1}, {'gated' if gated else 'open'}: "
                      + ", ".join(f"{n} {v['ms']:.2f} ms, {v['hub_us'] + v['server_us'] + v['client_us']:.0f} µs CPU"
                                  for n, v in got.items()), flush=True)
    rows = []
    for name in ("board", "await"):
        best = {}
        for gated in (False, True):
            runs = results[(name, gated)]
            best[gated] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        cpu = {g: v["hub_us"] + v["server_us"] + v["client_us"] for g, v in best.items()}
        for gated in (False, True):
            v = best[gated]
            rows.append([name + (" (claim + resolve)" if name == "board" else " (post + await)"),
                         "gate on, RLS on" if gated else "gate off", f"{v['ms']:.2f}", f"{v['hub_us']:.0f}",
                         f"{v['server_us']:.0f}", f"{v['client_us']:.0f}", f"{cpu[gated]:.0f}",
                         f"{(cpu[True] / cpu[False] - 1) * 100:+.0f} %" if gated else "—"])
    report = table(["cycle", "variant", "median ms", "hub µs", "server µs", "client µs", "CPU µs/cycle",
                    "CPU vs open"], rows)
    print(report)
    if not args.no_write:
        write_section("auth", f"## The token gate and row-level security (`bench/auth.py`)\n\n"
                              f"{stamp()}; {machine()}; {args.cycles} cycles per round, {args.rounds} rounds per "
                              f"variant, medians of the rounds.\n\n{report}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
