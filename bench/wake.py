"""Wake latency: a message posted -> the ``await`` it is addressed to returns, through the HTTP API
of a real hub process, at 100 and 1,000 messages/s offered; beside it, in the same run, the limit:
a raw LISTEN/NOTIFY round trip between two connections at the same rates.

Agents (64 handles by default) each hold one long-poll ``GET /await`` open and re-issue it as soon as
it returns. A sender offers messages on a fixed schedule (open loop: a late send does not push the
next one back), each a direct message to the next agent in turn, through ``POST /messages``. The
latency of a message is from just before its POST is written to the moment its await's response is
read. A third row posts through the SQL verb (``mycelium.post_message``) instead, to separate the
cost of the POST from the wake path.

The client speaks plain HTTP/1.1 over keep-alive sockets (a few lines below), so the numbers measure
the hub rather than a client library; hub, client and PostgreSQL share the machine's cores.

    python bench/wake.py                     # 100/s, 300/s and 1,000/s, 5 s each, 3 runs
    python bench/wake.py --seconds 3 --runs 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from mycelium.db.pool import setup_connection
from mycelium.db.queries import query
from tests.support.processes import HubProcess, free_port


def room_name(i: int) -> str:
    return f"bench{i}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()  # fields from the 3rd (state) on


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by process ``root`` and every descendant, including children that
    have exited and been reaped (a PostgreSQL backend that ended is counted by its postmaster)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_proc_stat(int(entry.name))[1])
            except (OSError, ValueError, IndexError):
                continue
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = _proc_stat(pid)
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15 if pid == root else 13]) / _TICK
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


class Http:
    """One keep-alive HTTP/1.1 connection: a request at a time, JSON in and out."""

    def __init__(self, host: str, port: int, headers: dict[str, str] | None = None) -> None:
        self.host, self.port = host, port
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        payload = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(payload)}\r\n"
                + self.extra + ("Content-Type: application/json\r\n" if payload else "") + "\r\n")
        for _attempt in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            self.writer.write(head.encode() + payload)
            try:  # the status line and headers in one read (the client's CPU is the machine's too)
                header = await self.reader.readuntil(b"\r\n\r\n")
                break
            except asyncio.IncompleteReadError:  # the server closed an idle keep-alive connection
                self.writer.close()
                self.reader = self.writer = None
        else:
            raise ConnectionError(f"{method} {path}: the server closed the connection twice")
        assert self.reader is not None
        at = header.lower().find(b"\r\ncontent-length:")
        length = int(header[at + 17:header.index(b"\r\n", at + 2)]) if at >= 0 else 0
        data = await self.reader.readexactly(length)
        return int(header[9:12]), json.loads(data) if data else None


class Pool:
    """Keep-alive connections handed out one request at a time."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.free: asyncio.Queue[Http] = asyncio.Queue()
        for _ in range(size):
            self.free.put_nowait(Http(host, port))

    async def request(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        conn = await self.free.get()
        try:
            return await conn.request(method, path, body)
        finally:
            self.free.put_nowait(conn)


async def offer(rate: float, seconds: float, send: Callable[[int], Awaitable[None]]) -> float:
    """Call ``send(i)`` on a fixed schedule of ``rate`` per second; returns the achieved rate."""
    n = int(rate * seconds)
    tasks = []
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(i)))
    await asyncio.gather(*tasks)
    return n / (time.perf_counter() - start)


