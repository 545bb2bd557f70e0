"""Options shared by command groups: the room, the author, ``--json``."""

from __future__ import annotations

import argparse
from urllib.parse import quote

from mycelium.cli.client import fail
from mycelium.settings import load_settings


def add_room(p: argparse.ArgumentParser) -> None:
    p.add_argument("-r", "--room", help="room (MYCELIUM_ROOM)")


def add_author(p: argparse.ArgumentParser) -> None:
    p.add_argument("--as", dest="handle", help="who is acting (MYCELIUM_HANDLE, default $USER)")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def room_of(args: argparse.Namespace) -> str:
    room = getattr(args, "room", None) or load_settings().room
    if not room:
        fail("which room? pass --room or set MYCELIUM_ROOM")
    return room


def handle_of(args: argparse.Namespace) -> str:
    return getattr(args, "handle", None) or load_settings().handle


def path_part(value: str) -> str:
    """Quote a room name or key for a URL path (keys keep their slashes)."""
    return quote(value, safe="/")
