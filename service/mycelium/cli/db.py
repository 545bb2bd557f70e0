"""``mycelium db``: migrations and psql on the hub's database.

The database is ``--database-url`` / ``DATABASE_URL``, else the embedded server in the data
directory, which these commands start if it is stopped but never create: only ``mycelium up``
makes a hub's data directory and its database.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mycelium import environment
from mycelium.cli.client import fail
from mycelium.cli.common import add_database_options, add_yes, confirm, no_hub_data

if TYPE_CHECKING:
    from mycelium.db.embedded import EmbeddedPostgres

#: the roles ``db psql --as`` takes
ROLES = ("admin", "app", "auditor", "superuser")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("db")
    dsub = p.add_subparsers(dest="db_command", metavar="<action>")
    dsub.required = True
    for name, helptext in (("upgrade", "migrate to the head (or to a release's revision)"),
                           ("downgrade", "migrate down to a release's revision ('base' removes everything)"),
                           ("current", "show the database's revision"),
                           ("psql", "open psql on the hub's database")):
        a = dsub.add_parser(name, help=helptext)
        add_database_options(a)
        if name == "downgrade":
            add_yes(a)
        if name in ("upgrade", "downgrade"):
            a.add_argument("revision", nargs="?" if name == "upgrade" else None,
                           default="head" if name == "upgrade" else None)
        if name == "psql":
            a.add_argument("--as", dest="role", choices=ROLES,
                           help="the role to work as: admin, the owner (the default on the embedded "
                                "server; a DATABASE_URL's own user otherwise), app, auditor, or "
                                "superuser (the embedded server's postgres)")
            a.add_argument("passthrough", nargs=argparse.REMAINDER, metavar="PSQL_ARGS",
                           help="anything else is passed on to psql (-c 'SELECT 1', -f file.sql, …; "
                                "after -- for flags that are also this command's)")
        a.set_defaults(func=globals()[f"_{name}"])
    f = dsub.add_parser("freeze", help="write a release's code snapshot into this source checkout "
                                       "(from the release's commit in CHANGELOG.md)")
    f.add_argument("version", nargs="?", help="the release (default: the newest CHANGELOG.md records)")
    f.add_argument("--repo", type=Path, default=None,
                   help="the source checkout (default: the git work tree of the current folder)")
    f.set_defaults(func=_freeze)


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[tuple[str, EmbeddedPostgres | None]]:
    """The hub's database DSN (``--database-url``/``DATABASE_URL``, else the embedded server in
    the data directory, attached for the duration); no database there, or none that answers, ends
    the command with a one-line error."""
    import asyncpg

    from mycelium.db.embedded import EmbeddedPostgres, NoCluster

    url = getattr(args, "database_url", None) or environment.database_url()
    server = None
    if not url:
        where = environment.data_dir(args.data_dir)
        server = EmbeddedPostgres(where.path)
        try:
            url = server.attach(create=False)
        except NoCluster as missing:
            no_hub_data(where, f"no hub database in {missing.pgdata}")
    try:
        yield url, server
    except (ConnectionError, TimeoutError, socket.gaierror, asyncpg.PostgresError) as exc:
        fail(f"the database at {_shown(url)} refused or did not answer: {exc}")
    finally:
        if server is not None:
            server.detach()


def _shown(dsn: str) -> str:
    """A DSN without its password."""
    from urllib.parse import urlsplit

    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


def _upgrade(args: argparse.Namespace) -> int:
    from mycelium.db import migrate
    from mycelium.db.schema import SchemaRefused

    with database(args) as (dsn, _):
        try:
            migrate.upgrade(dsn, args.revision or "head")
        except SchemaRefused as refused:
            fail(str(refused))
    print(f"database at {args.revision or 'head'} ({migrate.head_revision()} is head)")
    return 0


def _downgrade(args: argparse.Namespace) -> int:
    import asyncio

    from mycelium.db import migrate
    from mycelium.db.schema import SchemaRefused

    try:
        migrate.check_target(args.revision, downgrading=True)
    except SchemaRefused as refused:
        fail(str(refused))
    with database(args) as (dsn, _):
        now = asyncio.run(migrate.current_revision(dsn)) or "base"
        loses = "removes the hub's schema and all its data" if args.revision == "base" else \
            "drops what later revisions added, with their data"
        confirm(args, f"downgrade the database at {_shown(dsn)} from {now} to {args.revision}? "
                      f"This {loses}.")
        try:
            migrate.downgrade(dsn, args.revision)
        except SchemaRefused as refused:
            fail(str(refused))
    print(f"database at {args.revision}")
    return 0


def _freeze(args: argparse.Namespace) -> int:
    from mycelium.db.freeze import FreezeError, freeze

    repo = args.repo
    if repo is None:
        found = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        if found.returncode != 0:
            fail("mycelium db freeze runs in a source checkout of the hub (a git work tree), or takes --repo")
        repo = Path(found.stdout.strip())
    try:
        written = freeze(repo, args.version)
    except FreezeError as refused:
        fail(str(refused))
    print(f"wrote {written.relative_to(repo)}")
    return 0


def _current(args: argparse.Namespace) -> int:
    import asyncio

    from mycelium.db.migrate import current_revision

    with database(args) as (dsn, _):
        print(asyncio.run(current_revision(dsn)) or "base (not migrated)")
    return 0


def _psql(args: argparse.Namespace) -> int:
    """psql on the hub's database. On the embedded server the default is the owner role
    ``mycelium_admin`` (a role nobody logs in as: the session is the superuser's, working as the
    owner until ``RESET ROLE``); on a DATABASE_URL, its user, or the role ``--as`` names."""
    extra = list(args.passthrough)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    env = dict(os.environ)
    env.setdefault("PSQLRC", os.devnull)
    with database(args) as (dsn, server):
        role = args.role or ("admin" if server is not None else None)
        if server is not None and role in ("app", "auditor"):
            command = server.psql_command(user=f"mycelium_{role}")  # roles that log in
        else:
            command = server.psql_command() if server is not None else [_psql_binary(), dsn]
            if role in ("admin", "app", "auditor"):
                env["PGOPTIONS"] = f"{env.get('PGOPTIONS', '')} -c role=mycelium_{role}".strip()
        return subprocess.call([*command, *extra], env=env)


def _psql_binary() -> str:
    import shutil

    found = shutil.which("psql")
    if found is not None:
        return found
    from mycelium.db.embedded import _bin_dir

    return str(Path(_bin_dir()) / "psql")
