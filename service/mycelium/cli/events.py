"""``mycelium events``: follow what concerns a handle in every room it can see (``GET /api/events``):
a message that is a turn for it, in any room, and a memory written or deleted under a prefix it
follows (``mycelium memory subscribe``). ``--after ID`` starts after an event (default: from now);
a dropped stream picks up after the last event shown. ``--json``: one event per line as the hub
sends it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mycelium.cli.client import follow_stream
from mycelium.cli.common import add_author, add_json, handle_of
from mycelium.cli.room_messages import line as message_line


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("events")
    p.add_argument("--after", type=int, help="start after this event id (default: from now on)")
    add_author(p)
    add_json(p)
    p.set_defaults(func=run)


def line(e: dict[str, Any]) -> str:
    if e["kind"] == "memory":
        followed = e["prefix"] or "every memory"
        return f"{e['id']:>6}  {e['room']}: {e['key']} v{e['version']} {e['op']} (you follow {followed})"
    m = e.get("message")
    return f"{e['id']:>6}  {e['room']}: " + (message_line(m).lstrip() if m else f"message {e['position']}")


def run(args: argparse.Namespace) -> int:
    handle = handle_of(args)
    after: list[int | None] = [args.after]

    def show(e: dict[str, Any]) -> None:
        after[0] = e["id"]
        print(json.dumps(e) if args.json else line(e), flush=True)

    return follow_stream("/api/events", lambda: {"handle": handle, "after": after[0]}, show)
