"""``mycelium demo swarm``: a team of three scripted workers takes a goal to its end.

A hub (``mycelium up`` on an embedded database in a temporary folder) whose worker engines run the
scripted agent command (``mycelium.engines.scripted_agent``); one ``mycelium swarm`` files the task,
makes @ada, @bo and @cy workers and starts the conductor's ``swarm`` flow. They check in, @ada
splits the task in two, @bo and @cy each write their part on their own branch of the room's
repository and resolve it, and @ada sums up and resolves the task, once. The thread, the parts and
the branches are printed at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mycelium.engines.demo import _cli, _free_port, _start_hub, _stop

GOAL = "Ship the pricing page"
TEAM = ("ada", "bo", "cy")
SCRIPT: dict[str, list[dict[str, Any]]] = {
    "ada": [
        {"wake": "addressed", "when": "You lead. Split",
         "say": "Two parts, one each:\n[[new: Write the pricing copy -> @bo]]\n"
                "[[new: Build the price table -> @cy]]"},
        {"wake": "addressed", "when": "Check in on", "say": "I lead: I split the work and review it."},
        {"wake": "completed", "say": "The copy and the table are in (branches swarm/bo and swarm/cy); "
                                     "the pricing page is ready to merge."},
    ],
    "*": [
        {"wake": "addressed", "when": "Check in on", "say": "Ready: I take whichever part @ada gives me."},
        {"wake": "filed", "write": {"{slug}.md": "# {title}\n\nDone by @{handle}.\n"},
         "say": "{title}: written in {slug}.md and committed on my branch.\n[[done]]"},
    ],
}


def run(keep: bool = False) -> int:
    folder = Path(tempfile.mkdtemp(prefix="mycelium-swarm-demo-"))
    script = folder / "team.json"
    script.write_text(json.dumps(SCRIPT, indent=2))
    port = _free_port()
    env = {
        **os.environ,
        "MYCELIUM_API_URL": f"http://127.0.0.1:{port}",
        "MYCELIUM_ROOM": "demo",
        "MYCELIUM_HANDLE": "julia",
        "MYCELIUM_EMBEDDER": "none",
        "MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S": "60",
        "MYCELIUM_WORKER_COMMAND": shlex.join(
            [sys.executable, "-m", "mycelium.engines.scripted_agent", "--script", str(script)]),
    }
    env.pop("DATABASE_URL", None)
    procs: list[subprocess.Popen[bytes]] = []
    log = open(folder / "hub.log", "w")  # noqa: SIM115 - closed below
    try:
        print(f"starting a hub with an embedded database in {folder} …", flush=True)
        procs.append(_start_hub(folder, port, env, log))
        _cli(env, "room", "create", "demo")
        began = time.monotonic()
        made = _cli(env, "swarm", GOAL, "--team", *(f"@{h}" for h in TEAM), "--json")
        print(f"mycelium swarm {GOAL!r} --team {' '.join('@' + h for h in TEAM)}")
        print(f"  filed {made['key']}; workers: {', '.join('@' + m['handle'] for m in made['members'])}; "
              f"@{made['conductor']} runs the swarm flow in its thread", flush=True)
        done = _cli(env, "swarm", "--ls", "--json")
        deadline = time.monotonic() + 120
        while not done or done[0]["status"] != "resolved":
            if time.monotonic() > deadline:
                raise TimeoutError(f"the swarm did not finish: {done}")
            time.sleep(0.3)
            done = _cli(env, "swarm", "--ls", "--json")
        took = time.monotonic() - began
        print(f"\n== {made['key']}: {done[0]['status']} in {took:.1f} s, parts "
              f"{done[0]['parts_settled']}/{done[0]['parts']} ==")
        for m in reversed(_cli(env, "room", "messages", "--limit", "200", "--json")):  # (newest first)
            if m.get("payload_type") in ("message", "reply", "consensus"):
                first = m["content"].split("\n", 1)[0]
                print(f"  @{m['sender_handle']:<10} {first[:100]}")
        repo = folder / "data" / "workspaces" / "demo" / "repo"
        print("\nbranches of the room's repository:")
        for h in TEAM:
            files = subprocess.run(["git", "ls-tree", "--name-only", f"swarm/{h}"], cwd=repo,
                                   capture_output=True, text=True).stdout.split()
            print(f"  swarm/{h:<4} {', '.join(files) or '(no files)'}")
        return 0
    finally:
        _stop(procs, log, folder, keep)
