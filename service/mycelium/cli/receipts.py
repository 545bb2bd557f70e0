"""``mycelium receipts``: verify (online, or offline from an export), export JSONL, public keys, rotation."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mycelium.cli.client import call, fail, print_json
from mycelium.cli.common import add_json


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("receipts")
    rsub = p.add_subparsers(dest="receipts_command", metavar="<action>")
    rsub.required = True

    v = rsub.add_parser("verify", help="check hash chains and signatures (exit 1 on any problem)")
    v.add_argument("--agent", help="only this agent's chains (one per lane)")
    v.add_argument("--file", type=Path, help="verify this JSONL export offline instead of asking the hub")
    v.add_argument("--public-key", type=Path, help="with --file: a keyring (JSON) or PEM public key(s)")
    add_json(v)
    v.set_defaults(func=_verify)

    e = rsub.add_parser("export", help="write receipts as JSONL (verifiable offline with the public key)")
    e.add_argument("--since", help="recorded at or after this time (ISO 8601)")
    e.add_argument("--agent", help="only this agent's receipts")
    e.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")
    e.set_defaults(func=_export)

    k = rsub.add_parser(
        "public-key", help="the hub's public keyring (JSON; give it to an offline verify as --public-key)"
    )
    k.add_argument("-o", "--output", type=Path)
    k.set_defaults(func=_public_key)

    r = rsub.add_parser("rotate-key", help="the hub signs with a new key from now on; older keys retire")
    add_json(r)
    r.set_defaults(func=_rotate)


def _report(checked: int, problems: list[dict[str, Any]], as_json: bool) -> int:
    if as_json:
        print_json({"checked": checked, "problems": problems, "ok": not problems})
    else:
        for p in problems:
            chain = f"{p.get('agent_id')}/lane {p.get('lane')}"
            where = f"{chain}#{p.get('seq')}" if p.get("seq") is not None else chain
            print(f"{where}  {p.get('receipt_id') or '-'}  {p['problem']}")
        print(
            f"{checked} receipt(s) checked: "
            + ("all intact and signed" if not problems else f"{len(problems)} problem(s)")
        )
    return 0 if not problems else 1


def _verify(args: argparse.Namespace) -> int:
    if args.file is not None:
        from mycelium.ledger.receipts import load_public_keys, verify_records

        if args.public_key is None:
            fail("offline verification needs --public-key (from `mycelium receipts public-key`)")
        keys = load_public_keys(args.public_key.read_text())
        records = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
        if args.agent:
            records = [r for r in records if r.get("agent_id") == args.agent]
        checked, problems = verify_records(records, keys)
        return _report(checked, problems, args.json)
    out = call("GET", "/api/receipts/verify", params={"agent": args.agent})
    return _report(out["checked"], [*out["chain_problems"], *out["signature_problems"]], args.json)


def _export(args: argparse.Namespace) -> int:
    sink = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    after, written = 0, 0
    try:
        while True:
            rows = call(
                "GET",
                "/api/receipts",
                params={"since": args.since, "agent": args.agent, "after": after, "limit": 5000},
            )
            for row in rows:
                sink.write(json.dumps(row, sort_keys=True) + "\n")
            written += len(rows)
            if len(rows) < 5000:
                break
            after = rows[-1]["id"]
    finally:
        if args.output:
            sink.close()
    if args.output:
        print(f"{written} receipt(s) written to {args.output}", file=sys.stderr)
    return 0


def _public_key(args: argparse.Namespace) -> int:
    ring = call("GET", "/api/receipts/keys")
    text = json.dumps(ring, indent=2, default=str) + "\n"
    if args.output:
        args.output.write_text(text)
        print(f"{len(ring['keys'])} key(s) written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _rotate(args: argparse.Namespace) -> int:
    key = call("POST", "/api/receipts/keys/rotate")
    if args.json:
        print_json(key)
    else:
        print(f"now signing with key {key['key_id']}; earlier keys are retired (their signatures stay valid)")
    return 0
