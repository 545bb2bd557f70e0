"""A worker process for the multi-process ledger tests: ``python -m tests.ledger.workers <mode> …``.

Every real side effect appends one line to an effects file (fsync'd), so the test counts effects that
actually happened, whatever happens to the processes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from mycelium import (
    ActionLedger,
    LedgerError,
    ToolTransitionBinding,
    ledger_sync,
    side_effect,
)
from mycelium.ledger.stores import storage_for


def effect(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument(
        "mode",
        choices=["slow", "crash_before", "crash_inside", "crash_crossed", "crash_after", "late", "interrupted"],
    )
    p.add_argument("--dsn", required=True, help="the store's URL (postgresql://, file:///, redis://, http://)")
    p.add_argument("--effects", type=Path, required=True)
    p.add_argument("--ready", type=Path)
    p.add_argument("--call", default="call-1")
    p.add_argument("--class", dest="cls", default="non_idempotent_mutate")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--renew", type=float, default=None)
    p.add_argument("--sleep", type=float, default=0.0)
    a = p.parse_args()

    store = storage_for(a.dsn)
    led = ActionLedger(
        store,
        agent_id="proof",
        policy_version="1",
        lease_ttl=a.lease,
        lease_renew_interval=a.renew,
        poll_interval=0.02,
        poll_timeout=60,
    )
    binding = ToolTransitionBinding.for_tool(side_effect_class=a.cls)

    def ready() -> None:
        if a.ready:
            a.ready.write_text(str(os.getpid()))

    @ledger_sync(action_ledger=led, transition_binding=binding)
    def subagent_task(task: str) -> dict:
        if a.mode == "crash_before":
            ready()
            time.sleep(3600)
        if a.mode == "late":
            ready()
            time.sleep(a.sleep)
        with side_effect():
            effect(a.effects, f"{os.getpid()} {task}")
            if a.mode == "crash_inside":
                ready()
                time.sleep(3600)
        if a.mode == "crash_crossed":  # the effect happened; completion is not recorded yet
            ready()
            time.sleep(3600)
        if a.mode == "slow":
            ready()
            time.sleep(a.sleep)
        return {"task": task, "result": "done", "pid": os.getpid()}

    if a.mode == "interrupted":  # Ctrl-C while the claim waits; the process lives on for a while
        ready()
        try:
            subagent_task("analyze_market", tool_call_id=a.call)
            out = {"result": "not interrupted"}
        except KeyboardInterrupt:
            a.effects.with_name("interrupted").write_text("1")
            time.sleep(a.sleep)
            out = {"interrupted": True}
        print(json.dumps(out), flush=True)
        store.close()
        return 0
    try:
        result = subagent_task("analyze_market", tool_call_id=a.call)
        out = {"result": result}
    except LedgerError as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    print(json.dumps(out), flush=True)
    if a.mode == "crash_after":
        ready()
        time.sleep(3600)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
