"""``mycelium export --room R [--since T] [-o FILE]``: the room's signed compliance bundle, from the
hub; ``mycelium export verify BUNDLE [--public-key HEX|FILE]``: check one offline (exit 1 with every
problem listed when it does not hold)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mycelium.cli.client import print_json, refused, request
from mycelium.cli.common import fail, path_part


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("export", help="a room's signed compliance bundle; export verify BUNDLE checks one")
    p.add_argument("--room", help="the room to export")
    p.add_argument("--since", help="only messages, transitions and receipts from this time (ISO 8601)")
    p.add_argument("-o", "--output", type=Path, help="where to write it (default mycelium-export-ROOM.zip)")
    p.set_defaults(func=_export)
    verbs = p.add_subparsers(dest="verb", metavar="verify")
    v = verbs.add_parser("verify", help="check a bundle offline")
    v.add_argument("bundle", type=Path)
    v.add_argument("--public-key", help="the hub's receipt public key (hex, or a file holding it) to trust")
    v.add_argument("--json", action="store_true", help="print JSON")
    v.set_defaults(func=_verify)


def _export(args: argparse.Namespace) -> int:
    if not args.room:
        fail("export needs --room (or: mycelium export verify BUNDLE)")
    params = {"since": args.since} if args.since else None
    response = request("GET", f"/api/rooms/{path_part(args.room)}/export", params=params, timeout=600)
    if response.status >= 400:
        refused(response)
    out = args.output or Path(f"mycelium-export-{args.room.replace('/', '_')}.zip")
    out.write_bytes(response.body)
    print(f"wrote {out} ({len(response.body)} bytes)")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from mycelium.export.verify import verify

    try:
        data = args.bundle.read_bytes()
    except OSError as exc:
        fail(f"cannot read {args.bundle}: {exc}")
    trusted = None
    if args.public_key:
        given = Path(args.public_key)
        text = given.read_text().strip() if given.is_file() else args.public_key
        try:
            trusted = bytes.fromhex(text)
        except ValueError:
            fail("--public-key takes the key as hex (or a file holding it)")
    summary, problems = verify(data, trusted)
    if args.json:
        print_json({**summary, "problems": problems, "ok": not problems})
    else:
        records = summary.get("records", {})
        counts = ", ".join(f"{n} {name.removesuffix('.jsonl')}" for name, n in records.items())
        print(f"{args.bundle}: room {summary.get('room')!r}, signed by {summary.get('signed_by')}; {counts}")
        for problem in problems:
            print(f"  PROBLEM {problem}", file=sys.stderr)
        print("verified: intact and signed" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1
