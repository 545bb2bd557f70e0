"""``mycelium demo``: the redispatch bug (langgraph#7417) and the fix, with two real OS processes.

Worker A starts a slow side-effecting tool call; while it is in flight, worker B redispatches the
same call. Without the ledger both run the effect. With ``@ledger_sync`` the store gives B the
gate POLL; B waits and returns A's result, and the effect counter reads 1. No agent framework is
needed: the embedded PostgreSQL is started in a temporary folder unless a database is given.
``--redis`` runs the same proof on a Redis ledger: the server at the URL given, or a ``redis-server``
of its own (append-only, an fsync per write) in the temporary folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

WORK_SECONDS = 1.5


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo")
    p.add_argument("what", nargs="?", choices=("redispatch", "flow", "negotiate", "swarm"),
                   default="redispatch",
                   help="redispatch (the default): the duplicated side effect and the ledger's fix, two "
                        "processes; flow: a conductor running review then concord with two scripted members; "
                        "negotiate: the aligner bringing two scripted members to an agreement on NEGMAS; "
                        "swarm: three scripted workers taking a goal to its end in their own git worktrees")
    p.add_argument("--database-url", help="use this PostgreSQL instead of a temporary embedded one")
    p.add_argument("--redis", nargs="?", const="start", metavar="URL",
                   help="a Redis ledger instead: the server at URL, or (no URL) a redis-server of its own")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (and print it)")
    p.set_defaults(func=run)


# -- the worker (a separate OS process) ------------------------------------------------------------


def _count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def worker(mode: str, store_url: str, call_id: str, effects: Path, ready: Path | None) -> dict[str, Any]:
    """One agent runtime dispatching ``subagent_task``: plain, or ledgered."""

    def subagent_task(task: str) -> dict[str, Any]:
        with open(effects, "a") as f:  # the side effect: a subagent started (counted)
            f.write(f"{os.getpid()}\n")
        if ready is not None:
            ready.write_text("in flight")
        time.sleep(WORK_SECONDS)
        return {"task": task, "result": "done", "ran_in": os.getpid()}

    if mode == "plain":
        return subagent_task("analyze_market")

    from mycelium import ActionLedger, ToolTransitionBinding, ledger_sync, side_effect
    from mycelium.ledger.stores import storage_for

    store = storage_for(store_url)
    led = ActionLedger(store, agent_id="demo-agent", policy_version="1", lease_ttl=30, poll_interval=0.05)
    binding = ToolTransitionBinding.for_tool(side_effect_class="non_idempotent_mutate")

    @ledger_sync(action_ledger=led, transition_binding=binding)
    def ledgered_subagent_task(task: str) -> dict[str, Any]:
        with side_effect():
            return subagent_task(task)

    try:
        return ledgered_subagent_task("analyze_market", tool_call_id=call_id)
    finally:
        store.close()


def _worker_main(argv: list[str]) -> int:
    from mycelium.ledger.errors import LedgerError

    mode, store_url, call_id, effects, ready = argv
    try:
        out = worker(mode, store_url, call_id, Path(effects), Path(ready) if ready != "-" else None)
    except LedgerError as exc:  # the store refused or is down: one line for the demo to show
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


# -- the show --------------------------------------------------------------------------------------


def _spawn(mode: str, store_url: str, call_id: str, effects: Path, ready: Path | None
           ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mycelium.cli.demo", mode, store_url, call_id, str(effects),
         str(ready) if ready else "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _redispatch(mode: str, store_url: str, folder: Path) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Worker A, then B with the same tool call while A is in flight (a call id of this demo's own, so
    a second demo on the same store shows the same)."""
    effects, ready = folder / f"{mode}.effects", folder / f"{mode}.ready"
    call_id = f"call_subagent_7417_{uuid.uuid4().hex[:12]}"
    a = _spawn(mode, store_url, call_id, effects, ready)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if a.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"worker A failed: {a.stderr.read().strip() if a.stderr else ''}")
        time.sleep(0.02)
    b = _spawn(mode, store_url, call_id, effects, None)  # the platform redispatches while A is in flight
    outs = []
    for proc in (a, b):
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise SystemExit(f"a worker failed: {err.strip()}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return _count(effects), outs[0], outs[1]


def run(args: argparse.Namespace) -> int:
    from mycelium.cli.client import fail

    if args.what == "swarm":
        from mycelium.engines.demo_swarm import run as run_swarm

        return run_swarm(keep=args.keep)
    if args.what in ("flow", "negotiate"):
        if args.redis or args.database_url:
            fail(f"demo {args.what} runs on a temporary embedded database of its own: "
                 "no --redis or --database-url")
        if args.what == "negotiate":
            from mycelium.engines.aligner.demo import run as run_negotiation

            return run_negotiation(keep=args.keep)
        from mycelium.engines.demo import run as run_flow

        return run_flow(keep=args.keep)

    if args.redis and args.database_url:
        fail("give --redis or --database-url, not both")
    if args.redis and importlib.util.find_spec("redis") is None:
        fail("mycelium demo --redis needs the redis client, which is not installed: "
             "pip install 'mycelium-hub[redis]'")
    if args.redis == "start" and shutil.which("redis-server") is None:
        fail("mycelium demo --redis starts a redis-server of its own, and none is on PATH: install Redis "
             "(apt-get install redis-server, brew install redis), or give the URL of one: --redis redis://host:6379/0")
    folder = Path(tempfile.mkdtemp(prefix="mycelium-demo-"))
    servers: list[Any] = []
    try:
        if args.redis:
            store_url, audit = _redis_store(args.redis, folder, servers)
        else:
            store_url, audit = _postgres_store(args.database_url, folder, servers)
        print("\n1) The bug: a plain tool, redispatched while the first call is still running")
        count, a, b = _redispatch("plain", store_url, folder)
        print(f"   worker A ran it in pid {a['ran_in']}; worker B ran it again in pid {b['ran_in']}")
        print(f"   side effects: {count}   <- the subagent ran twice (you pay twice)")

        print(f"\n2) The fix: the same tool under @ledger_sync; {audit[0]} gates the redispatch")
        count, a, b = _redispatch("ledger", store_url, folder)
        same = "A's result (polled while A held the lease)" if b == a else f"{b}"
        print(f"   worker A ran it in pid {a['ran_in']}; worker B returned {same}")
        print(f"   side effects: {count}   <- once")
        for line in audit[1:]:
            print(line)
        return 0 if count == 1 else 1
    finally:
        for stop in reversed(servers):
            stop()
        if args.keep:
            print(f"\n(kept {folder})")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _postgres_store(database_url: str | None, folder: Path, servers: list[Any]) -> tuple[str, list[str]]:
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    import asyncpg

    from mycelium.db import migrate
    from mycelium.db.embedded import EmbeddedPostgres

    if database_url:
        dsn = database_url
    else:
        print("starting an embedded PostgreSQL for the demo ...", flush=True)
        server = EmbeddedPostgres(folder / "data")
        dsn = server.attach(create=True)  # a cluster of its own, removed afterwards
        servers.append(server.detach)
    try:
        migrate.upgrade(dsn)
    except (OSError, asyncpg.PostgresError) as exc:
        from mycelium.cli.client import fail

        fail(f"the database at {database_url} does not answer: {type(exc).__name__}: {exc}")
    return dsn, [
        "the database",
        "\n   audit (with --keep or --database-url): psql> SELECT request_id, terminal_outcome, fence"
        " FROM mycelium.transitions;",
        "          psql> SELECT * FROM mycelium.verify_receipt_chain('demo-agent');",
    ]


def _redis_store(url: str, folder: Path, servers: list[Any]) -> tuple[str, list[str]]:
    if url == "start":
        print("starting a redis-server for the demo (append-only, an fsync per write) ...", flush=True)
        url = _start_redis(folder / "redis", servers)
        audit = ["\n   (the demo's redis-server stops with it; --redis URL runs on a server of yours)"]
    else:
        _answers(url)
        audit = [f"   audit: redis-cli -u {url} --scan --pattern 'mycelium:transition:*'",
                 f"          redis-cli -u {url} GET <one of those keys>"]
    return url, ["Redis (one server-side script per verb)", *audit]


def _answers(url: str) -> None:
    import redis

    from mycelium.cli.client import fail

    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        client.ping()
    except redis.RedisError as exc:
        fail(f"the Redis at {url} does not answer: {exc}")
    finally:
        client.close()


def _start_redis(folder: Path, servers: list[Any]) -> str:
    folder.mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
         "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
         "--logfile", str(folder / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=20)

    servers.append(stop)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"redis-server exited: {(folder / 'redis.log').read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return f"redis://127.0.0.1:{port}/0"
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("redis-server did not answer PING within 20 s")


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
