"""``mycelium room``: create, list, show, remove rooms."""

from __future__ import annotations

import argparse

from mycelium.cli.client import call, print_json
from mycelium.cli.common import add_author, add_json, add_yes, confirm, human_fields, path_part
from mycelium.cli.room_messages import register_room_commands


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("room")
    rsub = p.add_subparsers(dest="room_command", metavar="<action>")
    rsub.required = True

    c = rsub.add_parser("create", help="create a room")
    c.add_argument("name")
    c.add_argument("--title")
    c.add_argument("--description")
    c.add_argument("--private", action="store_true", help="listed only to its owner and members")
    c.add_argument("--owner")
    add_author(c)
    add_json(c)
    c.set_defaults(func=_create)

    ls = rsub.add_parser("ls", help="list rooms")
    ls.add_argument("--viewer", help="also list private rooms this handle may see")
    add_json(ls)
    ls.set_defaults(func=_ls)

    show = rsub.add_parser("show", help="show one room")
    show.add_argument("name")
    add_json(show)
    show.set_defaults(func=_show)

    rm = rsub.add_parser("rm", help="delete a room and everything in it")
    rm.add_argument("name")
    add_yes(rm)
    rm.set_defaults(func=_rm)

    register_room_commands(rsub)


def _create(args: argparse.Namespace) -> int:
    body = {"name": args.name, "title": args.title, "description": args.description,
            "is_public": not args.private, "owner": args.owner, "created_by": args.handle}
    room = call("POST", "/api/rooms", json_body={k: v for k, v in body.items() if v is not None})
    if args.json:
        print_json(room)
    else:
        print(f"created room {room['name']}")
    return 0


def _ls(args: argparse.Namespace) -> int:
    rooms = call("GET", "/api/rooms", params={"viewer": args.viewer})
    if args.json:
        print_json(rooms)
        return 0
    for room in rooms:
        privacy = "" if room["is_public"] else "  (private)"
        title = f"  {room['title']}" if room.get("title") else ""
        print(f"{room['name']}{title}{privacy}")
    return 0


def _show(args: argparse.Namespace) -> int:
    room = call("GET", f"/api/rooms/{path_part(args.name)}")
    if args.json:
        print_json(room)
    else:
        print(human_fields({"name": room["name"], "title": room.get("title"),
                            "description": room.get("description"),
                            "visibility": "public" if room.get("is_public") else "private",
                            "owner": room.get("owner"), "members": room.get("members"),
                            "created": room.get("created_at")}))
    return 0


def _rm(args: argparse.Namespace) -> int:
    room = call("GET", f"/api/rooms/{path_part(args.name)}")  # a missing room is refused before asking
    confirm(args, f"delete room {room['name']} and everything in it (memories, board, messages)?")
    call("DELETE", f"/api/rooms/{path_part(args.name)}")
    print(f"deleted room {args.name}")
    return 0
