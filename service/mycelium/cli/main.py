"""Entry point of the ``mycelium`` command.

Commands are listed here with the module that implements them; a call imports only its command's
module (which registers its subcommands with ``register(sub)``), so ``mycelium respond`` does not
load the hub server and ``mycelium --help`` loads no command at all.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

DESCRIPTION = "Mycelium hub: coordination for AI agents on PostgreSQL."

#: exit status after Ctrl-C (128 + SIGINT), as a shell reports it
INTERRUPTED = 130

#: command -> (module, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("mycelium.cli.up", "run the hub (HTTP API, workers, embedded database by default; -d: detached)"),
    "status": ("mycelium.cli.stack", "how the hub is: its database, workers, loops and SLIM, one line each"),
    "logs": ("mycelium.cli.stack", "the background hub's log (-f: follow it)"),
    "down": ("mycelium.cli.stack", "stop the hub `mycelium up -d` started"),
    "doctor": ("mycelium.cli.doctor", "check the set-up: Python, PostgreSQL, folders, ports, model, clocks"),
    "worker": ("mycelium.cli.worker", "run the hub's background loops, without HTTP"),
    "slim": ("mycelium.cli.slim", "run a SLIM node for the rooms' channels, on its own"),
    "db": ("mycelium.cli.db", "database: migrate, open psql"),
    "config": ("mycelium.cli.config", "hub and room settings (show, set, unset)"),
    "room": ("mycelium.cli.room", "rooms: create, ls, show, rm, send, messages, search, watch"),
    "memory": ("mycelium.cli.memory", "memories: set, get, ls, search, rm, history, links, subscribe"),
    "mirror": ("mycelium.cli.mirror", "markdown mirror: export, import"),
    "board": ("mycelium.cli.board", "the board: tasks, leases, dependencies"),
    "await": ("mycelium.cli.participate", "wait for the next message addressed to a handle"),
    "respond": ("mycelium.cli.participate", "reply as a handle (markers become payload)"),
    "transitions": ("mycelium.cli.transitions", "the transition ledger: ls, show, release, dead"),
    "receipts": ("mycelium.cli.receipts", "signed receipts: verify, export, public-key, rotate-key"),
    "run": ("mycelium.cli.run", "run a Python app with the configured tools ledgered (-- python -m app)"),
    "demo": ("mycelium.cli.demo", "see the redispatch bug and its fix; demo flow: a conductor at work"),
    "export": ("mycelium.cli.export", "a room's signed compliance bundle (export verify BUNDLE checks one)"),
    "join": ("mycelium.cli.join", "redeem a join code: this folder acts as that room's member"),
    "whoami": ("mycelium.cli.whoami", "who the CLI acts as on the hub, and where that comes from"),
    "init": ("mycelium.cli.init", "write a starter mycelium.yaml and a ledgered tool (--minimal, --full)"),
    "engine": ("mycelium.cli.engines", "engines: create, ls, invoke, flows, episodes"),
    "agent": ("mycelium.cli.engines", "the room's members: ls (people, agents, engines)"),
    "runner": ("mycelium.cli.runner", "start agents when they are woken: add, ls, rm, test, jobs, approve"),
    "file": ("mycelium.cli.file", "a room's files: put, get (--range), ls, rm"),
    "pattern": ("mycelium.cli.pattern", "scenario packs: ls, show, load (a room, paused), run"),
    "events": ("mycelium.cli.events", "a handle's events in all its rooms: its turns, memories it follows"),
    "swarm": ("mycelium.cli.swarm", 'a team works a goal: swarm "<goal>" --team @lead @b @c (--wait, --ls)'),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of one command (its module imported and registered), or, with None, of the
    command list (nothing imported)."""
    parser = argparse.ArgumentParser(prog="mycelium", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    sub.required = True
    if command is None:
        for name, (_, text) in COMMANDS.items():
            sub.add_parser(name, help=text, add_help=False)
        return parser
    module_name = COMMANDS[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            parser.error(f"'{command}' is not part of this install ({module_name} is missing)")
        lacking(command, exc)
    module.register(sub)
    for name, p in sub.choices.items():
        if p.description is None and name in COMMANDS:
            p.description = COMMANDS[name][1]
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments of a command line (``argv`` without the program name). A command that passes
    arguments on to another program (``db psql``) sets ``passthrough``: what it does not know itself
    goes there, in order, so ``mycelium db psql -c 'SELECT 1'`` needs no ``--``."""
    command = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(command)
    if command is None:
        parser.add_argument("-V", "--version", action="version", version=f"mycelium {version()}")
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "passthrough", None) is None:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.passthrough = [*extra, *args.passthrough]
    return args


def version() -> str:
    from mycelium import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(list(sys.argv[1:] if argv is None else argv))
        try:
            result = args.func(args)
        except ModuleNotFoundError as exc:
            lacking(args.command, exc)
    except KeyboardInterrupt:  # Ctrl-C: the shell's status for SIGINT, and no traceback
        print(file=sys.stderr)
        return INTERRUPTED
    return int(result or 0)


def lacking(command: str, exc: ModuleNotFoundError) -> NoReturn:
    """The base install carries what the HTTP verbs need; the hub's own commands need the extra."""
    if not exc.name or exc.name.split(".")[0] == "mycelium":
        raise exc
    print(f"mycelium {command} needs {exc.name.split('.')[0]}, which is not installed: "
          "pip install 'mycelium-hub[hub]'", file=sys.stderr)
    raise SystemExit(1)


if __name__ == "__main__":
    sys.exit(main())
