"""The board under contention: 32 agents claim -> resolve 1,000 rows, through the SQL functions
directly and through the HTTP API of a real hub process, in the same run.

Each agent walks the rows in its own random order and tries to claim every row it has not seen
resolved; a 409 (someone else holds it) sends it to the next row, a 200 is followed by a resolve.
All agents work one room, so every claim and resolve also appends its notice to that room's
timeline. Reported per path: cycles/s (rows resolved / wall time), p50/p99 latency of claim calls
(refused ones included), refused claims, and double claims, counted from the database afterwards:
a row whose timeline shows a second ``claimed`` while an earlier claim was neither resolved nor
released.

Two SQL paths: the verbs called the way the hub calls them (its named queries on a pool of
``--pool`` connections the agents share, 8 by default, the hub's own pool size here too: the wake
hints come back with the result and are sent after the commit, batched on one connection, as the
hub's listener does), and plain calls as a person in psql makes them (one connection per agent; the
triggers NOTIFY inside the transaction). Next to them, the floors: the commit latency of a one-row write on one connection
(a room's writers commit one after another, so one room can do at most 1 / that transactions/s),
transactions that only append one notice, a bare ``SELECT 1`` from 32 connections, and a one-query
read (``GET /assignments/<key>``) through the same hub. The HTTP client is a plain keep-alive
HTTP/1.1 socket per agent (bench/wake.py), so the numbers measure the hub, not a client library.

Throughput moves with whatever else runs on the machine, so each path is also reported as CPU per
cycle (with the embedded server): the server's (postmaster and children, from /proc), this
process's and, for HTTP, the hub process's; the machine's cores divided by their sum is the rate
an otherwise idle machine would allow. And one agent's calls are timed back to back, nobody else
(no queue; HTTP on one keep-alive connection): median latency of a claim and of a resolve, and CPU
per cycle over that loop.

    python bench/board.py                    # 1,000 rows, 32 agents, 3 runs per path
    python bench/board.py --rows 300 --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from mycelium.db.listener import Listener
from mycelium.db.pool import create_pool
from mycelium.db.queries import query
from mycelium.errors import Refusal
from mycelium.verbs import Actor, Verbs
from mycelium.verbs.gateway import bind
from tests.support.processes import HubProcess
from transitions import CpuProbe
from wake import Http, tree_cpu


class Share(NamedTuple):
    """One call back to back on one connection: median latency (s), median backend CPU (µs)."""

    seconds: float
    cpu_us: float


Claim = Callable[[str, str], Awaitable[bool]]  # ("<room> <key>", handle)
Resolve = Callable[[str, str], Awaitable[None]]
CORES = os.cpu_count() or 1


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def work(rows: list[str], agents: int, claim: Claim, resolve: Resolve, seed: int) -> dict[str, float]:
    """Run the agents to completion; wall time, claim latencies and refusals."""
    done: set[str] = set()
    latencies: list[float] = []
    refused = 0

    async def agent(i: int) -> None:
        nonlocal refused
        order = rows[:]
        random.Random(seed * 1000 + i).shuffle(order)
        while len(done) < len(rows):
            progressed = False
            for key in order:
                if key in done:
                    continue
                t0 = time.perf_counter()
                ok = await claim(key, f"agent{i}")
                latencies.append(time.perf_counter() - t0)
                if not ok:
                    refused += 1
                    continue
                await resolve(key, f"agent{i}")
                done.add(key)
                progressed = True
            if not progressed:
                await asyncio.sleep(0.001)

    start = time.perf_counter()
    await asyncio.gather(*(agent(i) for i in range(agents)))
    wall = time.perf_counter() - start
    return {"wall": wall, "cycles_s": len(rows) / wall, "p50_ms": pct(latencies, 0.5) * 1000,
            "p99_ms": pct(latencies, 0.99) * 1000, "refused": refused, "claims": len(latencies)}


async def one_connection(conn: asyncpg.Connection, prefix: str, n: int, claim: Claim, resolve: Resolve,
                         probe: CpuProbe, hub_pid: int) -> dict[str, float]:
    """One agent, back to back, nobody else: median latency of a claim and of a resolve, CPU per
    cycle of the server, this process and the hub over the loop."""
    rows = await file_rows(conn, prefix, n, 1)
    claims, resolves = [], []
    hub0 = tree_cpu(hub_pid)
    probe.start()
    for row in rows:
        t0 = time.perf_counter()
        assert await claim(row, "solo")
        t1 = time.perf_counter()
        await resolve(row, "solo")
        claims.append(t1 - t0)
        resolves.append(time.perf_counter() - t1)
    server_us, client_us = probe.per_cycle(n)
    return {"claim_ms": statistics.median(claims) * 1000, "resolve_ms": statistics.median(resolves) * 1000,
            "server_us": server_us if server_us is not None else float("nan"), "client_us": client_us or 0.0,
            "hub_us": (tree_cpu(hub_pid) - hub0) / n * 1e6}


async def double_claims(conn: asyncpg.Connection, room: str) -> int:
    """Rows whose timeline shows a claim while an earlier one was still open."""
    rows = await conn.fetch(
        "SELECT payload->>'key' AS key, payload->>'subkind' AS s FROM mycelium.messages"
        " WHERE room = $1 AND payload_type = 'notice' AND payload->>'subkind' IN ('claimed', 'released', 'resolved')"
        " ORDER BY position", room)
    open_claim: dict[str, bool] = {}
    doubles = 0
    for r in rows:
        if r["s"] == "claimed":
            if open_claim.get(r["key"]):
                doubles += 1
            open_claim[r["key"]] = True
        else:
            open_claim[r["key"]] = False
    return doubles


async def file_rows(conn: asyncpg.Connection, prefix: str, n: int, rooms: int) -> list[str]:
    """n rows spread over ``rooms`` rooms; a row is named '<room> <key>'."""
    names = [f"{prefix}-{j}" for j in range(rooms)]
    for name in names:
        await conn.execute("SELECT mycelium.create_room($1)", name)
    out = []
    for i in range(n):
        room = names[i % rooms]
        out.append(room + " " + await conn.fetchval("SELECT key FROM mycelium.create_task($1, $2, 'bench')",
                                                    room, f"row {i}"))
    return out


async def select1_rate(pool: asyncpg.Pool, agents: int, calls: int) -> float:
    async def one() -> None:
        for _ in range(calls // agents):
            await pool.fetchval("SELECT 1")
    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(agents)))
    return calls / (time.perf_counter() - start)


async def notice_rate(pool: asyncpg.Pool, conn: asyncpg.Connection, prefix: str, rooms: int, agents: int,
                      calls: int, hints: Listener) -> float:
    """Transactions/s that do nothing but append one notice to a room's timeline (what every claim
    and every resolve must also do), over the same number of rooms, hints sent as the hub sends them."""
    names = [f"{prefix}-{j}" for j in range(rooms)]
    for name in names:
        await conn.execute("SELECT mycelium.create_room($1)", name)

    async def one(i: int) -> None:
        for _ in range(calls // agents):
            hints.hint(await pool.fetchval(
                "SELECT current_setting('mycelium.wake_hints', true)"
                " FROM mycelium.post_notice(mycelium.defer_wakes($1), 'claimed', 'work/x')", names[i % rooms]))
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(agents)))
    return calls / (time.perf_counter() - start)


def backend_cpu_us(pid: int) -> float:
    """CPU time one server process has used so far, in µs (its scheduler statistics count nanoseconds,
    fine enough to time a single call)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e3


