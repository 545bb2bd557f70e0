"""``mycelium whoami [--sources]``: who the CLI acts as on this hub, and where each answer came from.

On a gated hub the principal is the hub's word (``GET /api/whoami`` with ``MYCELIUM_TOKEN``); on an
open one the CLI declares its handle (``--as``, else ``MYCELIUM_HANDLE``, else the login name).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from mycelium import environment
from mycelium.cli.client import api_url, call, print_json


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("whoami", help="who the CLI acts as on the hub")
    p.add_argument("--as", dest="handle", help="the handle a command would declare")
    p.add_argument("--sources", action="store_true", help="list every source in the order they count")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def sources(flag: str | None) -> list[dict[str, Any]]:
    """Each place the CLI's identity may come from, first that is set wins (for each of handle and
    token)."""
    handle_env = environment.value("handle")
    token = environment.value("token")
    member = environment.membership() or {}
    member_file = environment.membership_file()
    where = f"membership ({member_file})" if member_file else "membership"
    login = environment.default_handle()
    return [
        {"what": "handle", "source": "--as", "value": flag},
        {"what": "handle", "source": "MYCELIUM_HANDLE", "value": handle_env},
        {"what": "handle", "source": where, "value": member.get("handle")},
        {"what": "handle", "source": "login name" if os.environ.get("USER") else "default",
         "value": login},
        {"what": "token", "source": "MYCELIUM_TOKEN", "value": _shown(token)},
        {"what": "token", "source": where, "value": _shown(member.get("token"))},
    ]


def _shown(token: str | None) -> str | None:
    return None if not token else f"{token[:12]}…"


def run(args: argparse.Namespace) -> int:
    hub = call("GET", "/api/whoami")
    found = sources(args.handle)
    declared = next(s for s in found if s["what"] == "handle" and s["value"])
    answer: dict[str, Any] = {"hub": api_url(), **hub}
    if not hub.get("gated"):
        answer.update(handle=declared["value"], handle_source=declared["source"])
    if args.sources:
        answer["sources"] = found
    if args.json:
        print_json(answer)
        return 0
    if hub.get("gated"):
        print(f"@{hub['handle']} ({hub['role']}) on {api_url()}, verified: token of {hub['issuer']} "
              f"(subject {hub['subject']})")
    else:
        print(f"@{declared['value']} on {api_url()}, declared (from {declared['source']}); "
              "the hub is not gated, so nothing verifies it")
    if args.sources:
        for s in found:
            print(f"  {s['what']:<6} {s['source']:<16} {s['value'] if s['value'] else '—'}")
    return 0
