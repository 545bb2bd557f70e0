"""``mycelium run --config mycelium.yaml -- python -m app``: ledger the configured tools, then run the app.

Every ``callable: module:function`` under ``tools:`` and ``tasks:`` is imported and replaced in its
module by its ledgered version *before* the application starts, so ``from module import function``
in the app gets the wrapped one. The app then runs in this same interpreter (``-m module`` or a
script path), as ``python`` would run it.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
from pathlib import Path

from mycelium.cli.client import fail

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_REFUSED_FLAGS = {"-E", "-I", "-S"}
_HARMLESS_FLAGS = {"-u", "-B", "-O", "-OO", "-q", "-b", "-bb", "-s"}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run")
    p.add_argument("--config", type=Path, default=Path("mycelium.yaml"), help="default ./mycelium.yaml")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- python -m module [args] | python script.py")
    p.set_defaults(func=run)


def parse_command(command: list[str]) -> tuple[str, str, list[str]]:
    """("module" | "script" | "code", target, argv for the app)."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        fail("what should run? e.g. mycelium run --config mycelium.yaml -- python -m my_agent")
    exe, rest = command[0], command[1:]
    if not (_PYTHON.match(Path(exe).name) or os.path.realpath(exe) == os.path.realpath(sys.executable)):
        fail(f"mycelium run starts Python apps (python -m module | python script.py), not {exe!r}")
    while rest:
        flag = rest[0]
        if flag in _REFUSED_FLAGS:
            fail(f"{flag} would disable the instrumentation; run without it")
        if flag in ("-m", "-c"):
            if len(rest) < 2:
                fail(f"{flag} needs an argument")
            kind = "module" if flag == "-m" else "code"
            return kind, rest[1], rest[2:]
        if flag in _HARMLESS_FLAGS:
            rest = rest[1:]
            continue
        if flag in ("-W", "-X"):
            rest = rest[2:]
            continue
        if flag.startswith("-"):
            fail(f"unsupported interpreter option {flag}")
        return "script", flag, rest[1:]
    fail("nothing to run after the interpreter")


def run(args: argparse.Namespace) -> int:
    from mycelium.ledger.config import ConfigError, load_config

    kind, target, argv = parse_command(list(args.command))
    sys.path.insert(0, os.getcwd() if kind != "script" else str(Path(target).resolve().parent))
    try:
        wrapped = load_config(args.config).instrument_callables()
    except ConfigError as exc:
        fail(f"{args.config}: {exc}")
    if os.environ.get("MYCELIUM_RUN_VERBOSE"):
        print(f"mycelium run: ledgered {', '.join(wrapped) or 'nothing'}", file=sys.stderr)
    if kind == "module":
        sys.argv = [target, *argv]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "script":
        sys.argv = [target, *argv]
        runpy.run_path(target, run_name="__main__")
    else:
        sys.argv = ["-c", *argv]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
    return 0
