"""Entry point of the ``mycelium`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mycelium.cli import (
    board,
    config,
    db,
    demo,
    memory,
    mirror,
    participate,
    receipts,
    room,
    run,
    transitions,
    up,
    worker,
)

GROUPS = [up, worker, db, config, room, memory, mirror, board, participate, transitions, receipts, run, demo]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mycelium", description="Mycelium hub: coordination for AI agents on PostgreSQL."
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    sub.required = True
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
