"""The mirror follower: applies committed changes from the outbox to the markdown files.

One process at a time follows (the ``mirror`` loop of mycelium.workers has one leader); its
position ``(tx, seq)`` is stored in the database after each batch, so a restart resumes exactly
where the last batch ended. Only changes below the oldest running transaction are read, so a slow
commit can never be skipped. Applying a change re-reads the memory's current row and writes the
file only if its content differs, so re-applying a batch after a crash writes nothing twice.

A file that cannot be written (permissions, a full disk, a name the volume refuses, a file where a
folder must go) does not stop the follower: the change is logged once, kept in :class:`Unwritable`
until a later write of the same file succeeds, and skipped; every other change is applied and the
position advances. A later change of that memory tries again, and ``mycelium mirror export`` retries
every file.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mycelium.mirror.files import memory_path, remove_file, remove_room, write_if_changed
from mycelium.mirror.render import render_memory
from mycelium.verbs import HUB_PROCESS, Verbs

FOLLOWER = "markdown-mirror"
BATCH = 500

log = logging.getLogger(__name__)


@dataclass
class Applied:
    written: int = 0
    removed: int = 0
    changes: int = 0
    failed: list[str] = field(default_factory=list)
    """What could not be written this time, one line each (room, key, error)."""


@dataclass
class Unwritable:
    """The mirror files that could not be written, by (room, key), until one is written after all."""

    files: dict[tuple[str, str | None], str] = field(default_factory=dict)

    def summary(self) -> str | None:
        if not self.files:
            return None
        latest = next(reversed(self.files.values()))
        count = len(self.files)
        return f"{count} mirror file{'s' if count != 1 else ''} cannot be written; latest: {latest}"


def _where(room: str, key: str | None) -> str:
    return f"room {room!r}" if key is None else f"room {room!r} key {key!r}"


def _attempt(result: Applied, unwritable: Unwritable, room: str, key: str | None,
             op: Callable[..., bool], *args: object) -> bool:
    """Run one file operation; an OSError is recorded and logged once, and the change is skipped."""
    try:
        done = op(*args)
    except OSError as exc:
        problem = f"{_where(room, key)}: {type(exc).__name__}: {exc}"
        unwritable.files.pop((room, key), None)  # re-inserted last: the newest problem
        unwritable.files[(room, key)] = problem
        result.failed.append(problem)
        log.warning("mirror: cannot write %s (skipped; the next change of it, or `mycelium mirror "
                    "export`, tries again)", problem)
        return False
    if key is None:
        for k in [k for k in unwritable.files if k[0] == room]:
            del unwritable.files[k]
    else:
        unwritable.files.pop((room, key), None)
    return done


async def apply_pending(verbs: Verbs, root: Path, name: str = FOLLOWER,
                        batch: int = BATCH, unwritable: Unwritable | None = None) -> Applied:
    """Apply every change that is final and after this follower's position; store the new position.
    Files that cannot be written are skipped, listed in the result and kept in ``unwritable``."""
    result = Applied()
    unwritable = Unwritable() if unwritable is None else unwritable
    pos = await verbs.call(HUB_PROCESS, "follower_position", name=name)
    tx, seq = int(pos["tx"]), pos["seq"]
    while True:
        rows = await verbs.call(HUB_PROCESS, "pending_changes", tx=tx, seq=seq, batch=batch)
        if not rows:
            return result
        last: dict[tuple[str, str | None], str] = {}
        for r in rows:
            if r["op"] == "room_delete":
                for k in [k for k in last if k[0] == r["room"]]:
                    del last[k]
            last[(r["room"], r["key"])] = r["op"]
        upserts: dict[str, list[str]] = {}
        for (room, key), op in last.items():
            if op == "room_delete":
                if _attempt(result, unwritable, room, None, remove_room, root, room):
                    result.removed += 1
            elif op == "delete":
                if key is not None and _attempt(result, unwritable, room, key, remove_file, root,
                                                memory_path(root, room, key)):
                    result.removed += 1
            else:
                upserts.setdefault(room, []).append(key or "")
        for room, keys in upserts.items():
            current = {m["key"]: m for m in await verbs.call(HUB_PROCESS, "memories_for_export", room=room,
                                                             keys=keys)}
            for key in keys:
                path = memory_path(root, room, key)
                if key in current:
                    text = render_memory(current[key])
                    if _attempt(result, unwritable, room, key, write_if_changed, path, text):
                        result.written += 1
                elif _attempt(result, unwritable, room, key, remove_file, root, path):
                    result.removed += 1  # deleted again since: follow the row
        tx, seq = int(rows[-1]["tx"]), rows[-1]["seq"]
        await verbs.call(HUB_PROCESS, "advance_follower", name=name, tx=tx, seq=seq)
        result.changes += len(rows)


async def export_all(verbs: Verbs, root: Path) -> Applied:
    """Rebuild the mirror from scratch: every memory written, every stray file removed (a file that
    cannot be written is listed in the result, and the rest are written)."""
    result = Applied()
    unwritable = Unwritable()
    wanted: set[Path] = set()
    by_room: dict[str, list[str]] = {r["name"]: [] for r in await verbs.call(HUB_PROCESS, "all_rooms")}
    for r in await verbs.call(HUB_PROCESS, "all_memory_keys"):
        by_room[r["room"]].append(r["key"])
    for room, keys in by_room.items():
        for start in range(0, len(keys), BATCH):
            for m in await verbs.call(HUB_PROCESS, "memories_for_export", room=room,
                                      keys=keys[start:start + BATCH]):
                path = memory_path(root, room, m["key"])
                wanted.add(path)
                if _attempt(result, unwritable, room, m["key"], write_if_changed, path, render_memory(m)):
                    result.written += 1
    rooms_dir = root / "rooms"
    if rooms_dir.exists():
        for path in sorted(rooms_dir.rglob("*.md")):
            room, *rest = path.relative_to(rooms_dir).parts
            stray = "/".join(rest)
            if path not in wanted and _attempt(result, unwritable, room, stray, remove_file, root, path):
                result.removed += 1
        for folder in sorted((p for p in rooms_dir.iterdir() if p.is_dir()), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return result
