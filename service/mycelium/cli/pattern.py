"""``mycelium pattern``: scenario packs. ``ls`` (the packs' patterns), ``show NAME``, ``load NAME -r
ROOM [--private] [--run]`` (a new room from the pattern, paused unless ``--run``), ``run [NAME] -r
ROOM`` (start the room's pattern; with NAME, a room that does not hold it yet is loaded first).
HTTP only: the hub reads the packs (its own and ``MYCELIUM_PATTERNS_DIR``), never a path given here."""

from __future__ import annotations

import argparse
from typing import Any

from mycelium.cli.client import call, fail, print_json
from mycelium.cli.common import add_author, add_json, add_room, handle_of, path_part, room_of


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("pattern")
    psub = p.add_subparsers(dest="pattern_command", metavar="<action>")
    psub.required = True
    ls = psub.add_parser("ls", help="the patterns the hub's packs hold")
    add_json(ls)
    ls.set_defaults(func=_ls)
    show = psub.add_parser("show", help="one pattern: its room, engines, memories, runners, task and run")
    show.add_argument("name")
    add_json(show)
    show.set_defaults(func=_show)
    load = psub.add_parser("load", help="make a room from a pattern, paused")
    load.add_argument("name")
    load.add_argument("--private", action="store_true", default=None, help="make the room private")
    load.add_argument("--run", action="store_true", help="start it at once")
    _room(load)
    load.set_defaults(func=_load)
    run = psub.add_parser("run", help="start the room's pattern (NAME: load it first if the room lacks it)")
    run.add_argument("name", nargs="?")
    _room(run)
    run.set_defaults(func=_run)


def _room(p: argparse.ArgumentParser) -> None:
    add_room(p)
    add_author(p)
    add_json(p)


def _ls(args: argparse.Namespace) -> int:
    rows = call("GET", "/api/patterns")
    if args.json:
        print_json(rows)
        return 0
    for p in rows:
        if not p["valid"]:
            print(f"{p['name']}\t(cannot be loaded: {'; '.join(p['problems'])})")
            continue
        team = " ".join(f"@{e['handle']}" for e in p["engines"])
        print(f"{p['name']}\t{p['source']}\t{p['title']}\t{team}")
    if not rows:
        print("(no patterns)")
    return 0


def _show(args: argparse.Namespace) -> int:
    p = call("GET", f"/api/patterns/{path_part(args.name)}")
    if args.json:
        print_json(p)
        return 0
    print(f"{p['name']} ({p['source']}): {p['title']}")
    if p["description"]:
        print(f"  {p['description']}")
    for e in p["engines"]:
        print(f"  engine   @{e['handle']} ({e['kind']})")
    for key in p["memories"]:
        print(f"  memory   {key}")
    for name in p["protocols"]:
        print(f"  protocol {name}")
    for handle in p["runners"]:
        print(f"  runner   @{handle}")
    if p["task"]:
        print(f"  task     {p['task']}")
    for s in p["run"]:
        print(f"  run      @{s['engine']} {s['text']}")
    return 0


def _said(row: dict[str, Any], args: argparse.Namespace, verb: str) -> int:
    if args.json:
        print_json(row)
        return 0
    where = f" (task {row['task']})" if row["task"] else ""
    state = "started: the run is posted" if row["state"] == "started" else (
        f"paused: mycelium pattern run -r {row['room']} starts it")
    print(f"{verb} {row['pattern']} in room {row['room']}{where}; {state}")
    return 0


def _load(args: argparse.Namespace) -> int:
    room = room_of(args)
    row = call("POST", f"/api/rooms/{path_part(room)}/patterns/{path_part(args.name)}",
               json_body={"created_by": handle_of(args), "private": args.private, "run": args.run})
    return _said(row, args, "loaded")


def _run(args: argparse.Namespace) -> int:
    room = room_of(args)
    base = f"/api/rooms/{path_part(room)}"
    if args.name:
        held = call("GET", f"{base}/pattern", ok=(404,))
        if held is None or held.get("error") in ("room_not_found", "pattern_not_loaded"):
            if held is not None and held.get("error") == "pattern_not_loaded":
                fail(f"pattern run: room {room!r} exists and holds no pattern: load {args.name} into a new "
                     "room")
            row = call("POST", f"{base}/patterns/{path_part(args.name)}",
                       json_body={"created_by": handle_of(args), "run": True})
            return _said(row, args, "loaded and started")
        if held["pattern"] != args.name:
            fail(f"pattern run: room {room!r} holds pattern {held['pattern']!r}, not {args.name!r}")
    row = call("POST", f"{base}/pattern/run", json_body={"by": handle_of(args)})
    return _said(row, args, "started")
