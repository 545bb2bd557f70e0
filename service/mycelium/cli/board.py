"""``mycelium board``: file, list, claim, release, resolve, block, unblock, dismiss, promote, fields,
and the dependency gate. A row is named by its key or its thread's short id."""

from __future__ import annotations

import argparse
from typing import Any

from mycelium.cli.client import call, fail, print_json
from mycelium.cli.common import (
    add_author,
    add_json,
    add_room,
    handle_of,
    human_fields,
    key_values,
    path_part,
    room_of,
)
from mycelium.cli.engines import register_coordinate
from mycelium.cli.room_messages import register_thread_commands

FILTERS = ("needs-you", "in-flight", "resolved", "all")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("board")
    bsub = p.add_subparsers(dest="board_command", metavar="<action>")
    bsub.required = True

    n = bsub.add_parser("new", help="file a task in work/")
    n.add_argument("title")
    n.add_argument("--assign", metavar="@HANDLE", help="who it is for")
    n.add_argument("--parent", metavar="KEY", help="the task it is part of (its part-of field)")
    n.add_argument("--depends-on", dest="depends_on", action="append", default=[], metavar="KEY",
                   help="a row it waits on until that row is settled (its depends-on field; repeatable)")
    n.add_argument("--key", help="the row's key (default work/<slug of the title>)")
    _common(n, json_out=True, author=True)
    n.set_defaults(func=_new)

    ls = bsub.add_parser("ls", help="list board rows")
    ls.add_argument("--filter", choices=FILTERS, default="all")
    ls.add_argument("--namespace", choices=("decisions", "status", "work", "failed"))
    ls.add_argument("--limit", type=int, default=200)
    _common(ls, json_out=True)
    ls.set_defaults(func=_ls)

    show = bsub.add_parser("show", help="one row with its lease")
    show.add_argument("row", help="key or short thread id")
    _common(show, json_out=True)
    show.set_defaults(func=_show)

    c = bsub.add_parser("claim", help="take the lease on a work/ row")
    c.add_argument("row")
    c.add_argument("--ttl", type=int, default=30, help="minutes (default 30)")
    c.add_argument("--force", action="store_true", help="claim even while it waits on dependencies")
    _common(c, json_out=True, author=True)
    c.set_defaults(func=_claim)

    r = bsub.add_parser("release", help="give the lease back")
    r.add_argument("row")
    r.add_argument("--note", help="why (default: released)")
    r.add_argument("--force", action="store_true",
                   help="release a live lease someone else holds (the released notice records it)")
    _common(r, json_out=True, author=True)
    r.set_defaults(func=_release)

    rs = bsub.add_parser("resolve", help="mark the work done")
    rs.add_argument("row")
    _common(rs, json_out=True, author=True)
    rs.set_defaults(func=_resolve)

    rn = bsub.add_parser("renew", help="refresh your leases that are past half their time")
    _common(rn, json_out=True, author=True)
    rn.set_defaults(func=_renew)

    b = bsub.add_parser("block", help="mark a row blocked on something")
    b.add_argument("row")
    b.add_argument("--on", required=True, help='what it waits for, e.g. "#502"')
    _common(b, json_out=True, author=True)
    b.set_defaults(func=_verb("block"))

    for verb, text in (("unblock", "clear blocked_by"), ("dismiss", "set status dismissed")):
        v = bsub.add_parser(verb, help=text)
        v.add_argument("row")
        _common(v, json_out=True, author=True)
        v.set_defaults(func=_verb(verb))

    pr = bsub.add_parser("promote", help="owned elsewhere now: resolve here and say where")
    pr.add_argument("row")
    pr.add_argument("--url", help="where it lives now")
    _common(pr, json_out=True, author=True)
    pr.set_defaults(func=_verb("promote"))

    f = bsub.add_parser("fields", help="read a row's fields, or write some with --set")
    f.add_argument("row")
    f.add_argument("-s", "--set", action="append", default=[], metavar="K=V",
                   help="write a field (a JSON literal such as true, 3, [\"a\"] as typed, else the text; "
                        "empty clears it; repeatable)")
    _common(f, json_out=True, author=True)
    f.set_defaults(func=_fields)

    g = bsub.add_parser("gate", help="the dependency gate: show, or turn on/off/clear")
    g.add_argument("state", nargs="?", choices=("on", "off", "clear"))
    g.add_argument("--hub", action="store_true", help="the hub-wide setting instead of the room's")
    _common(g, json_out=True, author=True)
    g.set_defaults(func=_gate)

    register_thread_commands(bsub)
    register_coordinate(bsub)


def _common(p: argparse.ArgumentParser, *, json_out: bool = False, author: bool = False) -> None:
    add_room(p)
    if author:
        add_author(p)
    if json_out:
        add_json(p)


def _base(args: argparse.Namespace) -> str:
    return f"/api/rooms/{path_part(room_of(args))}"


def _key(args: argparse.Namespace) -> str:
    """The row's key, from a key or a short thread id."""
    row = call("GET", f"{_base(args)}/tasks/{path_part(args.row)}")
    return str(row["key"])


def _line(row: dict[str, Any]) -> str:
    lease = row.get("assignment") or ""
    if row.get("owner") and lease in ("held", "expired"):
        lease += f" @{row['owner']}"
    waits = f"  waits on {', '.join(row['waiting_on'])}" if row.get("waiting_on") else ""
    blocked = f"  blocked on {row['blocked_by']}" if row.get("blocked_by") else ""
    status = row.get("status") or "-"
    title = row.get("title") or ""
    return f"{row['short_id']}  {row['key']:<40} {status:<10} {lease:<18} {title}{waits}{blocked}"