async def wake_run(url: str, conn: asyncpg.Pool, rate: float, seconds: float, agents: int,
                   via_sql: bool, tag: str, rooms: int = 1,
                   cpu_roots: tuple[int | None, int | None] = (None, None)) -> dict[str, float]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    # agent i waits in room i % rooms; message i goes to agent i % agents
    handles = [(room_name(i % rooms), f"{tag}{i}") for i in range(agents)]
    sent: dict[str, float] = {}
    latencies: list[float] = []
    post_times: list[float] = []
    expected = int(rate * seconds)
    all_in = asyncio.Event()
    stop = False

    async def agent(room: str, handle: str) -> None:
        http = Http(host, port)
        query = urlencode({"handle": handle, "timeout": 5})
        while not stop:
            status, answer = await http.request("GET", f"/api/rooms/{room}/await?{query}")
            arrived = time.perf_counter()
            assert status == 200, answer
            message = answer["message"]  # type: ignore[index]
            if message is None:
                continue
            latencies.append(arrived - sent[message["content"]])
            if len(latencies) >= expected:
                all_in.set()

    waiting = [asyncio.create_task(agent(room, h)) for room, h in handles]
    posts = Pool(host, port, 64)
    await asyncio.gather(*(posts.request("GET", "/health") for _ in range(64)))  # open the connections
    await asyncio.sleep(1.0)  # every agent is waiting

    async def send(i: int) -> None:
        content = f"{tag}-{i}"
        sent[content] = time.perf_counter()
        room, to = handles[i % agents]
        if via_sql:
            await conn.execute("SELECT id FROM mycelium.post_message($1, 'sender', $2, NULL, ARRAY[$3])",
                               room, content, to)
            return
        status, body = await posts.request("POST", f"/api/rooms/{room}/messages", {
            "sender_handle": "sender", "recipient_handle": to, "message_type": "direct", "content": content})
        post_times.append(time.perf_counter() - sent[content])
        assert status == 201, body

    hub_pid, pg_pid = cpu_roots
    before = (tree_cpu(hub_pid) if hub_pid else 0.0, tree_cpu(pg_pid) if pg_pid else 0.0, time.process_time())
    achieved = await offer(rate, seconds, send)
    await asyncio.wait_for(all_in.wait(), timeout=60)
    after = (tree_cpu(hub_pid) if hub_pid else 0.0, tree_cpu(pg_pid) if pg_pid else 0.0, time.process_time())
    stop = True
    for w in waiting:
        w.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    per_message = [(b - a) * 1000 / max(len(latencies), 1) for a, b in zip(before, after, strict=True)]
    return {"p50": pct(latencies, 0.50) * 1000, "p99": pct(latencies, 0.99) * 1000, "rate": achieved,
            "n": len(latencies), "post_p50": pct(post_times, 0.5) * 1000 if post_times else 0.0,
            "cpu_hub": per_message[0], "cpu_pg": per_message[1], "cpu_client": per_message[2]}


async def notify_run(dsn: str, rate: float, seconds: float) -> dict[str, float]:
    listener = await asyncpg.connect(dsn)
    sender = await asyncpg.create_pool(dsn, min_size=8, max_size=8)
    sent: dict[str, float] = {}
    latencies: list[float] = []
    expected = int(rate * seconds)
    all_in = asyncio.Event()

    def heard(_c: object, _pid: int, _channel: str, payload: str) -> None:
        latencies.append(time.perf_counter() - sent[payload])
        if len(latencies) >= expected:
            all_in.set()

    await listener.add_listener("bench_wake", heard)

    async def send(i: int) -> None:
        sent[str(i)] = time.perf_counter()
        await sender.execute("SELECT pg_notify('bench_wake', $1)", str(i))

    try:
        achieved = await offer(rate, seconds, send)
        await asyncio.wait_for(all_in.wait(), timeout=60)
    finally:
        await listener.close()
        await sender.close()
    return {"p50": pct(latencies, 0.50) * 1000, "p99": pct(latencies, 0.99) * 1000, "rate": achieved,
            "n": len(latencies)}


async def one_connection(dsn: str, n: int, run: int) -> dict[str, tuple[float, float, float]]:
    """The database's share of one message, back to back on one connection (as the hub's pool
    connection runs it): the post, the look that delivers it, a look that finds nothing, and a one-row
    insert as the floor of any synchronous commit. Per call: server CPU of that backend (us), this
    client's CPU (us), median latency (ms)."""
    conn = await asyncpg.connect(dsn)
    backend = conn.get_server_pid()
    room, table = f"floor-{run}", f"public.commit_floor_{run}"

    async def commit(_i: int) -> None:
        await conn.execute(f"INSERT INTO {table} VALUES (1)")

    await conn.execute(f"CREATE TABLE {table} (x int)")  # the owner's, timed before becoming the app
    out = {"commit": await _timed(backend, n, commit)}
    await setup_connection(conn, "mycelium_app")
    await conn.execute("SELECT mycelium.create_room($1)", room)
    handles = [f"f{i}" for i in range(64)]
    post, take = query("post_message").sql, query("take_next").sql

    async def send(i: int) -> None:
        await conn.fetchrow(post, room, "sender", f"floor-{i}", None, [handles[i % 64]], "exchange", None,
                            "message", {"message_type": "direct"}, [], "agent")

    async def look(i: int) -> None:
        await conn.fetchrow(take, room, handles[i % 64], None, 5.0)

    for i in range(200):  # warm the plans and caches; every handle has a cursor
        await send(i)
        await look(i)
    for label, step in (("post", send), ("take", look), ("empty_take", look)):
        out[label] = await _timed(backend, n, step)
    await conn.close()
    return out


async def _timed(backend: int, n: int, step: Callable[[int], Awaitable[None]]) -> tuple[float, float, float]:
    server, client, latencies = tree_cpu(backend), time.process_time(), []
    for i in range(n):
        start = time.perf_counter()
        await step(i)
        latencies.append(time.perf_counter() - start)
    return ((tree_cpu(backend) - server) * 1e6 / n, (time.process_time() - client) * 1e6 / n,
            statistics.median(latencies) * 1000)


