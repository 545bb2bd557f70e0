"""``mycelium doctor``: check this set-up and say what is wrong in words, one line per check
(Python, packages, the data folder, the embedded server's binaries, PostgreSQL and pgvector, the
clock against the database's, the port, the model, the worker command, SLIM). Exit code 1 when a
check fails; warnings alone exit 0."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from mycelium.cli.common import add_database_options

MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("doctor")
    add_database_options(p)
    p.add_argument("--host", help="the address the hub listens on (MYCELIUM_HOST)")
    p.add_argument("--port", type=int, help="the port the hub listens on (MYCELIUM_PORT)")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mycelium.doctor import run_checks
    from mycelium.settings import load_settings

    settings = load_settings(host=args.host, port=args.port, data_dir=args.data_dir,
                             database_url=args.database_url)
    checks = run_checks(settings)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{MARK[c.state]}  {c.name:<{width}}  {c.detail}")
        failed = [c.name for c in checks if c.state == "fail"]
        warned = sum(c.state == "warn" for c in checks)
        print(f"\n{len(failed)} check(s) failed: {', '.join(failed)}" if failed else
              "\nall checks passed" + (f" ({warned} warning(s))" if warned else ""))
    return 1 if any(c.state == "fail" for c in checks) else 0
