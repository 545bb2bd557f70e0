"""A scripted agent command for worker engines: deterministic answers for tests and demos.

``python -m mycelium.engines.scripted_agent --script FILE`` reads its turn's prompt on standard
input and ``MYCELIUM_HANDLE``/``MYCELIUM_WAKE``/``MYCELIUM_TASK``/``MYCELIUM_ROOM``/``MYCELIUM_TEAM``
from its environment, takes the first rule of the script that fits (the handle's own rules, then
those under ``"*"``), does what it says in its working folder and prints its answer. The script
is JSON::

    {"ann": [{"wake": "addressed", "when": "check-in", "say": "I take the API."}],
     "*":   [{"wake": "filed", "write": {"{slug}.md": "# {title}"}, "say": "Wrote {slug}.md [[done]]"}]}

A rule fits when its ``wake`` (mention, addressed, filed, completed; a list, or absent: any) is
this turn's and its ``when`` (absent: always) is in the turn's own part of the prompt (what comes
before the thread so far). ``write`` makes files (their names
and text may hold the fields below) and commits them on the worker's branch; ``sleep`` waits
that many seconds first (with ``once``, a file path: only when that file is not there yet; it is
made first, holding the agent's pid); ``exit`` ends with that code after printing ``stderr``. Fields: {handle}
{room} {task} {slug} (the task's key after its last ``/``) {title} (the task's title as the prompt
states it) {team} (the others, as @mentions) {wake}. No rule that fits: exit code 3, saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mycelium.engines.worker import THREAD_MARK

_TITLE = re.compile(
    r"^The row of this thread: \S+ — (?P<t>.+?) \((?:open|settled|in_review|resolved|dismissed)", re.M
)


def fields(prompt: str, env: Mapping[str, str]) -> dict[str, str]:
    handle = env.get("MYCELIUM_HANDLE", "")
    task = env.get("MYCELIUM_TASK", "")
    title = _TITLE.search(prompt)
    team = [h for h in env.get("MYCELIUM_TEAM", "").split(",") if h and h != handle]
    return {"handle": handle, "room": env.get("MYCELIUM_ROOM", ""), "task": task,
            "slug": task.rsplit("/", 1)[-1] or "work", "title": title["t"] if title else task,
            "team": " ".join(f"@{h}" for h in team), "wake": env.get("MYCELIUM_WAKE", "")}


def fill(text: str, values: Mapping[str, str]) -> str:
    return re.sub(r"\{([a-z]+)\}", lambda m: values.get(m[1], m[0]), text)


def pick(script: Mapping[str, Any], handle: str, wake: str, prompt: str) -> Mapping[str, Any] | None:
    for rule in [*script.get(handle, []), *script.get("*", [])]:
        wakes = rule.get("wake")
        if wakes is not None and wake not in ([wakes] if isinstance(wakes, str) else wakes):
            continue
        if rule.get("when") is not None and str(rule["when"]) not in prompt.split(THREAD_MARK, 1)[0]:
            continue
        return dict(rule)
    return None


def commit(folder: Path, files: Mapping[str, str], message: str) -> None:
    for name, text in files.items():
        target = (folder / name).resolve()
        if not target.is_relative_to(folder.resolve()):
            raise SystemExit(f"scripted agent: {name!r} is outside the worktree")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=folder, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=folder, check=True, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripted-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", required=True, help="the JSON file of rules")
    args = parser.parse_args(argv)
    try:
        script = json.loads(Path(args.script).read_text())
    except (OSError, ValueError) as exc:
        print(f"scripted agent: cannot read the script {args.script}: {exc}", file=sys.stderr)
        return 2
    prompt = sys.stdin.read()
    env = os.environ
    values = fields(prompt, env)
    rule = pick(script, values["handle"], values["wake"], prompt)
    if rule is None:
        print(f"scripted agent: no rule for @{values['handle']} ({values['wake']})", file=sys.stderr)
        return 3
    if rule.get("sleep"):
        once = Path(fill(str(rule["once"]), values)) if rule.get("once") else None
        if once is None or not once.exists():
            if once is not None:
                once.write_text(str(os.getpid()))
            time.sleep(float(rule["sleep"]))
    if rule.get("write"):
        files = {fill(k, values): fill(str(v), values) for k, v in dict(rule["write"]).items()}
        commit(Path.cwd(), files, fill(str(rule.get("commit", "{handle}: {title}")), values))
    if rule.get("exit"):
        print(fill(str(rule.get("stderr", "")), values), file=sys.stderr)
        return int(rule["exit"])
    print(fill(str(rule.get("say", "")), values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
