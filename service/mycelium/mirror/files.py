"""Writing the mirror's files: atomic replace, no write when the content is already there."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def room_dir(root: Path, room: str) -> Path:
    return root / "rooms" / room


def memory_path(root: Path, room: str, key: str) -> Path:
    return room_dir(root, room) / f"{key}.md"


def write_if_changed(path: Path, text: str) -> bool:
    """Atomically make ``path`` hold ``text``; False if it already did (nothing written)."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def remove_file(root: Path, path: Path) -> bool:
    """Remove a memory file and any folders it leaves empty (up to the room folder)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    parent = path.parent
    rooms = root / "rooms"
    while parent != rooms and parent.parent != rooms:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
    return True


def remove_room(root: Path, room: str) -> bool:
    folder = room_dir(root, room)
    if not folder.exists():
        return False
    shutil.rmtree(folder)
    return True
