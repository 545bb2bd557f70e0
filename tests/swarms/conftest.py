"""Swarms and the worker engine: scripted agent commands played by hubs' engines loops."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import asyncpg

from tests.engines.conftest import engines_hub  # noqa: F401  (the fixture)

#: a team of three: each checks in, the lead splits the task in two, each part's worker writes a
#: file on its branch and resolves it, and the lead sums the parts up
TEAM_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "ann": [
        {"wake": "addressed", "when": "Check in on", "say": "I lead; I review the parts."},
        {"wake": "addressed", "when": "You lead. Split",
         "say": "The split:\n[[new: Build the passkey API -> @bob]]\n[[new: Write the login page -> @cy]]"},
        {"wake": "completed", "say": "Both parts are in: the API and the page. Shipping it."},
    ],
    "*": [
        {"wake": "addressed", "when": "Check in on", "say": "I take a part."},
        {"wake": "filed", "write": {"{slug}.md": "# {title}\n\nwritten by {handle}\n"},
         "say": "Wrote {slug}.md on my branch.\n[[done]]"},
    ],
}


def scripted_command(tmp_path: Path, script: dict[str, Any], name: str = "script.json") -> str:
    """MYCELIUM_WORKER_COMMAND running the scripted agent with ``script``."""
    path = tmp_path / name
    path.write_text(json.dumps(script))
    return shlex.join([sys.executable, "-m", "mycelium.engines.scripted_agent", "--script", str(path)])


async def start_swarm(conn: asyncpg.Connection, goal: str, team: list[str], room: str = "atlas",
                      by: str = "julia") -> dict[str, Any]:
    got: dict[str, Any] = await conn.fetchval("SELECT mycelium.start_swarm($1, $2, $3, $4)", room, goal, team, by)
    return got
