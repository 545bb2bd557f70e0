"""Every key and room name the hub accepts maps to a portable file name, losslessly, and two keys
never share a file, even on a volume that folds case or normalises Unicode."""

from __future__ import annotations

import stat
import unicodedata
from pathlib import Path

import pytest

from mycelium.mirror.files import (
    MAX_NAME_BYTES,
    decode_name,
    encode_name,
    key_of,
    memory_path,
    write_if_changed,
)

KEYS = [
    "notes/plan", "notes/Plan", "NOTES/plan", "notes/plan.md", "notes.md/plan", "a" * 512, "🚀" * 128,
    "x/" + "é" * 300, "con", "nul.txt", "aux/x", "trailing.", "trailing ", "odd<>:\"|?*", "100%", "til~de",
    ".hidden", "caf\u00e9", "cafe\u0301", "CAFÉ", "tab\u200bs", "deep/" * 50 + "leaf", "com1/lpt9",
]


@pytest.mark.parametrize("key", KEYS)
def test_a_key_maps_to_names_every_common_file_system_takes(key, tmp_path):
    path = memory_path(tmp_path, "room", key)
    relative = path.relative_to(tmp_path / "rooms" / "room")
    for part in relative.parts:
        assert 0 < len(part.encode()) <= MAX_NAME_BYTES
        assert not any(c in part for c in '<>:"\\|?*') and not any(ord(c) < 32 for c in part)
        assert not part.startswith(".") and not part.endswith((".", " "))
        assert part.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL", "COM1", "LPT9"}
    for folder in relative.parts[:-1]:
        assert not folder.endswith(".md")
    assert relative.name.endswith(".md") and not relative.name.endswith(".md.md")
    write_if_changed(path, f"---\nkey: {key}\n---\nbody\n")  # the real file system takes it
    decoded = key_of(relative)
    assert decoded in (key, None)
    if all(len(encode_name(s).encode()) + 3 < MAX_NAME_BYTES - 11 for s in key.split("/")):
        assert decoded == key, "a name that was not cut decodes from the path alone"


def folded(path: Path) -> str:
    return unicodedata.normalize("NFD", str(path)).casefold()


def test_no_two_keys_share_a_file_even_where_case_and_normalisation_fold(tmp_path):
    paths = [memory_path(tmp_path, "room", k) for k in KEYS]
    assert len({folded(p) for p in paths}) == len(KEYS)
    rooms = ["atlas", "Atlas", "ATLAS", "café", "cafe\u0301", "🚀" * 70, "🚀" * 69 + "x"]
    dirs = [memory_path(tmp_path, r, "k").parent for r in rooms]
    assert len({folded(d) for d in dirs}) == len(rooms)
    for d in dirs:
        assert len(d.name.encode()) <= MAX_NAME_BYTES


def test_a_key_ending_in_md_is_not_doubled_and_a_plain_key_keeps_its_own_file(tmp_path):
    assert memory_path(tmp_path, "r", "notes/a").name == "a.md"
    doubled = memory_path(tmp_path, "r", "notes/a.md")
    assert doubled.name == "a%2Emd.md" and doubled != memory_path(tmp_path, "r", "notes/a")
    assert key_of(doubled.relative_to(tmp_path / "rooms" / "r")) == "notes/a.md"


def test_names_round_trip_and_a_cut_name_says_it_cannot_be_read_back():
    for name in ["plan", "Plan", "100%", "a~b", ".x", "x.", "con", "é"]:
        assert decode_name(encode_name(name)) == name
    long = "k" * 400
    assert decode_name(encode_name(long)) is None


def test_mirror_files_are_readable_like_a_checkout(tmp_path):
    path = memory_path(tmp_path, "room", "notes/deep/a")
    write_if_changed(path, "x\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o755 == 0o755