async def each_call(conn: asyncpg.Connection, calls: int, step: Callable[[int], Awaitable[object]]) -> Share:
    """Back to back on one connection: median latency (s) and median CPU of its backend (µs) per call.
    Medians of single calls, so a burst of other work on the machine moves them little."""
    backend = conn.get_server_pid()
    times, cpu = [], []
    for i in range(calls):
        c0, t0 = backend_cpu_us(backend), time.perf_counter()
        await step(i)
        times.append(time.perf_counter() - t0)
        cpu.append(backend_cpu_us(backend) - c0)
    return Share(statistics.median(times), statistics.median(cpu))


async def serial_notice(conn: asyncpg.Connection, room: str, calls: int) -> Share:
    """A notice-only transaction on one connection, back to back (no queue)."""
    await conn.execute("SELECT mycelium.create_room($1)", room)
    notice = ("SELECT current_setting('mycelium.wake_hints', true)"
              " FROM mycelium.post_notice(mycelium.defer_wakes($1), 'claimed', 'work/x')")
    return await each_call(conn, calls, lambda _i: conn.fetchval(notice, room))


async def commit_floor(conn: asyncpg.Connection, calls: int) -> Share:
    """A one-row INSERT committed on one connection (the WAL flush on this disk)."""
    await conn.execute("CREATE TABLE IF NOT EXISTS bench_commit (x integer)")
    return await each_call(conn, calls, lambda i: conn.execute("INSERT INTO bench_commit VALUES ($1)", i))


