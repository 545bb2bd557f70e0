"""Options shared by command groups: the room, the author, ``--json``, the hub's data."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

from mycelium import environment
from mycelium.cli.client import fail


def add_room(p: argparse.ArgumentParser) -> None:
    p.add_argument("-r", "--room", help="room (MYCELIUM_ROOM)")


def add_author(p: argparse.ArgumentParser) -> None:
    p.add_argument("--as", dest="handle", help="who is acting (MYCELIUM_HANDLE, default $USER)")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def add_database_options(p: argparse.ArgumentParser) -> None:
    nearest = environment.DATA_DIR_NAME
    p.add_argument("--data-dir", type=Path, help=f"the hub's data folder (MYCELIUM_DATA_DIR; default: the "
                                                 f"nearest {nearest} in the working directory or above it)")
    p.add_argument("--database-url", help="a PostgreSQL server instead of the embedded one (DATABASE_URL)")


def no_hub_data(where: environment.DataDir, what: str) -> NoReturn:
    """End a command that needs a hub's data and found none: what is missing, where it looked."""
    fail(f"{what}\n"
         f"  data directory: {where.path} ({where.chosen_by})\n"
         "  `mycelium up` creates a hub there (it is the only command that creates one);\n"
         "  another hub's data: --data-dir DIR or MYCELIUM_DATA_DIR=DIR;\n"
         "  a PostgreSQL server instead: --database-url URL or DATABASE_URL=URL")


def add_yes(p: argparse.ArgumentParser) -> None:
    p.add_argument("-y", "--yes", action="store_true",
                   help="do not ask for confirmation (needed when stdin is not a terminal)")


def confirm(args: argparse.Namespace, what: str) -> None:
    """Go on only if the user agrees to ``what`` (a question): ``--yes``, or ``y`` typed at the
    prompt on a terminal. Without a terminal and without ``--yes`` the command is refused."""
    if getattr(args, "yes", False):
        return
    if not sys.stdin.isatty():
        fail(f"{what} — refused: stdin is not a terminal to confirm on; pass --yes to go ahead")
    try:
        answer = input(f"{what} [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        fail("not confirmed; nothing was changed")


def room_of(args: argparse.Namespace) -> str:
    room = getattr(args, "room", None) or environment.room()
    if not room:
        fail("which room? pass --room or set MYCELIUM_ROOM")
    return room


def handle_of(args: argparse.Namespace) -> str:
    return getattr(args, "handle", None) or environment.handle()


def key_values(pairs: list[str], flag: str) -> dict[str, Any]:
    """``K=V`` arguments as a dict; ``K=`` is None. See ``literal`` for how a value is read."""
    values: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            fail(f"{flag} takes K=V, got {pair!r}")
        k, v = pair.split("=", 1)
        if not k.strip():
            fail(f"{flag} {pair!r}: the name before '=' is empty")
        values[k.strip()] = literal(v) if v else None
    return values


def literal(text: str) -> Any:
    """A JSON literal as typed (``true``, ``3``, ``[1, "a"]``, ``{"a": 1}``, ``"quoted"``, ``null``),
    anything else the string typed: ``no``, ``007``, ``1.10`` and ``2024-06-01`` stay strings (a
    number is taken only when JSON writes it back the way it was typed)."""
    try:
        value = json.loads(text, parse_constant=_not_json)
    except ValueError:
        return text
    if isinstance(value, (int, float)) and not isinstance(value, bool) and json.dumps(value) != text.strip():
        return text
    return value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def human(value: Any) -> str:
    """A value as text for a person: no value is ``—``, booleans are yes/no, lists are joined with
    commas, mappings are JSON; never a Python repr."""
    if value is None or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(human(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def human_fields(fields: dict[str, Any]) -> str:
    """``name: value`` lines, values as ``human`` writes them."""
    return "\n".join(f"{k}: {human(v)}" for k, v in fields.items())


def path_part(value: str) -> str:
    """Quote a room name or key for a URL path (keys keep their slashes)."""
    return quote(value, safe="/")
