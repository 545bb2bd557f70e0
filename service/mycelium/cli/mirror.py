"""``mycelium mirror``: rebuild the markdown mirror, or load hand-edited files back."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import httpx

from mycelium.cli.client import api_url, call, fail
from mycelium.cli.common import add_author, handle_of, path_part
from mycelium.cli.db import database
from mycelium.cli.progress import Progress
from mycelium.mirror.render import MalformedFile, parse_file
from mycelium.settings import load_settings

BATCH = 100


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("mirror", help="markdown mirror: export, import")
    msub = p.add_subparsers(dest="mirror_command", metavar="<action>")
    msub.required = True

    e = msub.add_parser("export", help="rebuild <data>/rooms from the database (run where the data lives)")
    e.add_argument("--data-dir", type=Path)
    e.add_argument("--database-url")
    e.set_defaults(func=_export)

    i = msub.add_parser("import", help="load markdown files back through the memory upsert (via the hub)")
    i.add_argument("dir", type=Path, help="a folder of room folders, or one room's folder with --room")
    i.add_argument("-r", "--room", help="DIR is this room's folder")
    i.add_argument("--force", action="store_true",
                   help="overwrite even if the memory moved on since the file's version")
    add_author(i)
    i.set_defaults(func=_import)


def _export(args: argparse.Namespace) -> int:
    from mycelium.db.pool import setup_connection
    from mycelium.mirror.follower import export_all

    settings = load_settings(data_dir=args.data_dir, database_url=args.database_url)

    async def run(dsn: str) -> Any:
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            await setup_connection(conn)
            return await export_all(conn, settings.resolved_data_dir())
        finally:
            await conn.close()

    with database(settings) as (dsn, _):
        result = asyncio.run(run(dsn))
    print(f"mirror rebuilt in {settings.resolved_data_dir() / 'rooms'}: "
          f"{result.written} written, {result.removed} removed")
    return 0


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
    files = collect(args.dir, args.room)
    by = handle_of(args)
    progress = Progress(len(files), "importing")
    problems: list[str] = []
    written = 0
    with httpx.Client(base_url=api_url(), timeout=120) as http:
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
                response = http.post(url, json={"items": items})
                if response.status_code == 201:
                    written += len(items)
                    progress.advance(len(items))
                    continue
                for item in items:  # find which files were refused, write the rest
                    single = http.post(url, json={"items": [item]})
                    if single.status_code == 201:
                        written += 1
                    else:
                        body = single.json()
                        problems.append(f"{room}/{item['key']}: {single.status_code} "
                                        f"{body.get('error')}: {body.get('message')}")
                    progress.advance()
    progress.close()
    print(f"imported {written} of {len(files)} files")
    for problem in problems:
        print(f"  refused {problem}")
    return 1 if problems else 0
