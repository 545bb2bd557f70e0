"""``mycelium engine demo``: a conductor at work, on the embedded database, nothing else installed.

A hub (``mycelium up``, which runs the engines in-process) in a temporary folder; a task; two
scripted members, each its own ``mycelium await --loop --exec`` process; the conductor running
``review`` and then ``concord`` in the task's thread, the floor passing between them; the commit, the
saved decision and the episode records with their traces, printed as they land.

``python -m mycelium.engines.demo member <handle>`` is the scripted member ``--exec`` runs: the
message as JSON on stdin, its answer (by the step the conductor's turn names) on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

ANSWERS: dict[str, dict[str, str]] = {
    "nova": {
        "draft": "Launch plan: ship behind a flag, watch the error rate for a day.",
        "rework": "Added a rollback: flip the flag off, then revert the deploy.",
        "suggest": "Tuesday",
        "rate": "[[mycelium: A=85 B=40 confidence=0.7]]",
        "rerate": "[[mycelium: C=80 confidence=0.8]]",
    },
    "julia": {
        "review": "Needs a rollback plan first. [[mycelium: stance=reject confidence=0.6]]",
        "review-again": "With the rollback this is fine. [[mycelium: stance=accept confidence=0.9]]",
        "suggest": "Friday",
        "rate": "[[mycelium: A=60 B=90 confidence=0.6]]",
        "fix": "Wednesday",
        "rerate": "[[mycelium: C=75 confidence=0.8]]",
    },
}


def member(handle: str) -> int:
    """Answer one turn (stdin: the message as ``mycelium await --exec`` gives it)."""
    message = json.load(sys.stdin)
    text = message.get("prompt") or message.get("text") or message.get("content") or ""
    head = text.split("\n", 1)[0]
    parts = [p.strip() for p in head.split("·")]
    if len(parts) < 3:
        return 0  # not a conductor's turn: say nothing
    step = parts[1]
    if step == "review" and "turn 2 " not in head + " ":
        step = "review-again"
    answer = ANSWERS.get(handle, {}).get(step)
    if answer:
        print(answer)
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "mycelium.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mycelium {' '.join(args)}: {done.stderr.strip()}")
    return json.loads(done.stdout) if "--json" in args else done.stdout


def _wait_closed(env: dict[str, str], count: int, timeout: float = 120.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = _cli(env, "engine", "episodes", "--json")
        if len([r for r in runs if r["outcome"] != "open"]) >= count:
            return runs
        time.sleep(0.3)
    raise TimeoutError(f"the run did not close in time: {json.dumps(runs, default=str)[:3000]}")


def _start_hub(folder: Path, port: int, env: dict[str, str], log: IO[str]) -> subprocess.Popen[bytes]:
    """`mycelium up` on an embedded database in ``folder``, once its /health answers."""
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "mycelium.cli.main", "up", "--port", str(port), "--data-dir",
         str(folder / "data"), "--no-mirror"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the hub did not start:\n" + (folder / "hub.log").read_text())
        time.sleep(0.2)


def _stop(procs: list[subprocess.Popen[bytes]], log: IO[str], folder: Path, keep: bool) -> None:
    """The demo's processes stopped (the hub last), its log closed, its folder removed unless kept."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    log.close()
    if keep:
        print(f"kept {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)


def run(keep: bool = False) -> int:
    folder = Path(tempfile.mkdtemp(prefix="mycelium-flow-demo-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "MYCELIUM_API_URL": url,
        "MYCELIUM_ROOM": "demo",
        "MYCELIUM_HANDLE": "julia",
        "MYCELIUM_EMBEDDER": "none",
        "MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S": "60",
    }
    env.pop("DATABASE_URL", None)
    procs: list[subprocess.Popen[bytes]] = []
    log = open(folder / "hub.log", "w")  # noqa: SIM115 - closed below
    try:
        print(f"starting a hub with an embedded database in {folder} …", flush=True)
        procs.append(_start_hub(folder, port, env, log))
        _cli(env, "room", "create", "demo")
        _cli(env, "engine", "create", "conductor", "--kind", "conductor")
        task = _cli(env, "board", "new", "Launch the pricing page", "--json")
        print(
            f"filed {task['key']}; members @nova and @julia wait with `mycelium await --loop --exec`",
            flush=True,
        )
        for handle in ("nova", "julia"):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "mycelium.cli.main",
                        "await",
                        "--loop",
                        "--handle",
                        handle,
                        "--exec",
                        f"{sys.executable} -m mycelium.engines.demo member {handle}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={**env, "MYCELIUM_HANDLE": handle},
                )
            )
        _cli(env, "board", "coordinate", task["key"], "conductor", "review @nova @julia: the launch plan")
        _wait_closed(env, 1)
        _cli(
            env,
            "board",
            "coordinate",
            task["key"],
            "conductor",
            "concord @nova @julia: which day do we launch?",
        )
        runs = _wait_closed(env, 2)
        for e in reversed(runs):
            detail = _cli(env, "engine", "episodes", e["short_id"], "--json")
            print(f"\n== {detail['flow']['name']}: {detail['outcome']} (episode {detail['short_id']}) ==")
            for m in detail["messages"]:
                first = m["content"].split("\n", 1)[0]
                print(f"  @{m['sender_handle']:<10} {first[:100]}")
            print("  trace:")
            for t in detail["trace"]:
                said = t.get("stances") or t.get("select", "")
                print(f"    {t['turn']}. {t['step']:<8} → {t.get('next')}  {said}")
            if detail["metrics"]:
                print(f"  metrics: {detail['metrics']}")
        decision = _cli(env, "memory", "get", "context/decision/launch-the-pricing-page", "--json")
        print(f"\nsaved decision context/decision/launch-the-pricing-page: {decision['value'].get('text')}")
        return 0
    finally:
        _stop(procs, log, folder, keep)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "member":
        raise SystemExit(member(sys.argv[2]))
    raise SystemExit(run("--keep" in sys.argv))
