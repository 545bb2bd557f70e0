"""``mycelium config``: the hub's settings, hub-wide or for one room.

Settings live in the database, so every replica obeys the same value; a room's own value overrides
the hub-wide one. ``mycelium config`` lists them with where each value comes from.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mycelium.cli.client import call, print_json
from mycelium.cli.common import add_author, add_json, handle_of, literal, path_part


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config")
    csub = p.add_subparsers(dest="config_command")
    p.set_defaults(func=_show, room=None, json=False)

    show = csub.add_parser("show", help="every setting, its value in force and where it comes from")
    _where(show)
    add_json(show)
    show.set_defaults(func=_show)

    put = csub.add_parser("set", help="write a setting (a value like true, false, 120)")
    put.add_argument("name", help="e.g. board.dependency_gate")
    put.add_argument("value", help="a JSON literal as typed (true, false, 120), anything else the text typed")
    _where(put)
    add_author(put)
    add_json(put)
    put.set_defaults(func=_set)

    unset = csub.add_parser("unset", help="clear a setting (a room follows the hub, the hub its default)")
    unset.add_argument("name")
    _where(unset)
    add_author(unset)
    add_json(unset)
    unset.set_defaults(func=_unset)


def _where(p: argparse.ArgumentParser) -> None:
    p.add_argument("-r", "--room", help="a room's own setting (default: hub-wide)")


def _base(args: argparse.Namespace) -> str:
    return f"/api/rooms/{path_part(args.room)}/config" if args.room else "/api/config"


def _line(s: dict[str, Any]) -> str:
    return f"{s['name']} = {json.dumps(s['value'], ensure_ascii=False)}  ({s['source']})"


def _show(args: argparse.Namespace) -> int:
    got = call("GET", f"{_base(args)}/")
    if args.json:
        print_json(got)
        return 0
    for s in got["settings"]:
        print(f"{_line(s):<44}  {s['description']}")
    return 0


def _set(args: argparse.Namespace) -> int:
    body = {"value": literal(args.value), "handle": handle_of(args)}
    return _print(args, call("PUT", f"{_base(args)}/{path_part(args.name)}", json_body=body))


def _unset(args: argparse.Namespace) -> int:
    path = f"{_base(args)}/{path_part(args.name)}"
    return _print(args, call("DELETE", path, params={"by": handle_of(args)}))


def _print(args: argparse.Namespace, got: dict[str, Any]) -> int:
    if args.json:
        print_json(got)
    else:
        print(_line(got))
    return 0