class FloorProcess:
    """``bench/wake_floor.py``: the bare stack serving the same routes, in a process of its own."""

    def __init__(self, dsn: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        script = Path(__file__).resolve().parent / "wake_floor.py"
        self.proc = subprocess.Popen([sys.executable, str(script), "--database-url", dsn, "--port", str(self.port)])

    async def wait_ready(self) -> None:
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the bare stack exited with {self.proc.returncode}")
            try:
                status, _ = await Http("127.0.0.1", self.port).request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError("the bare stack did not answer /health")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


async def run(args: argparse.Namespace) -> None:
    async with bench_database("bench_wake") as (dsn, postmaster):
        await measure(args, dsn, postmaster)


async def measure(args: argparse.Namespace, dsn: str, postmaster: int | None) -> None:
    conn = await asyncpg.create_pool(dsn, min_size=8, max_size=8)
    for i in range(max(args.spread, 1)):
        await conn.execute("SELECT mycelium.create_room($1)", room_name(i))
    hub_dir = Path(tempfile.mkdtemp(prefix="mycelium-bench-hub-"))
    hub = HubProcess(data_dir=hub_dir / "data", database_url=dsn,
                     extra=["--no-mirror", "--log-level", "warning", "--workers", str(args.workers)],
                     env={"MYCELIUM_POOL_MAX_SIZE": "20", "MYCELIUM_POOL_MIN_SIZE": "10"})
    floor = FloorProcess(dsn)
    paths: list[tuple[str, str, int]] = [
        ("LISTEN/NOTIFY round trip (the limit)", "notify", 1),
        ("bare stack: Litestar + uvicorn + asyncpg, one INSERT + NOTIFY, one cursor UPDATE", "floor", 1),
        ("POST /messages -> await returns, one room", "http", 1),
        ("post_message in SQL -> await returns, one room", "sql", 1),
    ]
    if args.spread > 1:
        paths.append((f"POST /messages -> await returns, {args.spread} rooms", "http", args.spread))
    results: dict[tuple[str, int, float], list[dict[str, float]]] = {}
    loads = [os.getloadavg()[0]]
    try:
        hub.wait_ready()
        await floor.wait_ready()
        await wake_run(hub.url, conn, 100, 1, args.agents, False, "warm")  # warm the pool and caches
        await wake_run(floor.url, conn, 100, 1, args.agents, False, "warm")
        for run_no in range(args.runs):
            for rate in args.rates:
                for _, path, rooms in paths:
                    tag = f"r{run_no}x{int(rate)}{path}{rooms}"
                    if path == "notify":
                        outcome = await notify_run(dsn, rate, args.seconds)
                    elif path == "floor":
                        outcome = await wake_run(floor.url, conn, rate, args.seconds, args.agents, False, tag,
                                                 rooms, (floor.proc.pid, postmaster))
                    else:
                        outcome = await wake_run(hub.url, conn, rate, args.seconds, args.agents, path == "sql",
                                                 tag, rooms, (hub.proc.pid, postmaster))
                    results.setdefault((path, rooms, rate), []).append(outcome)
                    loads.append(os.getloadavg()[0])
                    print(f"run {run_no + 1} {path:>6} x{rooms} {rate:>6.0f}/s  p50 {outcome['p50']:8.2f} ms  "
                          f"p99 {outcome['p99']:8.2f} ms  achieved {outcome['rate']:7.1f}/s  "
                          f"(POST p50 {outcome.get('post_p50', 0):.2f} ms; CPU ms/message hub "
                          f"{outcome.get('cpu_hub', 0):.2f} pg {outcome.get('cpu_pg', 0):.2f} "
                          f"client {outcome.get('cpu_client', 0):.2f})", flush=True)
        hub.stop()
        floor.stop()
        floors = [await one_connection(dsn, args.floor_calls, r) for r in range(args.runs)]
        for f in floors:
            print("one connection: " + ", ".join(f"{k} {v[0]:.0f} us server / {v[1]:.0f} us client / {v[2]:.2f} ms"
                                                 for k, v in f.items()), flush=True)
    finally:
        hub.stop()
        shutil.rmtree(hub_dir, ignore_errors=True)
        floor.stop()
        await conn.close()

    def cpu(runs: list[dict[str, float]]) -> str:
        if "cpu_hub" not in runs[0] or postmaster is None:
            return ""
        parts = [statistics.median(r[k] for r in runs) for k in ("cpu_hub", "cpu_pg", "cpu_client")]
        return f"{sum(parts):.2f} ({parts[0]:.2f} / {parts[1]:.2f} / {parts[2]:.2f})"

    rows = []
    for rate in args.rates:
        for label, path, rooms in paths:
            runs = results[(path, rooms, rate)]
            achieved = statistics.median(r["rate"] for r in runs)
            rows.append([label, f"{rate:,.0f}/s", f"{achieved:,.0f}/s" + (" (saturated)" if achieved < 0.95 * rate else ""),
                         f"{statistics.median(r['p50'] for r in runs):.2f}",
                         f"{statistics.median(r['p99'] for r in runs):.2f}",
                         " / ".join(f"{r['p99']:.1f}" for r in runs), cpu(runs)])
    budget = [r["cpu_hub"] + r["cpu_pg"] + r["cpu_client"]
              for rate in args.rates for r in results[("http", 1, rate)] if postmaster is not None]
    cores = os.cpu_count() or 1
    hubs = "One hub process" if args.workers == 1 else f"One hub with {args.workers} worker processes"
    markdown = "\n".join([
        "## Wake latency: post -> await returns",
        "",
        f"`python bench/wake.py --seconds {args.seconds:g} --runs {args.runs} --agents {args.agents} "
        f"--spread {args.spread} --workers {args.workers}` ({stamp()}; {machine()}). {hubs} "
        "(`mycelium up`, pool 20 each) on the "
        f"embedded PostgreSQL (fsync on); {args.agents} agents each hold a long-poll `GET /await` and re-issue "
        "it on return; messages are offered open-loop on a fixed schedule, each a direct message to the next "
        "agent. Latency = from just before the POST is written to the await's response being read. Medians "
        "over the runs; the last column lists every run's p99. The client is a plain keep-alive HTTP/1.1 "
        "socket per agent. The machine's 2 cores are shared by the hub, the client, PostgreSQL and other "
        f"processes on the machine, so expect noise: the 1-minute load average during this run went from "
        f"{min(loads):.1f} to {max(loads):.1f} (median {statistics.median(loads):.1f}).",
        "",
        table(["path", "offered", "achieved", "p50 ms", "p99 ms", "p99 per run ms",
               "CPU ms per message (hub / PostgreSQL / client)"], rows),
        "",
        "The bare stack row (`bench/wake_floor.py`) runs the same client and workload against a minimal "
        "Litestar app served as `mycelium up` serves the hub (uvicorn with uvloop and httptools, an asyncpg pool "
        "of 20, one LISTEN connection fanning out in-process): the POST is one INSERT into a bare table with a "
        "pg_notify in the same statement, the await one UPDATE of the handle's cursor RETURNING the next row, "
        "waiting on an in-process event when there is none; no write gate, search document, mentions or "
        "presence. Its first CPU figure is that process's. It is what this stack carries on these cores; the "
        "hub's rows read against it.",
        "",
        "Targets: p50 <= 5 ms and p99 <= 25 ms at 100/s; p99 <= 50 ms at 1,000/s (HTTP rows). A saturated row "
        "could not take the offered rate: its latency is queueing time and grows with the run's length.",
        "",
        "CPU per message: CPU time the hub process(es), the PostgreSQL server (every backend, the WAL writer, "
        "...) and this client used during the row, divided by the messages delivered; every message costs a "
        "POST, an await response and the re-issued await in the hub, an insert and one or two looks at the "
        "inbox in PostgreSQL, and the client's own share."
        + (f" Over the one-room HTTP rows the median is {statistics.median(budget):.2f} ms, so the machine's "
           f"{cores} cores, with nothing else running, could carry at most ~{cores * 1000 / statistics.median(budget):,.0f}"
           " messages/s through this path; a p99 within 50 ms needs the cores well short of full."
           if budget else ""),
        "",
        f"The database's share, back to back on one connection once the hub has stopped ({args.floor_calls:,} calls "
        "each, median of the runs; server CPU is that backend's, from /proc):",
        "",
        table(["call", "server CPU us", "client CPU us", "latency p50 ms"], [
            [label, *(f"{statistics.median(f[key][i] for f in floors):{fmt}}" for i, fmt in
                      ((0, ".0f"), (1, ".0f"), (2, ".2f")))]
            for key, label in (("post", "post_message (the POST's insert, triggers, search document; synchronous commit)"),
                               ("take", "take_next that delivers (cursor moved; synchronous commit)"),
                               ("empty_take", "take_next that finds nothing (asynchronous commit)"),
                               ("commit", "one-row INSERT (the floor of a synchronous commit)"))]),
    ])
    print(markdown)
    if args.write:
        write_section("wake", markdown)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", type=float, nargs="+", default=[100, 300, 1000])
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--agents", type=int, default=64)
    p.add_argument("--spread", type=int, default=8, help="also run the HTTP path over this many rooms")
    p.add_argument("--workers", type=int, default=1, help="hub worker processes (`mycelium up --workers`)")
    p.add_argument("--floor-calls", type=int, default=1000, help="calls per row of the one-connection table")
    p.add_argument("--no-write", dest="write", action="store_false", help="do not update BENCHMARKS.md")
    asyncio.run(main_async(p.parse_args()))


async def main_async(args: argparse.Namespace) -> None:
    await run(args)


if __name__ == "__main__":
    main()