async def database_share(conn: asyncpg.Connection, prefix: str, n: int) -> dict[str, Share]:
    """The database's share of a cycle: the hub's claim and resolve queries on one connection, back
    to back, nobody else; latency and CPU of that one backend per call (not the whole server's)."""
    rows = [row.split(" ", 1) for row in await file_rows(conn, prefix, 2 * n, 1)]
    claim, resolve, solo = query("claim_task"), query("resolve_task"), Actor("solo")

    def statements(room: str, key: str) -> list[tuple[str, str, list[object]]]:
        """The gateway's statements for one cycle, as a hub with a listener runs them."""
        common = {"room": room, "key": key, "handle": "solo"}
        return [("claim", claim.sql, bind(claim, solo, True, {**common, "ttl_minutes": 30, "force": False})),
                ("resolve", resolve.sql, bind(resolve, solo, True, common))]

    for room, key in rows[:n]:  # warm the plans and caches
        for _verb, sql, args in statements(room, key):
            await conn.fetchrow(sql, *args)
    timed = rows[n:]
    times: dict[str, list[float]] = {"claim": [], "resolve": []}
    cpu: dict[str, list[float]] = {"claim": [], "resolve": []}
    backend = conn.get_server_pid()
    for room, key in timed:
        for verb, sql, args in statements(room, key):
            c0, t0 = backend_cpu_us(backend), time.perf_counter()
            await conn.fetchrow(sql, *args)
            times[verb].append(time.perf_counter() - t0)
            cpu[verb].append(backend_cpu_us(backend) - c0)
    return {verb: Share(statistics.median(times[verb]), statistics.median(cpu[verb])) for verb in times}


