"""Rooms as SLIM channels: a message posted over HTTP -> received by a member on the room's SLIM
channel, at 100 messages/s, beside, in the same run:

* the limit: a raw SLIM publish -> receive of a payload of the same size, a publisher process
  and a receiver in this one, through the same node, on an MLS group session as the hub's;
* the HTTP path the hub already had: the same POST -> a long-poll ``GET /await`` returning.

One hub process (``mycelium up``, the ``slim`` loop publishing), one SLIM node process
(``mycelium slim``), PostgreSQL (embedded unless ``DATABASE_URL``), and this client share the
machine's cores. Latency is from just before the POST is written (or the raw publish is called) to
the moment the receiver has the decoded message; clocks are CLOCK_MONOTONIC, shared by the processes.

    python bench/slim.py                    # 100/s, 5 s per row, 3 runs
    python bench/slim.py --seconds 3 --runs 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from tests.support.processes import CliProcess, HubProcess, free_port
from wake import Http, Pool, offer, pct, tree_cpu

ROOM = "bench"
RAW = "bench-raw"


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the raw limit: a publisher process ------------------------------------------------------------

async def raw_publisher(endpoint: str, rate: float, seconds: float, size: int) -> None:
    """Run as a child: invite the receiver, then publish ``rate``/s stamped payloads of ``size``."""
    from mycelium.slim import wire
    from mycelium.slim.runtime import bindings, connect, group_config

    slim = bindings()
    service, conn = await connect(endpoint, "bench-pub")
    name = slim.Name.from_string(wire.moderator_name(RAW))
    app = service.create_app_with_secret(name, wire.room_secret(wire.dev_secret(), RAW))
    await app.subscribe_async(name, conn)
    made = await app.create_session_async(group_config(), slim.Name.from_string(wire.channel_name(RAW)))
    await made.completion.wait_async()
    session = made.session
    receiver = slim.Name.from_string(wire.member_name(RAW, "receiver"))
    await app.set_route_async(receiver, conn)
    await (await session.invite_async(receiver)).wait_async()
    await asyncio.sleep(0.5)
    print("ready", flush=True)
    sys.stdin.readline()  # the receiver says go
    handles = []

    async def send(i: int) -> None:
        body = json.dumps({"i": i, "t": time.monotonic()})
        data = (body[:-1] + ', "pad": "' + "x" * max(0, size - len(body) - 11) + '"}').encode()
        handles.append(await session.publish_async(data, "bench", None))

    await offer(rate, seconds, send)
    for h in handles:
        await h.wait_async()
    print("done", flush=True)
    sys.stdin.readline()


async def raw_row(endpoint: str, rate: float, seconds: float, size: int, node_pid: int) -> dict[str, float]:
    from mycelium.slim import wire
    from mycelium.slim.runtime import bindings, connect
    from mycelium.slim.runtime import seconds as span

    slim = bindings()
    service, conn = await connect(endpoint, "bench-recv")
    name = slim.Name.from_string(wire.member_name(RAW, "receiver"))
    app = service.create_app_with_secret(name, wire.room_secret(wire.dev_secret(), RAW))
    await app.subscribe_async(name, conn)
    pub = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--raw-publisher", endpoint, "--rate", str(rate), "--seconds", str(seconds),
        "--size", str(size), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    session = await app.listen_for_session_async(span(20))
    assert pub.stdout is not None and pub.stdin is not None
    assert (await pub.stdout.readline()).strip() == b"ready"
    n = int(rate * seconds)
    latencies: list[float] = []
    cpu0 = (tree_cpu(pub.pid), tree_cpu(node_pid), self_cpu())
    pub.stdin.write(b"go\n")
    await pub.stdin.drain()
    while len(latencies) < n:
        msg = await session.get_message_async(span(10))
        body = json.loads(bytes(msg.payload))
        latencies.append((time.monotonic() - body["t"]) * 1000)
    cpu1 = (tree_cpu(pub.pid), tree_cpu(node_pid), self_cpu())
    pub.stdin.write(b"bye\n")
    await pub.stdin.drain()
    await pub.wait()
    used = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {"p50": statistics.median(latencies), "p99": pct(latencies, 0.99), "n": n,
            "cpu_ms": 1000 * sum(used) / n, "parts": [1000 * u / n for u in used]}


# -- the hub's rows ----------------------------------------------------------------------------------

async def slim_row(hub: HubProcess, http: Pool, rate: float, seconds: float, pids: tuple[int, int, int | None],
                   run: int) -> dict[str, float]:
    import mycelium.slim

    sent: dict[str, float] = {}
    latencies: list[float] = []
    posts: list[float] = []
    n = int(rate * seconds)
    async with mycelium.slim.join(ROOM, f"listener{run}", api_url=hub.url) as member:
        cpu0 = (tree_cpu(pids[0]), tree_cpu(pids[1]), tree_cpu(pids[2]) if pids[2] else 0.0, self_cpu())

        async def send(i: int) -> None:
            text = f"run{run} m{i}"
            sent[text] = time.monotonic()
            status, _ = await http.request("POST", f"/api/rooms/{ROOM}/messages",
                                           {"sender_handle": "bob", "content": text})
            posts.append((time.monotonic() - sent[text]) * 1000)
            assert status == 201, status

        async def receive() -> None:
            while len(latencies) < n:
                m = await member.next(20)
                if m["content"] in sent:
                    latencies.append((time.monotonic() - sent[m["content"]]) * 1000)

        receiving = asyncio.create_task(receive())
        await offer(rate, seconds, send)
        await receiving
        cpu1 = (tree_cpu(pids[0]), tree_cpu(pids[1]), tree_cpu(pids[2]) if pids[2] else 0.0, self_cpu())
    used = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {"p50": statistics.median(latencies), "p99": pct(latencies, 0.99), "n": n,
            "cpu_ms": 1000 * sum(used) / n, "parts": [1000 * u / n for u in used],
            "post_p50": statistics.median(posts)}


async def post_row(hub: HubProcess, rate: float, seconds: float, pids: tuple[int, int, int | None],
                   run: int) -> dict[str, float]:
    """A member posts over the channel and waits for the hub's answer (request/response over SLIM,
    one post at a time, at most ``rate`` a second)."""
    import mycelium.slim

    latencies: list[float] = []
    n = int(rate * seconds)
    async with mycelium.slim.join(ROOM, f"speaker{run}", api_url=hub.url) as member:
        cpu0 = (tree_cpu(pids[0]), tree_cpu(pids[1]), tree_cpu(pids[2]) if pids[2] else 0.0, self_cpu())
        for i in range(n):
            start = time.monotonic()
            await member.post(f"run{run} said {i}")
            latencies.append((time.monotonic() - start) * 1000)
            await asyncio.sleep(max(0.0, 1 / rate - (time.monotonic() - start)))
        cpu1 = (tree_cpu(pids[0]), tree_cpu(pids[1]), tree_cpu(pids[2]) if pids[2] else 0.0, self_cpu())
    used = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {"p50": statistics.median(latencies), "p99": pct(latencies, 0.99), "n": n,
            "cpu_ms": 1000 * sum(used) / n, "parts": [1000 * u / n for u in used]}


async def await_row(hub: HubProcess, http: Pool, rate: float, seconds: float,
                    pids: tuple[int, int, int | None], run: int) -> dict[str, float]:
    host, port = "127.0.0.1", hub.port
    agent = Http(host, port)
    handle = f"carol{run}"
    sent: dict[str, float] = {}
    latencies: list[float] = []
    n = int(rate * seconds)
    await agent.request("GET", f"/api/rooms/{ROOM}/await?handle={handle}&timeout=0.01")  # its cursor: now
    cpu0 = (tree_cpu(pids[0]), tree_cpu(pids[1]), tree_cpu(pids[2]) if pids[2] else 0.0, self_cpu())

    async def receive() -> None:
        while len(latencies) < n:
            status, body = await agent.request("GET", f"/api/rooms/{ROOM}/await?handle={handle}&timeout=20")
            assert status == 200, (status, body)
            text = body["message"]["content"] if isinstance(body, dict) and body.get("message") else None
            if text in sent:
                latencies.append((time.monotonic() - sent[text]) * 1000)

    async def send(i: int) -> None:
        text = f"@{handle} run{run} m{i}"
        sent[text] = time.monotonic()
        status, _ = await http.request("POST", f"/api/rooms/{ROOM}/messages",
                                       {"sender_handle": "bob", "content": text})
        assert status == 201, status

    receiving = asyncio.create_task(receive())
    await offer(rate, seconds, send)
    await receiving
    cpu1 = (tree_cpu(pids[0]), tree_cpu(pids[1]), tree_cpu(pids[2]) if pids[2] else 0.0, self_cpu())
    used = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {"p50": statistics.median(latencies), "p99": pct(latencies, 0.99), "n": n,
            "cpu_ms": 1000 * sum(used) / n, "parts": [1000 * u / n for u in used]}


async def measure(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="mycelium-bench-slim-"))
    listen = f"127.0.0.1:{free_port()}"
    endpoint = f"http://{listen}"
    async with bench_database("bench_slim") as db:
        node = CliProcess(["slim", "--listen", listen], folder / "node.log", {})
        hub = HubProcess(data_dir=folder / "hub", database_url=db.dsn, extra=["--no-mirror"],
                         env={"MYCELIUM_SLIM": "on", "MYCELIUM_SLIM_ENDPOINT": endpoint,
                              "MYCELIUM_SLIM_SERVE": "false", "MYCELIUM_MIGRATE_ON_START": "false"})
        try:
            hub.wait_ready()
            http = Pool("127.0.0.1", hub.port, 8)
            status, _ = await http.request("POST", "/api/rooms", {"name": ROOM})
            assert status == 201, status
            pids = (hub.proc.pid, node.proc.pid, db.postmaster)
            # the size of what the hub publishes for one of these posts, for the raw row
            import mycelium.slim

            async with mycelium.slim.join(ROOM, "sizer", api_url=hub.url) as member:
                await http.request("POST", f"/api/rooms/{ROOM}/messages", {"sender_handle": "bob", "content": "x"})
                sample = await member.next(20)
            from mycelium.slim import wire

            size = len(wire.encode("message", room=ROOM, position=sample["position"], message=sample))
            rows: dict[str, list[dict[str, float]]] = {"raw": [], "slim": [], "await": [], "post": []}
            for run in range(args.runs):
                rows["raw"].append(await raw_row(endpoint, args.rate, args.seconds, size, node.proc.pid))
                rows["slim"].append(await slim_row(hub, http, args.rate, args.seconds, pids, run))
                rows["await"].append(await await_row(hub, http, args.rate, args.seconds, pids, run))
                rows["post"].append(await post_row(hub, args.rate, args.seconds / 2, pids, run))
        finally:
            hub.stop()
            node.stop()
    report(args, rows, size)


def report(args: argparse.Namespace, rows: dict[str, list[dict[str, float]]], size: int) -> None:
    names = {"raw": "raw SLIM publish -> receive, MLS group (the limit)",
             "slim": "POST /messages -> received on the room's SLIM channel",
             "await": "POST /messages -> GET /await returns (HTTP path)",
             "post": "a member's post over SLIM -> the hub's answer back (one at a time)"}
    out = []
    medians = {}
    for key, runs in rows.items():
        p50 = statistics.median(r["p50"] for r in runs)
        p99 = statistics.median(r["p99"] for r in runs)
        cpu = statistics.median(r["cpu_ms"] for r in runs)
        parts = [statistics.median(r["parts"][i] for r in runs) for i in range(len(runs[0]["parts"]))]
        medians[key] = p50
        split = " / ".join(f"{p:.2f}" for p in parts)
        out.append([names[key], f"{args.rate:g}/s", f"{p50:.2f}", f"{p99:.2f}",
                    " / ".join(f"{r['p99']:.1f}" for r in runs), f"{cpu:.2f} ({split})"])
    ratio = medians["slim"] / medians["raw"]
    post = statistics.median(r["post_p50"] for r in rows["slim"])
    added = medians["slim"] - post
    text = f"""## Rooms as SLIM channels (`bench/slim.py`) — {stamp()}

