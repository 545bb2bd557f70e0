"""``mycelium engine``: register engines, summon one, list flows and episodes; ``mycelium agent ls``;
``mycelium board coordinate`` (registered by the board command, run here). HTTP only."""

from __future__ import annotations

import argparse
from typing import Any

from mycelium.cli.client import call, print_json
from mycelium.cli.common import add_author, add_json, add_room, handle_of, path_part, room_of
from mycelium.contracts import vocabulary


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    register_agents(sub)
    p = sub.add_parser("engine")
    esub = p.add_subparsers(dest="engine_command", metavar="<action>")
    esub.required = True

    c = esub.add_parser("create", help="register an engine in a room (writes its agents/<handle> manifest)")
    c.add_argument("engine", help="its handle, e.g. conductor")
    c.add_argument("--kind", choices=vocabulary()["engine_kinds"], default="conductor")
    c.add_argument(
        "--description",
        default="",
        help="what it is (a persona's system prompt goes in agents/<handle>/notes)",
    )
    _common(c, author=True)
    c.set_defaults(func=_create)

    ls = esub.add_parser("ls", help="the room's engines")
    _common(ls)
    ls.set_defaults(func=_ls)

    i = esub.add_parser(
        "invoke", help="summon an engine: post '@<engine> <text>' (in a thread with --thread)"
    )
    i.add_argument("engine")
    i.add_argument("text", help='e.g. "gated @nova @julia: ship the pricing page", "list", "show gated"')
    i.add_argument("--thread", help="a thread's short id or URN (default: the room)")
    _common(i, author=True)
    i.set_defaults(func=_invoke)

    f = esub.add_parser("flows", help="the flows a room can run (its own, then the built-ins)")
    _common(f)
    f.set_defaults(func=_flows)

    ep = esub.add_parser("episodes", help="the room's runs, newest first (or one, by its short id)")
    ep.add_argument("short_id", nargs="?")
    ep.add_argument("--limit", type=int, default=50)
    _common(ep)
    ep.set_defaults(func=_episodes)

    d = esub.add_parser(
        "demo",
        help="a conductor running review then concord with two scripted members, "
        "each its own process, on a temporary embedded database",
    )
    d.add_argument("--keep", action="store_true", help="keep the temporary folder (and print it)")
    d.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from mycelium.engines.demo import run

    return run(keep=args.keep)


def register_agents(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("agent")
    asub = p.add_subparsers(dest="agent_command", metavar="<action>")
    asub.required = True
    ls = asub.add_parser("ls", help="the room's members: people, agents and engines, with kind and presence")
    _common(ls)
    ls.set_defaults(func=_agents)


def register_coordinate(bsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``board coordinate <row> <engine> "…"``: summon an engine into a row's thread."""
    c = bsub.add_parser(
        "coordinate",
        help='summon an engine into a row\'s thread, e.g. coordinate work/x conductor "gated @a @b: ship it"',
    )
    c.add_argument("row", help="the row's key")
    c.add_argument("engine")
    c.add_argument("text")
    _common(c, author=True)
    c.set_defaults(func=_coordinate)


def _common(p: argparse.ArgumentParser, *, author: bool = False) -> None:
    add_room(p)
    if author:
        add_author(p)
    add_json(p)


def _base(args: argparse.Namespace) -> str:
    return f"/api/rooms/{path_part(room_of(args))}"


def _out(args: argparse.Namespace, value: Any, text: str) -> int:
    if args.json:
        print_json(value)
    else:
        print(text)
    return 0


def _create(args: argparse.Namespace) -> int:
    made = call(
        "POST",
        f"{_base(args)}/engines",
        json_body={
            "handle": args.engine,
            "kind": args.kind,
            "description": args.description,
            "created_by": handle_of(args),
        },
    )
    return _out(args, made, f"@{made['handle']}: {made['kind']} engine in {room_of(args)}")


def _ls(args: argparse.Namespace) -> int:
    rows = call("GET", f"{_base(args)}/engines")
    return _out(
        args,
        rows,
        "\n".join(f"@{r['handle']}\t{r['kind']}\t{r['description']}" for r in rows) or "(no engines)",
    )


def _agents(args: argparse.Namespace) -> int:
    rows = call("GET", f"{_base(args)}/agents")
    lines = [
        f"@{r['handle']}\t{r['adapter']}\t{r['kind']}\t{'present' if r['present'] else 'away'}" for r in rows
    ]
    return _out(args, rows, "\n".join(lines) or "(nobody)")


def _posted(args: argparse.Namespace, message: dict[str, Any]) -> int:
    return _out(args, message, f"posted {message['id']} in {message['episode'].rsplit(':', 1)[-1]}")


def _invoke(args: argparse.Namespace) -> int:
    body = {"text": args.text, "sender_handle": handle_of(args), "episode": args.thread}
    return _posted(
        args, call("POST", f"{_base(args)}/engines/{path_part(args.engine)}/invoke", json_body=body)
    )


def _coordinate(args: argparse.Namespace) -> int:
    body = {"key": args.row, "engine": args.engine, "text": args.text, "sender_handle": handle_of(args)}
    return _posted(args, call("POST", f"{_base(args)}/coordinate", json_body=body))


def _flows(args: argparse.Namespace) -> int:
    rows = call("GET", f"{_base(args)}/protocols")
    lines = [f"{r['name']}\t{r['source']}\t{r.get('description') or r.get('problem', '')}" for r in rows]
    return _out(args, rows, "\n".join(lines))


def _episodes(args: argparse.Namespace) -> int:
    if args.short_id:
        e = call("GET", f"{_base(args)}/episodes/{path_part(args.short_id)}")
        trace = "\n".join(
            f"  {t['turn']}. {t['step']} → {t.get('next')} {t.get('stances', '')}" for t in e["trace"]
        )
        text = (
            f"{e['short_id']}\t{e['flow']['name']}\t{e['outcome']}\tsteps {len(e['trace'])}\n"
            f"within {e['within']}\n{trace}"
        )
        return _out(args, e, text)
    rows = call("GET", f"{_base(args)}/episodes", params={"limit": args.limit})["episodes"]
    lines = [f"{e['short_id']}\t{e['flow']['name']}\t{e['outcome']}\t{e['current_step'] or ''}" for e in rows]
    return _out(args, rows, "\n".join(lines) or "(no episodes)")
