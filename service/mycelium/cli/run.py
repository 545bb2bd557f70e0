"""``mycelium run --config mycelium.yaml -- python -m app``: ledger the configured tools, then run the app.

Every ``callable: module:function`` under ``tools:`` and ``tasks:`` is imported and replaced in its
module by its ledgered version *before* the application starts, so ``from module import function``
in the app gets the wrapped one. The app then runs in this same interpreter (``-m module`` or a
script path), as ``python`` would run it.

Nothing but a bug prints a traceback: a wrong configuration or store URL, an app that cannot be
found, and a ledger error the app lets escape (its store unreachable, a transition that needs a human)
are one message each and exit 1; the SDK's warnings are one line; the app's own exceptions print the
traceback ``python`` would print (the app's frames, not this command's).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import runpy
import sys
import traceback
import warnings
from pathlib import Path
from types import TracebackType
from typing import TextIO

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
    from mycelium.ledger.errors import LedgerError

    kind, target, argv = parse_command(list(args.command))
    sys.path.insert(0, os.getcwd() if kind != "script" else str(Path(target).resolve().parent))
    _check_target(kind, target)
    _short_sdk_warnings()
    try:
        wrapped = load_config(args.config).instrument_callables()
    except (ConfigError, LedgerError, ImportError) as exc:  # ImportError: a store's extra is not installed
        fail(f"{args.config}: {exc}")
    if os.environ.get("MYCELIUM_RUN_VERBOSE"):
        print(f"mycelium run: ledgered {', '.join(wrapped) or 'nothing'}", file=sys.stderr)
    try:
        _run_app(kind, target, argv)
    except (LedgerError, ConfigError) as exc:
        fail(f"{target}: {type(exc).__name__}: {exc}{_raised_at(exc.__traceback__)}")
    except Exception as exc:  # the app's own bug: its traceback, as python prints it
        traceback.print_exception(type(exc), exc, _app_frames(exc.__traceback__))
        return 1
    return 0


def _run_app(kind: str, target: str, argv: list[str]) -> None:
    if kind == "module":
        sys.argv = [target, *argv]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "script":
        sys.argv = [target, *argv]
        runpy.run_path(target, run_name="__main__")
    else:
        sys.argv = ["-c", *argv]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})


def _check_target(kind: str, target: str) -> None:
    """The app exists: said as python says it, not as runpy's traceback."""
    if kind == "script" and not Path(target).is_file():
        fail(f"can't open file {target!r}: no such file")
    if kind == "module":
        try:
            found = importlib.util.find_spec(target) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            fail(f"no module named {target!r} (run from the folder that holds it, or set PYTHONPATH)")


def _in_sdk(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_SDK_DIR)


def _app_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the app's first frame on (this command and runpy are not the app's)."""
    while tb is not None and (_in_sdk(name := tb.tb_frame.f_code.co_filename) or "runpy" in name):
        tb = tb.tb_next
    return tb


def _raised_at(tb: TracebackType | None) -> str:
    """`` (at app.py:12)``: the app's last line on the way to the SDK call that raised."""
    where = ""
    for frame, line in traceback.walk_tb(_app_frames(tb)):
        if _in_sdk(frame.f_code.co_filename):
            break
        where = f" (at {os.path.relpath(frame.f_code.co_filename)}:{line})"
    return where


def _short_sdk_warnings() -> None:
    """The SDK's warnings as one line each (``mycelium: warning: …``); the app's as python shows them."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if _in_sdk(filename):
            print(f"mycelium: warning: {message}", file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


_SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
