"""``mycelium transitions``: ls, show, release, dead — the operator's view of the ledger (via the hub)."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from mycelium.cli.client import call, fail, print_json, refused, request
from mycelium.cli.common import add_author, add_json, handle_of, human


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("transitions")
    tsub = p.add_subparsers(dest="transitions_command", metavar="<action>")
    tsub.required = True

    ls = tsub.add_parser("ls", help="list transitions (newest first)")
    ls.add_argument(
        "--stuck",
        nargs="?",
        type=float,
        const=3600.0,
        metavar="SECONDS",
        help="only in flight for at least this long (default 3600)",
    )
    ls.add_argument("--agent", help="only this agent's")
    ls.add_argument(
        "--outcome",
        type=str.upper,
        help="IN_FLIGHT, COMPLETED, FAILED_BEFORE_EFFECT, FAILED_AFTER_EFFECT, BLOCKED, UNKNOWN or EXPIRED",
    )
    ls.add_argument("--tool", help="only this tool's")
    ls.add_argument("--limit", type=int, default=100)
    add_json(ls)
    ls.set_defaults(func=_ls)

    show = tsub.add_parser("show", help="one transition in full")
    show.add_argument("request_id", help="the request id, or a start of it only one id has")
    add_json(show)
    show.set_defaults(func=_show)

    rel = tsub.add_parser("release", help="record a human verification (one-shot; goes to the receipt chain)")
    rel.add_argument("request_id", help="the request id, or a start of it only one id has")
    what = rel.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--not-executed",
        dest="verified",
        action="store_const",
        const="not_executed",
        help="the effect did not happen: the next dispatch runs the tool once",
    )
    what.add_argument(
        "--completed",
        dest="verified",
        action="store_const",
        const="completed",
        help="the effect happened: settle the transition (with --result)",
    )
    rel.add_argument("--reason", required=True, help="why (what was checked)")
    rel.add_argument("--result", help="the result to store with --completed (JSON)")
    rel.add_argument("--fence", type=int, help="refuse unless the transition is still at this fence")
    add_author(rel)
    add_json(rel)
    rel.set_defaults(func=_release)

    dead = tsub.add_parser("dead", help="assert a worker (owner host:pid) is dead")
    dead.add_argument("owner")
    dead.add_argument("--reason", required=True)
    dead.add_argument("--override", action="store_true", help="even if its heartbeat is recent")
    add_author(dead)
    add_json(dead)
    dead.set_defaults(func=_dead)


#: how many of the newest transitions a prefix is looked up among (the listing's largest page)
PREFIX_SCAN = 1000


def _line(t: dict[str, Any], width: int) -> str:
    """One transition; the request id in full, so ``show`` and ``release`` take it as printed."""
    ref = f"  ref={t['external_operation_ref']}" if t.get("external_operation_ref") else ""
    return (
        f"{t['request_id']:<{width}}  {t['tool']:<20}  {t['terminal_outcome']:<20}  "
        f"{t['side_effect_boundary']:<13}  fence {t['fence']}  {t['agent_id']}{ref}"
    )


def _ls(args: argparse.Namespace) -> int:
    rows = call(
        "GET",
        "/api/transitions",
        params={
            "stuck": args.stuck,
            "agent": args.agent,
            "outcome": args.outcome,
            "tool": args.tool,
            "limit": args.limit,
        },
    )
    if args.json:
        print_json(rows)
        return 0
    width = max((len(t["request_id"]) for t in rows), default=0)
    for t in rows:
        print(_line(t, width))
    if not rows:
        print("no transitions")
    return 0


def transition(ref: str) -> dict[str, Any]:
    """The transition with request id ``ref``, or the one whose id starts with ``ref`` among the
    newest ``PREFIX_SCAN``; a prefix more than one id starts with is refused with the candidates."""
    response = request("GET", "/api/transitions/" + quote(ref, safe=""))
    if response.status != 404:
        if response.status >= 400:
            refused(response)
        found: dict[str, Any] = response.json()
        return found
    rows = call("GET", "/api/transitions", params={"limit": PREFIX_SCAN})
    matches = [t for t in rows if t["request_id"].startswith(ref)]
    if not matches:
        refused(response)
    if len(matches) > 1:
        shown = "\n  ".join(t["request_id"] for t in matches[:20])
        more = f"\n  … {len(matches) - 20} more" if len(matches) > 20 else ""
        fail(f"{ref!r} is the start of {len(matches)} request ids; give more of it:\n  {shown}{more}")
    return dict(matches[0])


def _show(args: argparse.Namespace) -> int:
    t = transition(args.request_id)
    if args.json:
        print_json(t)
        return 0
    width = max(len(k) for k in t)
    for k, v in t.items():
        if v is not None:
            print(f"{k:<{width}}  {human(v)}")
    return 0


def _release(args: argparse.Namespace) -> int:
    result = None
    if args.result is not None:
        if args.verified != "completed":
            fail("--result goes with --completed")
        try:
            result = json.loads(args.result)
        except ValueError as exc:
            fail(f"--result is not JSON: {exc}")
    body = {
        "request_id": transition(args.request_id)["request_id"],
        "verified": args.verified,
        "by": handle_of(args),
        "reason": args.reason,
        "result": result,
        "expected_fence": args.fence,
    }
    t = call("POST", "/api/transitions/release", json_body=body)
    if args.json:
        print_json(t)
    else:
        print(
            f"released {t['request_id']} as {t['operator_resolution']} by {t['resolved_by']} "
            f"(was {t['released_from_outcome']}; receipt {t['receipt_ref']})"
        )
    return 0


def _dead(args: argparse.Namespace) -> int:
    rows = call(
        "POST",
        "/api/transitions/workers/dead",
        json_body={
            "owner": args.owner,
            "by": handle_of(args),
            "reason": args.reason,
            "override": args.override,
        },
    )
    if args.json:
        print_json(rows)
    else:
        print(f"{args.owner}: {len(rows)} in-flight transition(s) stamped dead")
    return 0
