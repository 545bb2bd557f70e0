"""``mycelium mirror``: rebuild the markdown mirror, or load hand-edited files back."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from mycelium import environment
from mycelium.cli.client import call, fail, refused, request
from mycelium.cli.common import add_author, add_database_options, handle_of, no_hub_data, path_part
from mycelium.cli.db import database
from mycelium.cli.progress import Progress

BATCH = 100


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("mirror")
    msub = p.add_subparsers(dest="mirror_command", metavar="<action>")
    msub.required = True

    e = msub.add_parser("export", help="rebuild <data>/rooms from the database (run where the data lives)")
    add_database_options(e)
    e.set_defaults(func=_export)

    i = msub.add_parser("import", help="load changed markdown files back through the memory upsert (via "
                        "the hub); unchanged files are skipped, missing rooms and memories created")
    i.add_argument("dir", type=Path, help="a folder of room folders, or one room's folder with --room")
    i.add_argument("-r", "--room", help="DIR is this room's folder")
    i.add_argument("--force", action="store_true",
                   help="write changed files even if the memory moved on since the file's version")
    add_author(i)
    i.set_defaults(func=_import)


def _export(args: argparse.Namespace) -> int:
    """Into the data directory of a hub that exists: its embedded database, or the data folder a
    hub on ``DATABASE_URL`` keeps its mirror in."""
    import asyncpg

    from mycelium.db.migrate import current_revision
    from mycelium.db.pool import setup_connection
    from mycelium.mirror.follower import export_all
    from mycelium.verbs import verbs_on

    where = environment.data_dir(args.data_dir)
    if not where.path.is_dir():
        no_hub_data(where, f"no hub data directory at {where.path}")

    async def run(dsn: str) -> Any:
        if await current_revision(dsn) is None:
            fail("the database has no hub schema: migrate it with `mycelium db upgrade`")
        conn = await asyncpg.connect(dsn)
        try:
            await setup_connection(conn)
            return await export_all(verbs_on(conn), where.path)
        finally:
            await conn.close()

    with database(args) as (dsn, _):
        try:
            result = asyncio.run(run(dsn))
        except (asyncpg.InvalidSchemaNameError, asyncpg.UndefinedTableError, asyncpg.UndefinedFunctionError):
            fail("the database's hub schema is out of date: migrate it with `mycelium db upgrade`")
        except (OSError, asyncpg.PostgresError) as exc:
            fail(f"cannot read the database: {exc}")
    print(f"mirror rebuilt in {where.path / 'rooms'}: {result.written} written, {result.removed} removed"
          + (f", {len(result.failed)} could not be written" if result.failed else ""))
    for problem in result.failed:
        print(f"  cannot write {problem}")
    return 1 if result.failed else 0


def _current(room: str) -> dict[str, dict[str, Any]]:
    """Every memory of a room at its current version, by key (read in pages of a thousand)."""
    found: dict[str, dict[str, Any]] = {}
    while True:
        page = call("GET", f"/api/rooms/{path_part(room)}/memory",
                    params={"limit": 1000, "offset": len(found)}, timeout=120)
        found.update({m["key"]: m for m in page})
        if len(page) < 1000:
            return found


def _ensure_room(room: str, by: str) -> bool:
    """True if the room had to be created (an export restored into a hub that lacks it)."""
    response = request("GET", f"/api/rooms/{path_part(room)}")
    if response.status == 200:
        return False
    if response.status != 404:
        refused(response)
    call("POST", "/api/rooms", json_body={"name": room, "created_by": by})
    return True


def _write(room: str, items: list[dict[str, Any]], problems: list[str]) -> int:
    """Write a batch; if the hub refuses it, write one by one to find the refused files."""
    url = f"/api/rooms/{path_part(room)}/memory"
    if request("POST", url, json_body={"items": items}, timeout=120).status == 201:
        return len(items)
    written = 0
    for item in items:
        single = request("POST", url, json_body={"items": [item]}, timeout=120)
        if single.status == 201:
            written += 1
        else:
            body = single.json() if single.body else {}
            problems.append(f"{room}/{item['key']}: {single.status} {body.get('error')}: "
                            f"{body.get('message')}")
    return written


def _import(args: argparse.Namespace) -> int:
    from mycelium.mirror.importing import collect, plan

    if not args.dir.is_dir():
        fail(f"{args.dir} is not a folder")
    files, problems = collect(args.dir, args.room)
    by = handle_of(args)
    total = len(files) + len(problems)
    progress = Progress(total, "importing")
    progress.advance(len(problems))
    counts = {"create": 0, "change": 0, "unchanged": 0}
    created_rooms: list[str] = []
    written = 0
    rooms: dict[str, list[Any]] = {}
    for f in files:
        rooms.setdefault(f.room, []).append(f)
    for room, room_files in rooms.items():
        if _ensure_room(room, by):
            created_rooms.append(room)
        current = _current(room)
        writes: list[dict[str, Any]] = []
        for f in room_files:
            decision = plan(f, current.get(f.key), by, args.force)
            if decision.verdict == "refuse":
                problems.append(f"{room}/{f.key}: {decision.reason}")
                progress.advance()
                continue
            counts[decision.verdict] += 1
            if decision.item is None:
                progress.advance()
            else:
                writes.append(decision.item)
        for start in range(0, len(writes), BATCH):
            chunk = writes[start:start + BATCH]
            written += _write(room, chunk, problems)
            progress.advance(len(chunk))
    progress.close()
    for room in created_rooms:
        print(f"created room {room}")
    print(f"imported {written} of {total} files: {counts['create']} created, {counts['change']} changed, "
          f"{counts['unchanged']} unchanged" + (f", {len(problems)} refused" if problems else ""))
    for problem in problems:
        print(f"  refused {problem}")
    return 1 if problems else 0
