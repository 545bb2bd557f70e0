"""Engines on workers: what one conductor step costs, beside a raw post -> await round trip in the
same run, and how many runs two `mycelium worker` processes carry at once.

(a) one run at a time on one worker process: a member replies, the worker reads the reply, takes
    the edge and posts the next question, the other member is woken by it. Per step: the latency
    from the reply's commit to the next question in the member's hands, and the worker's CPU
    (its /proc times over the steps). The limit: the same two members passing a message back and
    forth with nothing in between (post, the other's await wakes, it answers), in a task's thread as
    a step's question and reply are (and, beside it, in the room's channel). The engine's own
    overhead per step is a step's latency less that round trip. Both round trips are measured before
    (a) and again after it (200 hops each), on a machine whose load moves.
(b) 100 runs at once across 2 worker processes: steps per second, step latency p50/p99, and
    whether any question was posted twice; three times: with members answering their turns one at a
    time (one connection each, as before: the ~50 turns a member has open at once queue at the member,
    and that queue is part of the latency measured), then with members answering up to
    ``--member-conns`` turns at once (as many agents, or one agent's concurrent sessions, would),
    then with members that take ``--think`` seconds (0.5-1.5x, at random) to answer each turn, as
    agents whose models think do. In the first two every run is always waiting on someone at once,
    so the runs queue wherever the machine is slowest (2 cores carrying the members, the workers and
    the database): the latency there is 100 runs over the steps per second, whatever the engine
    does. With thinking members the hub carries the load 100 such runs offer, and the latency is
    the engine's under that load, once the start is past: 100 runs started at once are a burst (100
    run starts, 100 first questions, their answers within the same second), so each variant's
    latency is also given after each run's first three turns. Beside them, (b) with no engine: the
    same runs relayed by two
    processes with nothing in between (a read and a post per step), with members answering at once
    (bounded the same way) and with thinking members.
    Beside each, the hub's side alone, from the database's own timestamps: from a reply's insert to
    the insert of the next question the conductor posted in its thread (it leaves out the member's
    take and answer, and the question's commit).

Members are asyncpg connections here (one LISTEN connection per process of members, as the hub's
`await` has), replying through the database's own verbs. CPU per step: the workers' (their /proc
times) and the database server's (the postmaster and its backends; embedded server only).
``--rooms N`` spreads (b)'s runs over N rooms (round robin; the default, 1, keeps every run in one
room, as before): a room's messages take their positions one transaction at a time (its position
counter row is locked from a message's insert to its commit), so the rooms show what that costs.
``python bench/engines.py [--runs 100] [--member-conns 8] [--rooms 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds of the database server: the postmaster, its backends, and those that exited."""
    if postmaster is None:
        return 0.0
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                child = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if int(child[1]) == postmaster:
                    total += (int(child[11]) + int(child[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Members:
    """Members answering every turn addressed to them, one LISTEN connection for all of them; each
    member is woken by the hints that name it, as the hub's ``await`` wakes only the waiters a hint
    concerns (until 2026-12-04 every member took on every hint, one wasted ``take_next`` per member
    and message: about 2 ms of the database's CPU per step).

    ``conns`` 1: each member takes a turn and answers it on one connection, one turn at a time.
    ``conns`` > 1: each member takes its turns on one connection and answers up to ``conns`` of them
    at once, each on a connection of its own."""

    def __init__(self, dsn: str, handles: list[str], conns: int = 1, rooms: tuple[str, ...] = (ROOM,),
                 addressed: bool = False, think: float = 0.0) -> None:
        self.dsn = dsn
        # think: each answer comes this many seconds on average (uniformly 0.5x-1.5x) after its turn
        # was taken, as an agent's model takes its time (with conns > 1; 0: at once)
        self.think = think
        # addressed: answer with post_message addressed to whoever asked (the relay, which reads its
        # replies with take_next), not with reply (addressed to the last message its member took)
        self.addressed = addressed
        self.asker: dict[str, str] = {}  # thread -> who asked its latest turn
        self.handles = handles
        self.conns = conns
        self.rooms = rooms
        self.sent: dict[tuple[str, int], float] = {}   # (thread, turn answered) -> when the reply committed
        self.latency: list[float] = []                  # reply committed -> next question taken
        self.turns: list[int] = []                      # the turn each latency took
        self._wakes = {h: asyncio.Event() for h in handles}

    async def run(self, stop: asyncio.Event) -> None:
        listen = await asyncpg.connect(self.dsn)

        def woke(_c: object, _pid: int, _channel: str, payload: str) -> None:
            named = payload.split("\t")[-1]
            for h, e in self._wakes.items():
                if named == "*" or h in named.split(","):
                    e.set()
        await listen.add_listener("mycelium_wakes", woke)
        try:
            await asyncio.gather(*(self._member(h, stop) for h in self.handles))
        finally:
            await listen.close()

    def _turn(self, row: asyncpg.Record) -> int | None:
        """The turn a taken message asks for (None: not a turn), its latency recorded."""
        if row["sender"] == "system":
            return None
        payload = json.loads(row["payload"]) if isinstance(row["payload"], str) else row["payload"]
        line = payload.get("conductor") or {}
        if line.get("event") != "turn":
            return None
        self.asker[row["episode"]] = row["sender"]
        before = self.sent.pop((row["episode"], line["turn"] - 1), None)
        if before is not None:
            self.latency.append(time.perf_counter() - before)
            self.turns.append(int(line["turn"]))
        return int(line["turn"])

    async def _answer(self, conn: asyncpg.Connection, handle: str, room: str, episode: str, turn: int) -> None:
        if self.addressed:
            await conn.execute("SELECT 1 FROM mycelium.post_message($1, $2, 'ok', $3, ARRAY[$4], 'exchange', NULL, "
                               "'reply')", room, handle, episode, self.asker[episode])
        else:
            await conn.execute("SELECT 1 FROM mycelium.reply($1, $2, 'ok', NULL, $3)", room, handle, episode)
        self.sent[(episode, turn)] = time.perf_counter()

    async def _take(self, conn: asyncpg.Connection, handle: str, start: int) -> tuple[asyncpg.Record | None, int]:
        """The next message for ``handle`` in its rooms, looked for from room ``start`` on (round
        robin, so no room starves), and the room to look in first next time."""
        for i in range(len(self.rooms)):
            at = (start + i) % len(self.rooms)
            row = await conn.fetchrow("SELECT * FROM mycelium.take_next($1, $2)", self.rooms[at], handle)
            if row is not None:
                return row, at + 1
        return None, start

    async def _member(self, handle: str, stop: asyncio.Event) -> None:
        work = await asyncpg.connect(self.dsn)
        answering = [await asyncpg.connect(self.dsn) for _ in range(self.conns if self.conns > 1 else 0)]
        free: asyncio.Queue[asyncpg.Connection] = asyncio.Queue()
        for c in answering:
            free.put_nowait(c)
        wake = self._wakes[handle]
        replies: set[asyncio.Task[None]] = set()

        thinking = random.Random(handle)

        async def answer(conn: asyncpg.Connection | None, room: str, episode: str, turn: int) -> None:
            if conn is None:  # think first, then take a connection to answer on
                await asyncio.sleep(self.think * thinking.uniform(0.5, 1.5))
                conn = await free.get()
            try:
                await self._answer(conn, handle, room, episode, turn)
            finally:
                free.put_nowait(conn)
        start = 0
        try:
            while not stop.is_set():
                conn = await free.get() if answering and not self.think else work
                wake.clear()
                row, start = await self._take(work, handle, start)
                turn = None if row is None else self._turn(row)
                if turn is None:
                    if answering and not self.think:
                        free.put_nowait(conn)
                    if row is None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(wake.wait(), 0.5)
                    continue
                if answering:
                    t = asyncio.create_task(answer(None if self.think else conn, row["room"], row["episode"], turn))
                    replies.add(t)
                    t.add_done_callback(replies.discard)
                else:
                    await self._answer(work, handle, row["room"], row["episode"], turn)
            await asyncio.gather(*replies)
        finally:
            for c in (work, *answering):
                await c.close()


async def raw_round_trip(dsn: str, hops: int, episode: str | None = None) -> list[float]:
    """Two members passing one message back and forth: post, the other's wake, its take; in the
    room's channel, or in a thread (``episode``: a task's, as a step's question and reply are, each
    with its ping in the channel and through the thread's write gate)."""
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
            await conns[me].execute("SELECT 1 FROM mycelium.post_message($1, $2, 'ping', $4, ARRAY[$3])",
                                    ROOM, me, other, episode)
            while (await conns[other].fetchrow("SELECT * FROM mycelium.take_next($1, $2)", ROOM, other)) is None:
                await asyncio.wait_for(woke.wait(), 5)
                woke.clear()
            out.append(time.perf_counter() - start)
            me, other = other, me
    finally:
        for c in (a, b, listen):
            await c.close()
    return out


class Relay:
    """(b) with no engine: the runs' turns passed on with nothing in between. Each run has a relay
    handle of its own; a member's reply, addressed to it, wakes it; it reads the reply in the run's
    thread after its question (as due_engine_runs reads a run's replies) and posts the next question
    to the other member there: one read and one ``post_message`` per step, no floor, trace or state.
    At most ``conns`` steps at once, as a worker moves ``MOVES_AT_ONCE`` runs at once."""

    def __init__(self, dsn: str, runs: list[tuple[str, str]], members: list[str], turns: int, conns: int,
                 first: int = 0) -> None:
        self.dsn = dsn
        self.runs = {f"relay{first + 2 * i}": (room, episode) for i, (room, episode) in enumerate(runs)}
        self.members = members
        self.turns = turns
        self.conns = conns
        self.turn = dict.fromkeys(self.runs, 0)
        self.asked = dict.fromkeys(self.runs, 0)  # the position of each run's latest question
        self.locks = {h: asyncio.Lock() for h in self.runs}
        self.done = asyncio.Event()

    async def _ask(self, conn: asyncpg.Connection, handle: str) -> None:
        room, episode = self.runs[handle]
        self.turn[handle] += 1
        turn = self.turn[handle]
        if turn > self.turns:
            if all(t > self.turns for t in self.turn.values()):
                self.done.set()
            return
        line = json.dumps({"conductor": {"event": "turn", "turn": turn}})
        self.asked[handle] = await conn.fetchval(
            "SELECT position FROM mycelium.post_message($1, $2, $3, $4, ARRAY[$5], 'exchange', NULL, 'message', "
            "$6::jsonb)", room, handle, f"turn {turn}: go", episode, self.members[(turn - 1) % len(self.members)], line)

    async def run(self) -> None:
        pool = await asyncpg.create_pool(self.dsn, min_size=self.conns, max_size=self.conns)
        listen = await asyncpg.connect(self.dsn)
        woken: asyncio.Queue[str] = asyncio.Queue()

        def hint(_c: object, _pid: int, _channel: str, payload: str) -> None:
            for h in payload.split("\t")[-1].split(","):
                if h in self.runs:
                    woken.put_nowait(h)
        await listen.add_listener("mycelium_wakes", hint)
        gate = asyncio.Semaphore(self.conns)
        moving: set[asyncio.Task[None]] = set()

        async def step(handle: str) -> None:
            async with gate, pool.acquire() as conn:
                room, episode = self.runs[handle]
                async with self.locks[handle]:  # one step of a run at a time (a second hint asks nothing)
                    if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM mycelium.messages WHERE room = $1 AND "
                                           "episode = $2 AND position > $3 AND payload_type = 'reply')",
                                           room, episode, self.asked[handle]):
                        await self._ask(conn, handle)
        try:
            async with pool.acquire() as conn:
                for handle in self.runs:
                    await self._ask(conn, handle)
            while not self.done.is_set():
                with contextlib.suppress(TimeoutError):
                    handle = await asyncio.wait_for(woken.get(), 0.5)
                    t = asyncio.create_task(step(handle))
                    moving.add(t)
                    t.add_done_callback(moving.discard)
            await asyncio.gather(*moving)
        finally:
            await listen.close()
            await pool.close()


async def relayed_runs(conn: asyncpg.Connection, dsn: str, postmaster: int | None, runs: int, members: list[str],
                       conns: int, rooms: tuple[str, ...], think: float = 0.0) -> dict[str, Any]:
    """(b) with no engine, once: ``runs`` runs of 10 turns relayed at once over ``rooms``
    (:class:`Relay`), members answering ``conns`` turns at once each (``think`` seconds after)."""
    threads = []
    for i in range(runs):
        room = rooms[i % len(rooms)]
        row = await conn.fetchrow("SELECT key, episode FROM mycelium.create_task($1, $2, 'bench')", room, f"relay {i}")
        threads.append((room, row["episode"]))
    team = Members(dsn, members, conns, rooms, addressed=True, think=think)
    stop = asyncio.Event()
    task = asyncio.create_task(team.run(stop))
    db0 = server_cpu(postmaster)
    started = time.perf_counter()
    # two relay processes, as two workers carry (b)'s runs, each with its half of the runs
    halves = [{"dsn": dsn, "runs": threads[i::2], "first": i, "members": members} for i in range(2)]
    procs = [await asyncio.create_subprocess_exec(sys.executable, __file__, "--relay", json.dumps(h)) for h in halves]
    for p in procs:
        if await p.wait() != 0:
            raise RuntimeError("a relay process failed")
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    steps = runs * 10
    return {"latency": team.latency, "steps": steps, "elapsed": elapsed, "db": (server_cpu(postmaster) - db0) / steps}


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


async def run_flows(conn: asyncpg.Connection, runs: int, rounds: int, members: list[str],
                    rooms: tuple[str, ...] = (ROOM,)) -> list[str]:
    """``runs`` runs of the relay flow, run i in room i mod len(rooms)."""
    flow = {**FLOW, "steps": [{**FLOW["steps"][0], "rounds": rounds}, FLOW["steps"][1]]}
    for room in rooms:
        await conn.execute("SELECT 1 FROM mycelium.write_memory($1, 'protocols/relay', to_jsonb($2::text), 'bench')",
                           room, json.dumps(flow))
    episodes = []
    mentions = " ".join("@" + m for m in members)
    for i in range(runs):
        room = rooms[i % len(rooms)]
        row = await conn.fetchrow("SELECT key, episode FROM mycelium.create_task($1, $2, 'bench')", room, f"run {i}")
        episodes.append(row["episode"])
        await conn.execute("SELECT 1 FROM mycelium.coordinate($1, $2, 'conductor', $3, 'bench')", room, row["key"],
                           f"relay {mentions}: go")
    return episodes


async def wait_closed(conn: asyncpg.Connection, n: int, timeout: float, after: int = 0) -> float:
    start = time.perf_counter()
    while await conn.fetchval("SELECT count(*) FROM mycelium.engine_runs WHERE state <> 'open' AND id > $1",
                              after) < n:
        if time.perf_counter() - start > timeout:
            raise TimeoutError("the runs did not close")
        await asyncio.sleep(0.05)
    return time.perf_counter() - start


async def hub_side(conn: asyncpg.Connection, members: list[str], after: int) -> list[float]:
    """Per question of the runs after the first: from the insert of the member's reply before it in
    its thread to the question's insert (the database's clock_timestamp of each)."""
    rows = await conn.fetch(
        """SELECT extract(epoch FROM q.created_at - rep.created_at)::float8 AS s
           FROM mycelium.engine_posts p JOIN mycelium.messages q ON q.room = p.room AND q.id = p.message_id
           CROSS JOIN LATERAL (SELECT m.created_at FROM mycelium.messages m
                               WHERE m.room = q.room AND m.episode = q.episode AND m.position < q.position
                                 AND m.sender = ANY ($1::text[]) AND m.payload_type = 'reply'
                               ORDER BY m.position DESC LIMIT 1) rep
           WHERE p.event = 'turn' AND p.run_id > $2""", members, after)
    return [r["s"] for r in rows]


async def many_runs(conn: asyncpg.Connection, dsn: str, postmaster: int | None, workers: list[subprocess.Popen[bytes]],
                    runs: int, members: list[str], conns: int, rooms: tuple[str, ...],
                    think: float = 0.0) -> dict[str, Any]:
    """(b) once: ``runs`` runs at once over ``rooms``, members answering ``conns`` turns at once each
    (each answer ``think`` seconds on average after its turn was taken)."""
    first = await conn.fetchval("SELECT coalesce(max(id), 0) FROM mycelium.engine_runs")
    team = Members(dsn, members, conns, rooms, think=think)
    stop = asyncio.Event()
    task = asyncio.create_task(team.run(stop))
    cpus = [cpu_seconds(p.pid) for p in workers]
    db0 = server_cpu(postmaster)
    load0 = os.getloadavg()[0]
    since = await conn.fetchval("SELECT clock_timestamp()")
    started = time.perf_counter()
    await run_flows(conn, runs, 5, members, rooms)
    await wait_closed(conn, runs, 600, first)
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    steps = await conn.fetchval("SELECT count(*) FROM mycelium.engine_trace WHERE run_id > $1", first)
    cpu = sum(cpu_seconds(p.pid) - c for p, c in zip(workers, cpus, strict=True)) / max(steps, 1)
    db = (server_cpu(postmaster) - db0) / max(steps, 1)
    steady = [x for x, t in zip(team.latency, team.turns, strict=True) if t > 3]
    return {"latency": team.latency, "steady": steady, "hub": await hub_side(conn, members, first), "steps": steps,
            "elapsed": elapsed,
            "cpu": cpu, "db": db, "load": (load0, os.getloadavg()[0]), "holds": await counter_holds(conn, since)}


async def counter_holds(conn: asyncpg.Connection, since: Any) -> dict[str, tuple[float, float]]:
    """How long each transaction that wrote messages after ``since`` held its room's position counter,
    read as the time from its first message's position to the next transaction's in the room (a hold
    when another writer was waiting, an idle gap otherwise): p50 and p90 ms, for the engine's
    transactions (a step, a run's start) and the members' replies."""
    rows = await conn.fetch(
        """WITH t AS (SELECT m.room, m.xmin::text::bigint AS tx, min(m.position) AS pos, min(m.created_at) AS first,
                             bool_or(m.sender = 'conductor') AS engine, bool_or(m.payload_type = 'reply') AS reply
                      FROM mycelium.messages m WHERE m.created_at >= $1 GROUP BY 1, 2),
              g AS (SELECT CASE WHEN engine THEN 'engine' WHEN reply THEN 'reply' END AS k,
                           extract(epoch FROM lead(first) OVER (PARTITION BY room ORDER BY pos) - first) * 1000 AS ms
                    FROM t)
           SELECT k, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
                  percentile_cont(0.9) WITHIN GROUP (ORDER BY ms) AS p90
           FROM g WHERE k IS NOT NULL AND ms IS NOT NULL GROUP BY k""", since)
    return {r["k"]: (r["p50"], r["p90"]) for r in rows}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


async def main() -> None:
    if sys.argv[1:2] == ["--relay"]:  # one relay process of (b) with no engine
        half = json.loads(sys.argv[2])
        await Relay(half["dsn"], [tuple(r) for r in half["runs"]], half["members"], 10, 12, half["first"]).run()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100, help="steps of the single run (a)")
    ap.add_argument("--member-conns", type=int, default=8,
                    help="turns each member answers at once in (b)'s second round (the first: 1)")
    ap.add_argument("--rooms", type=int, default=1, help="rooms (b)'s runs are spread over (round robin)")
    ap.add_argument("--think", type=float, default=1.0,
                    help="seconds (on average) members of (b)'s third round take to answer a turn")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    async with bench_database("bench_engines") as db:
        conn = await asyncpg.connect(db.dsn)
        rooms = (ROOM, *(f"{ROOM}-{i}" for i in range(2, args.rooms + 1)))
        for room in rooms:
            await conn.execute("SELECT mycelium.create_room($1)", room)
            await conn.execute("SELECT * FROM mycelium.create_engine($1, 'conductor', 'conductor', '', 'bench')",
                               room)
        raw = await raw_round_trip(db.dsn, 200)
        thread = await conn.fetchval("SELECT episode FROM mycelium.create_task($1, 'raw round trips', 'bench')", ROOM)
        raw_thread = await raw_round_trip(db.dsn, 200, thread)

        # (a) one run, one worker
        worker = start_worker(db.dsn, folder, "w0")
        members = Members(db.dsn, ["ann", "bob"])
        stop = asyncio.Event()
        task = asyncio.create_task(members.run(stop))
        cpu0, db0 = cpu_seconds(worker.pid), server_cpu(db.postmaster)
        await run_flows(conn, 1, args.steps // 2, ["ann", "bob"])
        await wait_closed(conn, 1, 300)
        cpu_a = (cpu_seconds(worker.pid) - cpu0) / args.steps
        db_a = (server_cpu(db.postmaster) - db0) / args.steps
        single = list(members.latency)
        stop.set()
        await task
        raw += await raw_round_trip(db.dsn, 200)  # the limits on both sides of (a): the load moves
        raw_thread += await raw_round_trip(db.dsn, 200, thread)

        # (b) many runs, two workers: members one turn at a time, then several at once
        workers = [worker, start_worker(db.dsn, folder, "w1")]
        serial = await many_runs(conn, db.dsn, db.postmaster, workers, args.runs, ["cy", "dee"], 1, rooms)
        wide = await many_runs(conn, db.dsn, db.postmaster, workers, args.runs, ["eve", "fay"], args.member_conns,
                               rooms)
        thinking = await many_runs(conn, db.dsn, db.postmaster, workers, args.runs, ["kai", "lu"], 64, rooms,
                                   args.think)
        # (b) with no engine: the same runs relayed with nothing in between
        relays = [await relayed_runs(conn, db.dsn, db.postmaster, args.runs, ["ivy", "jo"], args.member_conns, rooms),
                  await relayed_runs(conn, db.dsn, db.postmaster, args.runs, ["max", "ned"], 64, rooms, args.think)]
        dup = await conn.fetchval(
            "SELECT count(*) FROM (SELECT run_id, turn FROM mycelium.engine_posts WHERE event = 'turn' "
            "GROUP BY 1, 2 HAVING count(*) > 1) d")
        for p in workers:
            p.terminate()
            p.wait(timeout=30)
        await conn.close()

    raw_ms = statistics.median(raw) * 1000
    raw_thread_ms = statistics.median(raw_thread) * 1000
    step_ms = statistics.median(single) * 1000
    dbms = (lambda v: f"{v * 1000:.1f}") if db.postmaster else (lambda v: "-")
    rows = [
        ["raw post -> await round trip, room channel", f"{raw_ms:.1f}", f"{pct(raw, 0.99):.1f}", "-", "-", len(raw)],
        ["raw post -> await round trip, task thread (the limit)", f"{raw_thread_ms:.1f}", f"{pct(raw_thread, 0.99):.1f}",
         "-", "-", len(raw_thread)],
        ["(a) one conductor step, 1 worker", f"{statistics.median(single) * 1000:.1f}", f"{pct(single, 0.99):.1f}",
         f"{cpu_a * 1000:.1f}", dbms(db_a), len(single)],
    ]
    spread = "1 room" if args.rooms == 1 else f"{args.rooms} rooms"
    for label, b in ((f"(b) {args.runs} runs at once in {spread}, 2 workers, members 1 turn at a time", serial),
                     (f"(b) {args.runs} runs at once in {spread}, 2 workers, members {args.member_conns} turns at once",
                      wide),
                     (f"(b) {args.runs} runs at once in {spread}, 2 workers, members answering {args.think:g} s "
                      "(0.5-1.5x) after each turn", thinking)):
        rows.append([label, f"{statistics.median(b['latency']) * 1000:.1f}", f"{pct(b['latency'], 0.99):.1f}",
                     f"{b['cpu'] * 1000:.1f}", dbms(b["db"]), len(b["latency"])])
        rows.append(["  its hub side: reply inserted -> next question inserted",
                     f"{statistics.median(b['hub']) * 1000:.1f}", f"{pct(b['hub'], 0.99):.1f}", "", "", len(b["hub"])])
    for how, b in zip((f"members {args.member_conns} turns at once", f"members answering {args.think:g} s after"),
                      relays, strict=True):
        rows.append([f"(b) with no engine: the same {args.runs} runs relayed (a read and a post a step), {how}",
                     f"{statistics.median(b['latency']) * 1000:.1f}", f"{pct(b['latency'], 0.99):.1f}", "-",
                     dbms(b["db"]), len(b["latency"])])
    holds = "; ".join(
        f"members {n} at a time: " + ", ".join(f"{who} p50 {b['holds'][k][0]:.1f} / p90 {b['holds'][k][1]:.1f} ms"
                                                for k, who in (("engine", "engine steps"), ("reply", "replies"))
                                                if k in b["holds"])
        for n, b in ((1, serial), (args.member_conns, wide)))
    rates = "; ".join(f"{b['steps']} steps in {b['elapsed']:.1f} s = {b['steps'] / b['elapsed']:.0f} steps/s "
                      f"(load {b['load'][0]:.1f} -> {b['load'][1]:.1f})" for b in (serial, wide, thinking))
    relayed = "; ".join(f"{b['steps'] / b['elapsed']:.0f} steps/s" for b in relays)
    steady = "; ".join(f"{how}: p50 {statistics.median(b['steady']) * 1000:.1f} / p99 {pct(b['steady'], 0.99):.1f} ms"
                       for how, b in (("members 1 turn at a time", serial),
                                      (f"{args.member_conns} turns at once", wide),
                                      (f"answering {args.think:g} s after", thinking)))
    text = (f"## Engines on workers (`bench/engines.py`) — {stamp()}\n\n{machine()}; PostgreSQL embedded; "
            "members are asyncpg connections replying through `mycelium.reply`, woken by `mycelium_wakes`.\n\n"
            + table(["path", "p50 ms", "p99 ms", "worker CPU ms/step", "database CPU ms/step", "samples"], rows)
            + f"\n\n(b): {rates}; questions posted twice: {dup}. Relayed with no engine: {relayed}. "
            "A step's latency is from the member's reply "
            "committing to the next question in a member's hands; the raw round trip is one post woken and "
            "taken. The hub side is read from the messages' own timestamps afterwards. The same latencies "
            "after each run's first three turns (once the burst of 100 runs started at once, their first "
            f"questions and first answers, is past): {steady}.\n\n"
            "The room's position counter, per writing transaction, from its first message's position to the next "
            f"transaction's in the room (a hold while another waits, else an idle gap): {holds}.\n\n"
            f"Against issue 10's targets: the engine's own overhead per step (a step's latency less the raw "
            f"round trip in a thread, which a step's question and reply are) is {step_ms - raw_thread_ms:.1f} ms = "
            f"{(step_ms - raw_thread_ms) / raw_thread_ms:.1f}x that round trip at p50 (target ≤ 2x; a whole step is "
            f"{step_ms / raw_thread_ms:.1f}x it, {step_ms / raw_ms:.1f}x the channel's); {args.runs} runs in {spread}: "
            f"p99 {pct(serial['latency'], 0.99):.0f} ms with "
            f"members one turn at a time, {pct(wide['latency'], 0.99):.0f} ms with {args.member_conns} at once, "
            f"{pct(thinking['latency'], 0.99):.0f} ms with members that take {args.think:g} s to answer "
            f"({pct(thinking['steady'], 0.99):.0f} ms after the start) "
            f"(target ≤ 250 ms); duplicated posts {dup} (target 0). Load average when it ended: "
            f"{os.getloadavg()[0]:.1f} on this shared machine.\n")
    print(text)
    if not args.no_write:
        write_section("engines", text)


if __name__ == "__main__":
    asyncio.run(main())
