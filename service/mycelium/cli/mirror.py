"""``mycelium mirror``: rebuild the markdown mirror, or load hand-edited files back."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from mycelium import environment
from mycelium.cli.client import call, fail, request
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

    i = msub.add_parser("import", help="load markdown files back through the memory upsert (via the hub)")
    i.add_argument("dir", type=Path, help="a folder of room folders, or one room's folder with --room")
    i.add_argument("-r", "--room", help="DIR is this room's folder")
    i.add_argument("--force", action="store_true",
                   help="overwrite even if the memory moved on since the file's version")
    add_author(i)
    i.set_defaults(func=_import)


def _export(args: argparse.Namespace) -> int:
    """Into the data directory of a hub that exists: its embedded database, or the data folder a
    hub on ``DATABASE_URL`` keeps its mirror in."""
    import asyncpg

    from mycelium.db.migrate import current_revision
    from mycelium.db.pool import setup_connection
    from mycelium.mirror.follower import export_all

    where = environment.data_dir(args.data_dir)
    if not where.path.is_dir():
        no_hub_data(where, f"no hub data directory at {where.path}")

    async def run(dsn: str) -> Any:
        if await current_revision(dsn) is None:
            fail("the database has no hub schema: migrate it with `mycelium db upgrade`")
        conn = await asyncpg.connect(dsn)
        try:
            await setup_connection(conn)
            return await export_all(conn, where.path)
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


def collect(folder: Path, room: str | None) -> list[tuple[str, str, Path]]:
    """(room, key, path) for every markdown file to import."""
    if not folder.is_dir():
        fail(f"{folder} is not a folder")
    found: list[tuple[str, str, Path]] = []
    roots = [(room, folder)] if room else [(d.name, d) for d in sorted(folder.iterdir()) if d.is_dir()]
    for room_name, root in roots:
        for path in sorted(root.rglob("*.md")):
            key = path.relative_to(root).with_suffix("").as_posix()
            found.append((room_name or "", key, path))
    return found


def _item(key: str, path: Path, by: str, force: bool) -> dict[str, Any]:
    from mycelium.mirror.render import parse_file

    parsed = parse_file(path.read_text(encoding="utf-8"))
    item: dict[str, Any] = {"key": key, "value": parsed.body, "created_by": by, "meta": parsed.meta}
    tags = parsed.frontmatter.get("tags")
    if isinstance(tags, list):
        item["tags"] = [str(t) for t in tags]
    version = parsed.frontmatter.get("version")
    if not force and isinstance(version, int):
        item["base_version"] = version
    return item


def _import(args: argparse.Namespace) -> int:
    from mycelium.mirror.render import MalformedFile

    files = collect(args.dir, args.room)
    by = handle_of(args)
    progress = Progress(len(files), "importing")
    problems: list[str] = []
    written = 0
    by_room: dict[str, list[tuple[str, Path]]] = {}
    for room, key, path in files:
        by_room.setdefault(room, []).append((key, path))
    for room, entries in by_room.items():
        call("GET", f"/api/rooms/{path_part(room)}")  # a clear error if the room is missing
        for start in range(0, len(entries), BATCH):
            chunk = entries[start:start + BATCH]
            items = []
            for key, path in chunk:
                try:
                    items.append(_item(key, path, by, args.force))
                except (MalformedFile, UnicodeDecodeError) as exc:
                    problems.append(f"{room}/{key}: {exc}")
                    progress.advance()
            if not items:
                continue
            url = f"/api/rooms/{path_part(room)}/memory"
            response = request("POST", url, json_body={"items": items}, timeout=120)
            if response.status == 201:
                written += len(items)
                progress.advance(len(items))
                continue
            for item in items:  # find which files were refused, write the rest
                single = request("POST", url, json_body={"items": [item]}, timeout=120)
                if single.status == 201:
                    written += 1
                else:
                    body = single.json()
                    problems.append(f"{room}/{item['key']}: {single.status} "
                                    f"{body.get('error')}: {body.get('message')}")
                progress.advance()
    progress.close()
    print(f"imported {written} of {len(files)} files")
    for problem in problems:
        print(f"  refused {problem}")
    return 1 if problems else 0
