"""Alembic environment: async engine on asyncpg; the URL comes from the config or the environment.

Every run, in one transaction: the roles and extensions, the revisions, then the database's code
and privileges for the revision it ends at (``mycelium.db.migrate.finish``).
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


def _run(connection) -> None:
    context.configure(connection=connection, transactional_ddl=True)
    with context.begin_transaction():
        migrate.run_on(connection, f"SELECT pg_advisory_xact_lock({schema.INSTALL_LOCK})")
        migrate.run_on(connection, schema.preamble())
        context.run_migrations()
        migrate.finish(connection, context.get_context().get_current_revision())


async def _online() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: run them against a database")
asyncio.run(_online())