`python bench/slim.py --seconds {args.seconds:g} --runs {args.runs} --rate {args.rate:g}` ({machine()}). One hub
process (`mycelium up`, the `slim` loop publishing the room), one SLIM node process (`mycelium slim`),
PostgreSQL ({'at DATABASE_URL' if os.environ.get('DATABASE_URL') else 'embedded, fsync on'}) and the client
share the cores. Messages are offered open loop at the rate; latency is from just before the POST is
written (the raw row: the publish is called) to the receiver holding the decoded message. Payloads of
the raw row are {size} bytes, the size of the hub's frame for these posts. Medians over the runs.

{table(["path", "offered", "p50 ms", "p99 ms", "p99 per run ms",
        "CPU ms per message (raw: publisher / node / receiver; else hub / node / PostgreSQL / client)"], out)}

The hub's p50, end to end, is {ratio:.1f}x the raw SLIM p50 (target: at most 2x). It includes the
POST itself (its 201 came back after {post:.2f} ms p50: HTTP, the write gate, the commit); what the
channel adds after the commit is at most {added:.2f} ms p50 ({added / medians["raw"]:.1f}x the raw hop): the
commit's wake hint, one read of the timeline, the frame, and the hop through the node.

The last row is request/response over the channel, where the bindings' sockets without TCP_NODELAY
(slim-bindings 3.3.8 has no option for it) can cost a delayed-ACK wait per change of direction.
The hub does not wait on the node's delivery confirmations before publishing the next messages
(they come some 40 ms after a publish for the same reason): it records a batch's position once
they have come, behind the stream.
"""
    print(text)
    if not args.no_write:
        write_section("slim", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--size", type=int, default=600)
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    parser.add_argument("--raw-publisher", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_publisher:
        asyncio.run(raw_publisher(args.raw_publisher, args.rate, args.seconds, args.size))
        return
    os.environ.setdefault("MYCELIUM_EMBEDDER", "none")
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
