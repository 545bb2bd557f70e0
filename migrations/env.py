"""Alembic environment: async engine on asyncpg; the URL comes from the config or the environment.

Every run, in one transaction: the roles and extensions, the revisions, then the database's code
and privileges for the revision it ends at (``mycelium.db.migrate.finish``). A downgrade drops the
triggers first (the code it ends at brings back its own) and ends at a release's code.
"""

import asyncio
import os

from alembic import context
from sqlalchemy import pool
from sqlalchemy.ext.asyncio import create_async_engine

from mycelium.db import migrate, schema

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    dsn = os.environ.get("MYCELIUM_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not dsn:
        raise SystemExit("set DATABASE_URL, or use `mycelium db upgrade` (it starts the embedded server)")
    return migrate.sqlalchemy_url(dsn)


def _below(start: str | None, end: str | None) -> bool:
    """``end`` comes before ``start`` in the history (None: base)."""
    chain = schema.revisions()
    if start is None or start not in chain:
        return False
    return end in (None, "base") or (end in chain and chain.index(end) < chain.index(start))


def _run(connection) -> None:
    context.configure(connection=connection, transactional_ddl=True)
    with context.begin_transaction():
        migrate.run_on(connection, f"SELECT pg_advisory_xact_lock({schema.INSTALL_LOCK})")
        migrate.run_on(connection, schema.preamble())
        start = context.get_context().get_current_revision()
        # a downgrade: said by mycelium.db.migrate.downgrade, or Alembic's own command going down
        downgrading = bool(config.attributes.get("downgrading")) \
            or _below(start, context.get_revision_argument())
        if downgrading:
            migrate.drop_triggers(connection)
        elif start == schema.head() and migrate.code_is_current_on(connection):
            return  # another process applied this code while this one waited for the lock
        context.run_migrations()
        migrate.finish(connection, context.get_context().get_current_revision(), downgrading=downgrading)


async def _online() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: run them against a database")
asyncio.run(_online())