def lease_line(lease: dict[str, Any]) -> str:
    who = f" @{lease['owner']}" if lease.get("owner") else ""
    fresh = f" ({lease['freshness']})" if lease.get("freshness") else ""
    note = f"  {lease['assignment_note']}" if lease.get("assignment_note") else ""
    waits = f"  waits on {', '.join(lease['waiting_on'])}" if lease.get("waiting_on") else ""
    return f"{lease['key']}: {lease['assignment']}{who}{fresh}{note}{waits}"


def _out(args: argparse.Namespace, value: Any, text: str) -> int:
    if args.json:
        print_json(value)
    else:
        print(text)
    return 0


def _new(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"title": args.title, "handle": handle_of(args)}
    for name in ("key", "parent", "depends_on"):
        if getattr(args, name):
            body[name] = getattr(args, name)
    if args.assign:
        body["assignee"] = args.assign
    m = call("POST", f"{_base(args)}/tasks", json_body=body)
    text = f"{m['key']}  thread {m['episode'].rsplit(':', 1)[-1]}"
    if args.depends_on:
        text += f"  waits on {', '.join(args.depends_on)}"
    return _out(args, m, text)


def _ls(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"filter": args.filter, "namespace": args.namespace, "limit": args.limit}
    rows = call("GET", f"{_base(args)}/tasks", params=params)
    return _out(args, rows, "\n".join(_line(r) for r in rows) if rows else "(no rows)")


def _show(args: argparse.Namespace) -> int:
    row = call("GET", f"{_base(args)}/tasks/{path_part(args.row)}")
    return _out(args, row, _detail(row))


def _detail(row: dict[str, Any]) -> str:
    """One row for ``show``: what it is, who it is for, its lease and what it waits on."""
    lease = row.get("assignment") or "—"
    if row.get("owner") and lease in ("held", "expired"):
        lease += f" by @{row['owner']}"
    if row.get("expires_at") and row.get("assignment") == "held":
        lease += f" until {row['expires_at']}"
    elif row.get("expires_at") and row.get("assignment") == "expired":
        lease += f" (ended {row['expires_at']})"
    if row.get("freshness"):
        lease += f" ({row['freshness']})"
    assignee = row.get("assignee")
    return f"{row['short_id']}  {row['key']}\n" + human_fields({
        "title": row.get("title"), "status": row.get("status"),
        "assignee": f"@{assignee.lstrip('@')}" if assignee else None,
        "lease": lease, "waits on": row.get("waiting_on"), "blocked on": row.get("blocked_by"),
        "part of": row.get("parent"), "attention": (row.get("attention") or "").replace("_", " ") or None,
    })


def _claim(args: argparse.Namespace) -> int:
    body = {"key": _key(args), "handle": handle_of(args), "ttl_minutes": args.ttl, "force": args.force}
    lease = call("POST", f"{_base(args)}/assignments/claim", json_body=body)
    return _out(args, lease, lease_line(lease))


def _release(args: argparse.Namespace) -> int:
    body = {"key": _key(args), "handle": handle_of(args), "note": args.note, "force": args.force}
    lease = call("POST", f"{_base(args)}/assignments/release", json_body=body)
    return _out(args, lease, lease_line(lease))


def _resolve(args: argparse.Namespace) -> int:
    body = {"key": _key(args), "handle": handle_of(args)}
    lease = call("POST", f"{_base(args)}/assignments/resolve", json_body=body)
    return _out(args, lease, lease_line(lease))


def _renew(args: argparse.Namespace) -> int:
    result = call("POST", f"{_base(args)}/assignments/renew", json_body={"handle": handle_of(args)})
    keys = [r["key"] for r in result["renewed"]]
    return _out(args, result, f"renewed {', '.join(keys)}" if keys else "nothing to renew")


def _verb(verb: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        body: dict[str, Any] = {"key": _key(args), "handle": handle_of(args)}
        if verb == "block":
            body["on"] = args.on
        if verb == "promote" and args.url:
            body["url"] = args.url
        row = call("POST", f"{_base(args)}/board/{verb}", json_body=body)
        return _out(args, row, _line(row))

    return run


def _fields(args: argparse.Namespace) -> int:
    key = _key(args)
    if args.set:
        body = {"key": key, "handle": handle_of(args), "fields": key_values(args.set, "--set")}
        call("POST", f"{_base(args)}/fields", json_body=body)
    got = call("GET", f"{_base(args)}/fields/{path_part(key)}")
    text = human_fields(got["fields"]) or "(no fields)"
    return _out(args, got, text)


def _gate(args: argparse.Namespace) -> int:
    path = "/api/board/gate" if args.hub else f"{_base(args)}/board/gate"
    if args.state is None:
        if args.hub:
            fail("show the gate per room: mycelium board gate --room R")
        got = call("GET", path)
    else:
        enabled = {"on": True, "off": False, "clear": None}[args.state]
        got = call("PUT", path, json_body={"enabled": enabled, "handle": handle_of(args)})
    where = "hub" if args.hub else f"room {got['room']}"
    return _out(args, got, f"dependency gate ({where}): {_on_off(got['dependency_gate'])}"
                           f"  (room: {_on_off(got['room_setting'])}, hub: {_on_off(got['hub_setting'])})")


def _on_off(setting: bool | None) -> str:
    return "not set" if setting is None else "on" if setting else "off"