async def read_rate(url: str, path: str, agents: int, calls: int) -> float:
    """Calls/s of a one-query read through the hub, ``agents`` keep-alive connections."""
    parts = urlsplit(url)
    clients = [Http(parts.hostname or "127.0.0.1", parts.port or 80) for _ in range(agents)]

    async def one(http: Http) -> None:
        for _ in range(calls // agents):
            status, _body = await http.request("GET", path)
            assert status == 200, status
    start = time.perf_counter()
    await asyncio.gather(*(one(http) for http in clients))
    return calls / (time.perf_counter() - start)


async def run(args: argparse.Namespace) -> None:
    async with bench_database("bench_board") as (dsn, postmaster):
        await measure(args, dsn, postmaster)


async def measure(args: argparse.Namespace, dsn: str, postmaster: int | None) -> None:
    conn = await asyncpg.connect(dsn)
    # the hub's own pool (its codecs, its app role, and no session reset on release); the agents'
    # own connections keep their sessions too, as a psql session does
    pool = await create_pool(dsn, role="mycelium_app", min_size=args.pool, max_size=args.pool)
    own = await create_pool(dsn, role=None, min_size=args.agents, max_size=args.agents)  # one per agent
    hints = Listener(dsn)  # the SQL path sends its hints as a hub process does
    await hints.start()
    hub_dir = Path(tempfile.mkdtemp(prefix="mycelium-bench-hub-"))
    hub = HubProcess(data_dir=hub_dir / "data", database_url=dsn,
                     extra=["--no-mirror", "--log-level", "warning", *args.hub_args],
                     env={"MYCELIUM_POOL_MAX_SIZE": str(args.pool),
                          "MYCELIUM_POOL_MIN_SIZE": str(min(4, args.pool))})
    layouts = [1, args.spread] if args.spread > 1 else [1]
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    floors: dict[str, list[float]] = {"sql": [], "http": []}
    shares: dict[str, list[Share]] = {"claim": [], "resolve": [], "notice": [], "commit": []}
    probe = CpuProbe(postmaster)
    serial: dict[str, list[dict[str, float]]] = {}
    notices: dict[int, list[float]] = {}
    loads = [os.getloadavg()[0]]
    try:
        hub.wait_ready()
        host, port = urlsplit(hub.url).hostname or "127.0.0.1", urlsplit(hub.url).port or 80
        clients: dict[str, Http] = {}

        def client(who: str) -> Http:
            if who not in clients:
                clients[who] = Http(host, port)
            return clients[who]

        async def sql_call(query: str, row: str, who: str, *more: object, via: asyncpg.Pool = pool) -> bool:
            room, key = row.split(" ", 1)
            try:
                found = await via.fetchrow(query, room, key, who, *more)
            except asyncpg.PostgresError as exc:
                if exc.sqlstate != "MY409":
                    raise
                return False
            hints.hint(found.get("wake_hints"))
            return True

        verbs = Verbs(pool, hints.hint)  # the hub's gateway: the actor declared, the hints sent

        async def sql_claim(row: str, who: str) -> bool:
            room, key = row.split(" ", 1)
            try:
                await verbs.call(Actor(who), "claim_task", room=room, key=key, handle=who, ttl_minutes=30,
                                 force=False)
            except Refusal as refused:
                if refused.status != 409:
                    raise
                return False
            return True

        async def sql_resolve(row: str, who: str) -> None:
            room, key = row.split(" ", 1)
            await verbs.call(Actor(who), "resolve_task", room=room, key=key, handle=who)

        async def plain_claim(row: str, who: str) -> bool:
            return await sql_call("SELECT * FROM mycelium.claim_task($1, $2, $3)", row, who, via=own)

        async def plain_resolve(row: str, who: str) -> None:
            await sql_call("SELECT * FROM mycelium.resolve_task($1, $2, $3)", row, who, via=own)

        async def http_claim(row: str, who: str) -> bool:
            room, key = row.split(" ", 1)
            status, body = await client(who).request(
                "POST", f"/api/rooms/{room}/assignments/claim", {"key": key, "handle": who})
            if status == 409:
                return False
            assert status == 200, (status, body)
            return True

        async def http_resolve(row: str, who: str) -> None:
            room, key = row.split(" ", 1)
            status, body = await client(who).request(
                "POST", f"/api/rooms/{room}/assignments/resolve", {"key": key, "handle": who})
            assert status == 200, (status, body)

        paths = {"sql": (sql_claim, sql_resolve), "plain": (plain_claim, plain_resolve),
                 "http": (http_claim, http_resolve)}
        read_path = ""
        for r in range(args.runs):
            for rooms in layouts:
                for path, (claim, resolve) in paths.items():
                    prefix = f"{path}-{rooms}-{r}"
                    rows = await file_rows(conn, prefix, args.rows, rooms)
                    hub0 = tree_cpu(hub.proc.pid)
                    probe.start()
                    res = await work(rows, args.agents, claim, resolve, r)
                    res["server_us"], res["client_us"] = probe.per_cycle(len(rows))
                    res["hub_us"] = (tree_cpu(hub.proc.pid) - hub0) / len(rows) * 1e6 if path == "http" else 0
                    res["doubles"] = sum([await double_claims(conn, f"{prefix}-{j}") for j in range(rooms)])
                    results.setdefault((path, rooms), []).append(res)
                    loads.append(os.getloadavg()[0])
                    read_path = "/api/rooms/{}/assignments/{}".format(*rows[0].split(" ", 1))
                    print(f"run {r + 1}, {rooms} room(s), {path}: {res['cycles_s']:,.0f} cycles/s", flush=True)
                notices.setdefault(rooms, []).append(await notice_rate(
                    own, conn, f"notice-{rooms}-{r}", rooms, args.agents, args.floor_calls, hints))
            for path, (claim, resolve) in paths.items():
                serial.setdefault(path, []).append(await one_connection(
                    conn, f"one-{path}-{r}", args.serial_rows, claim, resolve, probe, hub.proc.pid))
            floors["sql"].append(await select1_rate(own, args.agents, args.floor_calls))
            floors["http"].append(await read_rate(hub.url, read_path, args.agents, args.floor_calls))
            shares["commit"].append(await commit_floor(conn, 300))
            shares["notice"].append(await serial_notice(conn, f"serial-{r}", 300))
            for verb, share in (await database_share(conn, f"share-{r}", args.serial_rows)).items():
                shares[verb].append(share)
    finally:
        hub.stop()
        shutil.rmtree(hub_dir, ignore_errors=True)
        await hints.stop()
        await pool.close()
        await own.close()
        await conn.close()

    def med(key: tuple[str, int], field: str) -> float:
        return statistics.median(x[field] for x in results[key])

    def us(value: float | None) -> str:
        return "n/a" if value is None or value != value else f"{value:,.0f}"

    def cpu_cells(runs: list[dict[str, float]], path: str) -> list[str]:
        """Server, client (+ hub) CPU µs per cycle, and the rate the cores allow at that cost."""
        server = [x["server_us"] for x in runs if x["server_us"] is not None and x["server_us"] == x["server_us"]]
        if not server:
            return ["n/a", us(statistics.median(x["client_us"] for x in runs)), "n/a"]
        server_us = statistics.median(server)
        client_us = statistics.median(x["client_us"] + x["hub_us"] for x in runs)
        client = us(client_us)
        if path == "http":
            client = (f"{client} (hub {us(statistics.median(x['hub_us'] for x in runs))}, "
                      f"client {us(statistics.median(x['client_us'] for x in runs))})")
        return [us(server_us), client, f"{CORES * 1e6 / (server_us + client_us):,.0f}"]

    labels = {"sql": "SQL functions, called as the hub calls them", "plain": "SQL functions, plain calls (psql)",
              "http": "HTTP API (one hub process)"}
    rows_out = []
    for rooms in layouts:
        for path in paths:
            key = (path, rooms)
            each = ", ".join(f"{x['cycles_s']:,.0f}" for x in results[key])
            rows_out.append([
                labels[path], str(rooms), f"**{med(key, 'cycles_s'):,.0f}** ({each})",
                *cpu_cells(results[key], path),
                f"{med(key, 'p50_ms'):.1f}", f"{med(key, 'p99_ms'):.1f}",
                f"{med(key, 'refused'):,.0f} / {med(key, 'claims'):,.0f}",
                str(sum(int(x["doubles"]) for x in results[key])),
            ])
    solo_out = []
    for path in paths:
        runs = serial[path]
        solo_out.append([labels[path], f"{statistics.median(x['claim_ms'] for x in runs):.2f}",
                         f"{statistics.median(x['resolve_ms'] for x in runs):.2f}", *cpu_cells(runs, path)])
    notice_floor = "; ".join(
        f"{rooms} room{'s' if rooms > 1 else ''}: {statistics.median(notices[rooms]):,.0f} notices/s "
        f"-> at most {statistics.median(notices[rooms]) / 2:,.0f} cycles/s" for rooms in layouts)
    def share(name: str) -> Share:
        return Share(statistics.median(x.seconds for x in shares[name]), statistics.median(x.cpu_us for x in shares[name]))

    commit_ms = share("commit").seconds * 1000
    serial_ms = share("notice").seconds * 1000
    cycle_cpu = share("claim").cpu_us + share("resolve").cpu_us
    share_rows = [[label, f"{share(name).cpu_us:,.0f}", f"{share(name).seconds * 1000:.2f}"] for name, label in (
        ("claim", "claim (the hub's named query; synchronous commit)"),
        ("resolve", "resolve (the same)"),
        ("notice", "a transaction that only appends one notice (each of the two also appends one)"),
        ("commit", "a one-row INSERT (the floor of a synchronous commit)"))]
    text = f"""## Board: claim -> resolve under contention

`python bench/board.py` — {stamp()}; {machine()}; PostgreSQL 18 embedded (synchronous_commit on).
{args.agents} agents, {args.rows:,} `work/` rows; each agent walks the rows in its own random order
and claims every row it has not seen resolved (409 -> next row; 200 -> resolve). Cycles/s = rows
resolved / wall time: median of {args.runs} runs (each run in brackets). The machine has {CORES} cores,
shared by the database, the hub process, this client and other processes on the machine: the
rates are noisy (1-minute load average from {min(loads):.1f} to {max(loads):.1f}, median
{statistics.median(loads):.1f}). CPU µs per cycle (claim + resolve) is read from /proc over each run:
"server" is PostgreSQL, "client" this process (the {args.agents} agents and their connections) plus,
for HTTP, the hub process; "cores allow" = {CORES} cores × 1 s / (server + client), the rate an
otherwise idle machine could carry at that cost.

{table(["path", "rooms", "cycles/s", "server CPU µs/cycle", "client CPU µs/cycle", "cores allow /s",
        "claim p50 ms", "claim p99 ms", "refused / claim calls", "double claims"], rows_out)}

The database's share of a cycle, one connection back to back, nobody else ({args.serial_rows} cycles after
as many to warm up, median of the runs): CPU of that one backend per call (from /proc, not the whole
server's), median of single calls. A claim and a resolve: {cycle_cpu:,.0f} µs of server CPU per cycle, so
the server alone could carry {CORES * 1e6 / cycle_cpu:,.0f} cycles/s on {CORES} cores.

{table(["call", "backend CPU µs", "latency p50 ms"], share_rows)}

One agent, calls back to back, nobody else (no queue) ({args.serial_rows} cycles per run, median of
{args.runs} runs):

{table(["path", "claim ms", "resolve ms", "server CPU µs/cycle", "client CPU µs/cycle", "cores allow /s"],
       solo_out)}

"Called as the hub calls them": the hub's named queries on the hub's pool (`mycelium.db.pool`: its
app role, no session reset on release) of {args.pool} server connections
shared by the {args.agents} agents (as a hub's pool is), whose wake hints come back with the result
and are sent after the commit, batched on one connection; "plain": the same verbs as psql calls
them, one connection per agent, whose triggers NOTIFY inside the transaction (so their commits also
queue on PostgreSQL's cluster-wide notify lock). HTTP: one hub process with a pool of {args.pool},
{args.agents} keep-alive connections. On {CORES} cores, {args.agents} busy backends cost more CPU per
cycle than {args.pool} doing the same work (see `--pool`).

The limits of this design, same run. A room's timeline positions are allocated under one counter
row that stays locked until the commit (gapless, commit-ordered positions), so in one room every
writer waits for the previous one to commit and release that row: one room's timeline takes one
transaction at a time, and a cycle is two of them. Back to back on one connection a notice-only
transaction takes {serial_ms:.2f} ms (~{1000 / serial_ms:,.0f}/s); with {args.agents} connections queueing on the row,
each hand-off also waits for the next backend to get one of these {CORES} busy cores. Transactions that
only append one notice ({args.agents} connections, median): {notice_floor}. (A one-row write commits in
{commit_ms:.2f} ms here, so the WAL flush itself is not the bound.)

Floor, same run (median): `SELECT 1` from {args.agents} pooled connections
{statistics.median(floors["sql"]):,.0f} calls/s; a one-query read (`GET /assignments/<key>`) through
the same hub {statistics.median(floors["http"]):,.0f} calls/s.

Double claims are counted from the timeline after each run (a second `claimed` for a row before
its `resolved` or `released`), summed over all runs. Spreading the same rows over {args.spread} rooms
shows what the lease logic does when that counter is not shared.
"""
    print(text)
    if args.write:
        write_section("board", text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--agents", type=int, default=32)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--floor-calls", type=int, default=3200)
    p.add_argument("--pool", type=int, default=8,
                   help="server connections the agents share when they call as the hub does, and the hub's pool")
    p.add_argument("--serial-rows", type=int, default=300, help="cycles of the one-connection timing per path")
    p.add_argument("--spread", type=int, default=8, help="also run with the rows spread over this many rooms")
    p.add_argument("--hub-args", nargs="*", default=[], help="extra arguments for `mycelium up`")
    p.add_argument("--no-write", dest="write", action="store_false", help="do not update BENCHMARKS.md")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
