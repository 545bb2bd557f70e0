"""``mycelium swarm "<goal>" --team @a @b @c``: one command for a team's work.

It files the task, makes each member a worker engine (a member with a runner is woken by it
instead), and starts the conductor's ``swarm`` flow in the task's thread: the team checks in, the
lead (the first member) splits the task into parts filed ``part-of`` it, each part is worked in its
worker's own git worktree, and the lead resolves the task once every part is settled. ``--wait``
follows it to the end; ``--ls`` lists the room's swarms. HTTP only.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from mycelium.cli.client import call, fail, print_json
from mycelium.cli.common import add_author, add_json, add_room, handle_of, path_part, room_of

ENDED = ("resolved", "dismissed", "gone")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("swarm")
    p.add_argument("goal", nargs="?", help="what the team is to do")
    p.add_argument("--team", nargs="+", default=[], metavar="@MEMBER",
                   help="the members, the lead first: --team @ann @bob @cy")
    p.add_argument("--title", help="the task's title (default: the goal's first line)")
    p.add_argument("--conductor", default="conductor", help="the conductor engine (made if missing)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="follow the swarm until its task is resolved, for at most this long")
    p.add_argument("--ls", action="store_true", help="list the room's swarms instead")
    add_room(p)
    add_author(p)
    add_json(p)
    p.set_defaults(func=run)


def line(s: dict[str, Any]) -> str:
    team = " ".join(f"@{h}" for h in s["team"])
    return (f"{s['key']}\t{s['status']}\tparts {s['parts_settled']}/{s['parts']}\trun {s['run_state'] or '-'}"
            f"\t{team}\t{s['title'] or s['goal']}")


def run(args: argparse.Namespace) -> int:
    base = f"/api/rooms/{path_part(room_of(args))}/swarms"
    if args.ls:
        rows = call("GET", base)
        if args.json:
            print_json(rows)
        else:
            print("\n".join(line(s) for s in rows) or "(no swarms)")
        return 0
    if not args.goal or not args.goal.strip():
        fail('swarm: give the goal and the team: mycelium swarm "Ship passkey login" --team @ann @bob @cy')
    if not args.team:
        fail("swarm: give the team (the lead first): --team @ann @bob @cy")
    made = call("POST", base, json_body={"goal": args.goal, "team": args.team, "title": args.title,
                                         "conductor": args.conductor, "created_by": handle_of(args)})
    if not args.json:
        members = ", ".join(f"@{m['handle']} ({m['as']})" for m in made["members"])
        print(f"swarm on {made['key']} ({made['title']}): lead @{made['lead']}; {members}; "
              f"@{made['conductor']} runs the swarm flow in its thread")
    if args.wait <= 0:
        if args.json:
            print_json(made)
        return 0
    deadline = time.monotonic() + args.wait
    said = ""
    while True:
        now = call("GET", f"{base}/{path_part(made['key'])}")
        text = line(now)
        if text != said and not args.json:
            print(text, flush=True)
            said = text
        if now["status"] in ENDED:
            break
        if time.monotonic() > deadline:
            fail(f"{made['key']} is still {now['status']} after {args.wait:g} s (parts "
                 f"{now['parts_settled']}/{now['parts']}, run {now['run_state'] or 'not started'}): "
                 "is a worker running?")
        time.sleep(0.3)
    if args.json:
        print_json({**made, "swarm": now})
    return 0 if now["status"] == "resolved" else 1
