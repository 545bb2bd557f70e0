"""``mycelium db``: migrations and psql on the hub's database."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from mycelium.db import migrate
from mycelium.db.embedded import EmbeddedPostgres
from mycelium.settings import Settings, load_settings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("db", help="database: migrate, open psql")
    dsub = p.add_subparsers(dest="db_command", metavar="<action>")
    dsub.required = True
    for name, helptext in (("upgrade", "migrate to a revision (default head)"),
                           ("downgrade", "migrate down to a revision ('base' removes everything)"),
                           ("current", "show the database's revision"),
                           ("psql", "open psql on the hub's database")):
        a = dsub.add_parser(name, help=helptext)
        a.add_argument("--data-dir", type=Path)
        a.add_argument("--database-url")
        if name in ("upgrade", "downgrade"):
            a.add_argument("revision", nargs="?" if name == "upgrade" else None,
                           default="head" if name == "upgrade" else None)
        if name == "psql":
            a.add_argument("--as", dest="role", choices=["admin", "app", "auditor"], default="admin",
                           help="connect as the owner (default), the app role or the auditor role")
            a.add_argument("psql_args", nargs=argparse.REMAINDER, help="passed on to psql (after --)")
        a.set_defaults(func=globals()[f"_{name}"])


@contextlib.contextmanager
def database(settings: Settings) -> Iterator[tuple[str, EmbeddedPostgres | None]]:
    """The hub's database DSN; the embedded server is attached for the duration if used."""
    if settings.database_url:
        yield settings.database_url, None
        return
    server = EmbeddedPostgres(settings.resolved_data_dir())
    dsn = server.attach()
    try:
        yield dsn, server
    finally:
        server.detach()


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(data_dir=args.data_dir, database_url=args.database_url)


def _upgrade(args: argparse.Namespace) -> int:
    with database(_settings(args)) as (dsn, _):
        migrate.upgrade(dsn, args.revision or "head")
    print(f"database at {args.revision or 'head'} ({migrate.head_revision()} is head)")
    return 0


def _downgrade(args: argparse.Namespace) -> int:
    with database(_settings(args)) as (dsn, _):
        migrate.downgrade(dsn, args.revision)
    print(f"database at {args.revision}")
    return 0


def _current(args: argparse.Namespace) -> int:
    import asyncio

    from mycelium.db.migrate import current_revision

    with database(_settings(args)) as (dsn, _):
        print(asyncio.run(current_revision(dsn)) or "base (not migrated)")
    return 0


def _psql(args: argparse.Namespace) -> int:
    settings = _settings(args)
    extra = [a for a in args.psql_args if a != "--"]
    with database(settings) as (dsn, server):
        if server is not None:
            command = server.psql_command()
            if args.role != "admin":
                command = server.psql_command(user=f"mycelium_{args.role}")
        else:
            psql = shutil.which("psql")
            if psql is None:
                from mycelium.db.embedded import _bin_dir

                psql = str(_bin_dir() / "psql")
            command = [psql, dsn]
        env = dict(os.environ)
        env.setdefault("PSQLRC", os.devnull)
        return subprocess.call([*command, *extra], env=env)
