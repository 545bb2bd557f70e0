"""``mycelium demo``: the redispatch bug (langgraph#7417) and the fix, with two real OS processes.

Worker A starts a slow side-effecting tool call; while it is in flight, worker B redispatches the
same call. Without the ledger both run the effect. With ``@ledger_sync`` the database gives B the
gate POLL; B waits and returns A's result, and the effect counter reads 1. No agent framework is
needed: the embedded PostgreSQL is started in a temporary folder unless a database is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

WORK_SECONDS = 1.5


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo")
    p.add_argument("--database-url", help="use this PostgreSQL instead of a temporary embedded one")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (and print it)")
    p.set_defaults(func=run)


# -- the worker (a separate OS process) ------------------------------------------------------------


def _count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def worker(mode: str, dsn: str, effects: Path, ready: Path | None) -> dict[str, Any]:
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

    from mycelium import ActionLedger, PostgresLedgerStorage, ToolTransitionBinding, ledger_sync, side_effect

    store = PostgresLedgerStorage(dsn)
    led = ActionLedger(store, agent_id="demo-agent", policy_version="1", lease_ttl=30, poll_interval=0.05)
    binding = ToolTransitionBinding.for_tool(side_effect_class="non_idempotent_mutate")

    @ledger_sync(action_ledger=led, transition_binding=binding)
    def ledgered_subagent_task(task: str) -> dict[str, Any]:
        with side_effect():
            return subagent_task(task)

    try:
        return ledgered_subagent_task("analyze_market", tool_call_id="call_subagent_7417")
    finally:
        store.close()


def _worker_main(argv: list[str]) -> int:
    mode, dsn, effects, ready = argv
    out = worker(mode, dsn, Path(effects), Path(ready) if ready != "-" else None)
    print(json.dumps(out), flush=True)
    return 0


# -- the show --------------------------------------------------------------------------------------


def _spawn(mode: str, dsn: str, effects: Path, ready: Path | None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mycelium.cli.demo", mode, dsn, str(effects), str(ready) if ready else "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _redispatch(mode: str, dsn: str, folder: Path) -> tuple[int, dict[str, Any], dict[str, Any]]:
    effects, ready = folder / f"{mode}.effects", folder / f"{mode}.ready"
    a = _spawn(mode, dsn, effects, ready)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if a.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"worker A failed: {a.stderr.read() if a.stderr else ''}")
        time.sleep(0.02)
    b = _spawn(mode, dsn, effects, None)  # the platform redispatches while A is in flight
    outs = []
    for proc in (a, b):
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise SystemExit(f"a worker failed:\n{err}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return _count(effects), outs[0], outs[1]


def run(args: argparse.Namespace) -> int:
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    from mycelium.db import migrate
    from mycelium.db.embedded import EmbeddedPostgres

    folder = Path(tempfile.mkdtemp(prefix="mycelium-demo-"))
    server = None
    try:
        if args.database_url:
            dsn = args.database_url
        else:
            print("starting an embedded PostgreSQL for the demo ...", flush=True)
            server = EmbeddedPostgres(folder / "data")
            dsn = server.attach(create=True)  # a cluster of its own, removed afterwards
        migrate.upgrade(dsn)

        print("\n1) The bug: a plain tool, redispatched while the first call is still running")
        count, a, b = _redispatch("plain", dsn, folder)
        print(f"   worker A ran it in pid {a['ran_in']}; worker B ran it again in pid {b['ran_in']}")
        print(f"   side effects: {count}   <- the subagent ran twice (you pay twice)")

        print("\n2) The fix: the same tool under @ledger_sync; the database gates the redispatch")
        count, a, b = _redispatch("ledger", dsn, folder)
        same = "A's result (polled while A held the lease)" if b == a else f"{b}"
        print(f"   worker A ran it in pid {a['ran_in']}; worker B returned {same}")
        print(f"   side effects: {count}   <- once")
        print(
            "\n   audit (with --keep or --database-url): psql> SELECT request_id, terminal_outcome, fence"
            " FROM mycelium.transitions;"
        )
        print("          psql> SELECT * FROM mycelium.verify_receipt_chain('demo-agent');")
        return 0 if count == 1 else 1
    finally:
        if server is not None:
            server.detach()
        if args.keep:
            print(f"\n(kept {folder})")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
