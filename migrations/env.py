"""Alembic environment: async engine on asyncpg; the URL comes from the config or the environment."""

import asyncio
import os

from alembic import context
from sqlalchemy import pool
from sqlalchemy.ext.asyncio import create_async_engine

from mycelium.db.migrate import sqlalchemy_url

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    dsn = os.environ.get("MYCELIUM_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not dsn:
        raise SystemExit("set DATABASE_URL, or use `mycelium db upgrade` (it starts the embedded server)")
    return sqlalchemy_url(dsn)


def _run(connection) -> None:
    context.configure(connection=connection, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()


async def _online() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: the SQL lives in sql/ already")
asyncio.run(_online())
