"""The mirror follower: applies committed changes from the outbox to the markdown files.

One process at a time follows (the ``mirror`` loop of mycelium.workers has one leader); its
position ``(tx, seq)`` is stored in the database after each batch, so a restart resumes exactly
where the last batch ended. Only changes below the oldest running transaction are read, so a slow
commit can never be skipped. Applying a change re-reads the memory's current row and writes the
file only if its content differs, so re-applying a batch after a crash writes nothing twice.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from mycelium.db.queries import q
from mycelium.mirror.files import memory_path, remove_file, remove_room, write_if_changed
from mycelium.mirror.render import render_memory

FOLLOWER = "markdown-mirror"
BATCH = 500


@dataclass
class Applied:
    written: int = 0
    removed: int = 0
    changes: int = 0


async def apply_pending(conn: asyncpg.Connection, root: Path, name: str = FOLLOWER,
                        batch: int = BATCH) -> Applied:
    """Apply every change that is final and after this follower's position; store the new position."""
    result = Applied()
    pos = await conn.fetchrow(q("follower_position"), name)
    tx, seq = int(pos["tx"]), pos["seq"]
    while True:
        rows = await conn.fetch(q("pending_changes"), tx, seq, batch)
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
                if remove_room(root, room):
                    result.removed += 1
            elif op == "delete":
                if key is not None and remove_file(root, memory_path(root, room, key)):
                    result.removed += 1
            else:
                upserts.setdefault(room, []).append(key or "")
        for room, keys in upserts.items():
            current = {m["key"]: m for m in await conn.fetch(q("memories_for_export"), room, keys)}
            for key in keys:
                path = memory_path(root, room, key)
                if key in current:
                    if write_if_changed(path, render_memory(current[key])):
                        result.written += 1
                elif remove_file(root, path):  # deleted again since: follow the row
                    result.removed += 1
        tx, seq = int(rows[-1]["tx"]), rows[-1]["seq"]
        await conn.execute(q("advance_follower"), name, tx, seq)
        result.changes += len(rows)


async def export_all(conn: asyncpg.Connection, root: Path) -> Applied:
    """Rebuild the mirror from scratch: every memory written, every stray file removed."""
    result = Applied()
    wanted: set[Path] = set()
    by_room: dict[str, list[str]] = {r["name"]: [] for r in await conn.fetch(q("all_rooms"))}
    for r in await conn.fetch(q("all_memory_keys")):
        by_room[r["room"]].append(r["key"])
    for room, keys in by_room.items():
        for start in range(0, len(keys), BATCH):
            for m in await conn.fetch(q("memories_for_export"), room, keys[start:start + BATCH]):
                path = memory_path(root, room, m["key"])
                wanted.add(path)
                if write_if_changed(path, render_memory(m)):
                    result.written += 1
    rooms_dir = root / "rooms"
    if rooms_dir.exists():
        for path in sorted(rooms_dir.rglob("*.md")):
            if path not in wanted and remove_file(root, path):
                result.removed += 1
        for folder in sorted((p for p in rooms_dir.iterdir() if p.is_dir()), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return result
