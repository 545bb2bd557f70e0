"""Schema migrations, driven by Alembic.

A run creates the roles and extensions, applies the revisions the database lacks (frozen: each
revision's SQL is fixed when it is released; tables, columns, indexes and data change only through a
new one), then re-applies the database's code from ``sql/`` (see :mod:`mycelium.db.schema`) and the
privilege policy (``sql/grants.sql``), all in one transaction. Revisions and code run as the owner
role ``mycelium_admin`` where the server has it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import command
from alembic.config import Config

from mycelium.db import schema
from mycelium.paths import migrations_dir


def sqlalchemy_url(dsn: str) -> str:
    """An asyncpg DSN (``postgresql://…``) as a SQLAlchemy URL for the asyncpg dialect."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+asyncpg://" + dsn[len(prefix):]
    raise ValueError(f"not a PostgreSQL URL: {dsn!r}")


def alembic_config(dsn: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    return cfg


def upgrade(dsn: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str) -> None:
    command.downgrade(alembic_config(dsn), revision)


async def upgrade_async(dsn: str, revision: str = "head") -> None:
    """Alembic drives its own event loop; keep it off the caller's."""
    await asyncio.to_thread(upgrade, dsn, revision)


async def current_revision(dsn: str) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return await schema.installed_revision(conn)
    finally:
        await conn.close()


def head_revision() -> str:
    return schema.head()


# -- used from migrations/env.py and inside revisions -------------------------------------------------

def run_on(connection: Any, script: str) -> None:
    """Run a multi-statement SQL script on a migration connection, inside its transaction."""
    from sqlalchemy.util import await_only

    connection.exec_driver_sql("SELECT 1")  # make sure the migration transaction has begun
    await_only(connection.connection.driver_connection.execute(script))


def run_script(op: Any, script: str) -> None:
    run_on(op.get_bind(), script)


def run_as_owner(op: Any, script: str) -> None:
    """Run a script as the owner role ``mycelium_admin`` (where the migrating user may)."""
    run_script(op, schema.as_owner(script))


def apply_frozen(op: Any, name: str) -> None:
    """Apply a revision's frozen SQL file (``migrations/versions/<name>``) as the owner role."""
    run_as_owner(op, (migrations_dir() / "versions" / name).read_text())


def frozen_code(revision: str) -> str:
    """The code (functions, views, triggers) of a database at an older ``revision``: the newest
    release snapshot up to it (``<rev>.code.sql``, the whole code of the release that ends at
    ``rev``), then the code statements of the frozen files of the revisions after that snapshot,
    in order. Before the first snapshot, the frozen files from the first revision on."""
    chain = schema.revisions()
    if revision not in chain:
        raise ValueError(f"unknown revision {revision!r}")
    versions = migrations_dir() / "versions"
    upto = chain[: chain.index(revision) + 1]
    start = max((i for i, rev in enumerate(upto) if (versions / f"{rev}.code.sql").exists()), default=-1)
    parts = [(versions / f"{upto[start]}.code.sql").read_text()] if start >= 0 else []
    for rev in upto[start + 1:]:
        path = versions / f"{rev}.sql"
        if path.exists():
            parts.append(schema.code_of(path.read_text()))
    return "\n".join(parts)


def finish(connection: Any, revision: str | None) -> None:
    """The end of every migration run, in its transaction: the code of the revision the database
    is now at (``sql/`` at the head, the frozen files below it) replaces what is there, what it
    leaves out is dropped, and the privileges are applied again."""
    if revision is None:
        return  # everything the hub created is gone
    code = schema.current_code() if revision == schema.head() else frozen_code(revision)
    run_on(connection, schema.reapply(code))
    run_on(connection, schema.grants())
