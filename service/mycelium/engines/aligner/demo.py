"""``mycelium demo negotiate``: two agents who disagree, brought to an agreement by NEGMAS.

A hub (``mycelium up``, engines in-process) on a temporary embedded database; a task; an aligner;
two scripted members, each its own ``mycelium await --loop --exec`` process, disagreeing on a
numeric issue (the price) and a categorical one (the vendor); the aligner brokering in the task's
thread, one member at a time, until NEGMAS ends it; the converged commit with its metrics, the
rows the agreement was compiled into (when the task compiler runs), the team prior and the record.

``python -m mycelium.engines.aligner.demo member <handle>`` is the scripted member ``--exec`` runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mycelium.engines.demo import _cli, _free_port, _start_hub, _stop, _wait_closed

ANSWERS: dict[str, dict[str, str]] = {
    "alice": {
        "opening": "We need it cheap, and we trust acme. "
        "[[mycelium: offer price=10 vendor=acme confidence=0.6]]",
        "1": "We can go to 15, from acme. [[mycelium: offer price=15 vendor=acme confidence=0.6]]",
        "3": "Twenty with acme is as far as I go. [[mycelium: offer price=20 vendor=acme confidence=0.8]]",
    },
    "bob": {
        "opening": "Thirty, and globex delivers faster. "
        "[[mycelium: offer price=30 vendor=globex confidence=0.5]]",
        "2": "Acme is fine if the price is 25. [[mycelium: offer price=25 vendor=acme confidence=0.6]]",
        "4": "Deal at twenty. [[mycelium: accept confidence=0.8]]",
    },
}


def member(handle: str) -> int:
    """Answer one turn of the aligner (stdin: the message as ``mycelium await --exec`` gives it)."""
    message = json.load(sys.stdin)
    head = (message.get("prompt") or "").split("\n", 1)[0]
    parts = [p.strip() for p in head.split("·")]
    if len(parts) < 3 or parts[0] != "negotiate":
        return 0
    if parts[1] == "opening positions":
        step = "opening"
    elif parts[1].startswith("move "):
        step = parts[1].split()[1]
    else:
        return 0
    answer = ANSWERS.get(handle, {}).get(step, "[[mycelium: reject]]")
    print(answer)
    return 0


def run(keep: bool = False) -> int:
    folder = Path(tempfile.mkdtemp(prefix="mycelium-negotiate-demo-"))
    port = _free_port()
    env = {
        **os.environ,
        "MYCELIUM_API_URL": f"http://127.0.0.1:{port}",
        "MYCELIUM_ROOM": "demo",
        "MYCELIUM_HANDLE": "julia",
        "MYCELIUM_EMBEDDER": "none",
        "MYCELIUM_ALIGNER_ROUND_TIMEOUT_S": "60",
    }
    env.pop("DATABASE_URL", None)
    procs: list[subprocess.Popen[bytes]] = []
    log = open(folder / "hub.log", "w")  # noqa: SIM115 - closed below
    try:
        print(f"starting a hub with an embedded database in {folder} …", flush=True)
        procs.append(_start_hub(folder, port, env, log))
        _cli(env, "room", "create", "demo")
        _cli(env, "engine", "create", "aligner", "--kind", "aligner")
        task = _cli(env, "board", "new", "Buy 500 widgets", "--json")
        print(f"filed {task['key']}; @alice and @bob wait with `mycelium await --loop --exec`", flush=True)
        for handle in ("alice", "bob"):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "mycelium.cli.main", "await", "--loop", "--handle", handle,
                     "--exec", f"{sys.executable} -m mycelium.engines.aligner.demo member {handle}"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={**env, "MYCELIUM_HANDLE": handle},
                )
            )
        _cli(env, "board", "coordinate", task["key"], "aligner", "@alice @bob: the unit price and the vendor")
        runs = _wait_closed(env, 1)
        detail = _cli(env, "engine", "episodes", runs[0]["short_id"], "--json")
        print(f"\n== negotiation: {detail['outcome']} (episode {detail['short_id']}) ==")
        for m in detail["messages"]:
            lines = [x for x in m["content"].split("\n") if x.strip()]
            print(f"  @{m['sender_handle']:<8} {lines[0][:110] if lines else ''}")
        print("  move log:")
        for t in detail["trace"]:
            if t.get("step") == "round":
                offer = t.get("offer") or ""
                print(f"    {t['turn']}. @{t['who']:<6} {t['action']:<7} {offer}  ({t['how']})")
            else:
                print(f"    {t['turn']}. {t['step']:<14} issues: {t.get('issues')}")
        print(f"  agreement: {detail.get('assignments')}")
        print(f"  metrics:   {detail.get('metrics')}")
        deadline = time.monotonic() + 5
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:  # the task compiler, where it runs, files the agreement
            rows = [r for r in _cli(env, "board", "ls", "--json") if r.get("key") != task["key"]]
            if rows:
                break
            time.sleep(0.5)
        filed = ", ".join(str(r.get("key")) for r in rows) or "(none: no task compiler here)"
        print(f"  compiled rows: {filed}")
        prior = _cli(env, "memory", "get", "l9/rule_update/price-vendor", "--json")
        print(f"  team prior l9/rule_update/price-vendor: {prior.get('meta', {}).get('l9')}")
        record = _cli(env, "memory", "get", f"log/episodes/{detail['short_id']}", "--json")
        print(f"\n{record['value'].get('text')}")
        return 0 if detail["outcome"] == "converged" else 1
    finally:
        _stop(procs, log, folder, keep)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "member":
        raise SystemExit(member(sys.argv[2]))
    raise SystemExit(run("--keep" in sys.argv))
