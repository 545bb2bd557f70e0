"""The mirror's files: where a room and a memory live on disk, and writing them safely.

A memory ``notes/plan`` of room ``atlas`` is ``rooms/atlas/notes/plan.md``. Every key and room name
the hub accepts maps to names that the common file systems all take, and two different keys never
map to one file, even on a case-insensitive or normalising volume (macOS, Windows):

* characters those systems refuse or treat specially (``<>:"\\|?*``, control characters), ``%`` and
  ``~`` (the escape and the marker below), a leading ``.``, a trailing ``.`` or space, the first
  letter of a reserved device name (``CON``, ``NUL``, ``COM1`` …) and the dot of a name's own ``.md``
  ending (``notes/a.md`` is ``notes/a%2Emd.md``, never ``a.md.md`` nor ``notes/a``'s file) are
  written as ``%XX`` (UTF-8 bytes);
* a name whose case or Unicode normalisation a volume may fold (``Plan``, a decomposed ``é``) ends in
  ``~`` and ten hex digits of its SHA-256, so ``Plan`` and ``plan`` stay two files;
* a name longer than :data:`MAX_NAME_BYTES` bytes is cut and ends in the same kind of marker, of
  the whole name.

The mapping is reversible from the path alone except for a cut name; the file's frontmatter carries
the key in every case, and an import reads it from there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import unicodedata
from pathlib import Path

MAX_NAME_BYTES = 200
"""Bytes of one file or folder name, ``.md`` included: under the 255 that ext4, APFS, NTFS and
their kin allow, with room for the temporary name a write goes through."""

FILE_MODE = 0o644
DIR_MODE = 0o755

_ESCAPED = set('<>:"\\|?*%~')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"{port}{i}" for port in ("COM", "LPT") for i in range(1, 10))}
_MARK = 10  # hex digits of a marker


def _pct(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode())


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:_MARK]


def encode_name(name: str, *, folder: bool = False) -> str:
    """One segment of a key (or a room name) as a portable file or folder name, without ``.md``."""
    out = [_pct(ch) if ch in _ESCAPED or ord(ch) < 32 or ord(ch) == 127 else ch for ch in name]
    if out[0] == ".":
        out[0] = _pct(".")
    if out[-1] in (".", " "):
        out[-1] = _pct(out[-1])
    if name.split(".")[0].upper() in _RESERVED:
        out[0] = _pct(out[0])
    if name.endswith(".md"):  # a folder never looks like a memory, nor a file like a doubled one
        out[-3] = _pct(".")
    encoded = "".join(out)
    suffix = 0 if folder else len(".md")
    if len(encoded.encode()) + suffix > MAX_NAME_BYTES:
        room = MAX_NAME_BYTES - suffix - 1 - _MARK
        cut = ""
        for piece in out:  # never split a character or an escape
            if len((cut + piece).encode()) > room:
                break
            cut += piece
        return f"{cut}~{_digest(name)}"
    if unicodedata.normalize("NFC", name).casefold() != name:
        return f"{encoded}~{_digest(name)}"
    return encoded


def decode_name(encoded: str) -> str | None:
    """The segment a name was encoded from; None for a name that was cut (read its frontmatter)."""
    body, mark = encoded, None
    if "~" in encoded:
        body, mark = encoded.rsplit("~", 1)
    raw = bytearray()
    i = 0
    while i < len(body):
        if body[i] == "%" and _is_hex(body[i + 1:i + 3]):
            raw.append(int(body[i + 1:i + 3], 16))
            i += 3
        else:
            raw += body[i].encode()
            i += 1
    try:
        name = raw.decode()
    except UnicodeDecodeError:
        return None
    if mark is not None and _digest(name) != mark:
        return None
    return name


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(c in "0123456789abcdefABCDEF" for c in text)


def room_dir(root: Path, room: str) -> Path:
    return root / "rooms" / encode_name(room, folder=True)


def memory_path(root: Path, room: str, key: str) -> Path:
    *folders, last = key.split("/")
    parts = [encode_name(f, folder=True) for f in folders]
    return room_dir(root, room).joinpath(*parts, encode_name(last) + ".md")


def key_of(relative: Path) -> str | None:
    """The key a file (its path below the room folder) was written for; None when the path alone
    cannot tell (a cut name, or not a mirror file)."""
    if relative.suffix != ".md":
        return None
    parts = [*relative.parts[:-1], relative.name[: -len(".md")]]
    names = [decode_name(p) for p in parts]
    if any(n is None or n == "" for n in names):
        return None
    return "/".join(n for n in names if n is not None)


def write_if_changed(path: Path, text: str) -> bool:
    """Atomically make ``path`` hold ``text``; False if it already did (nothing written)."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnicodeDecodeError):
        pass
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
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
