"""Schema migrations: Alembic revisions that apply the readable definitions in ``sql/``.

A revision names the ``sql/`` files it applies (see ``migrations/versions``). They run as the owner
role ``mycelium_admin`` where the server has it, and ``sql/grants.sql`` re-applies the privilege policy
after every revision, so new objects follow the same rules as old ones.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import command
from alembic.config import Config

from mycelium.paths import migrations_dir, sql_dir


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
        if await conn.fetchval("SELECT to_regclass('public.alembic_version') IS NULL"):
            return None
        return await conn.fetchval("SELECT version_num FROM alembic_version")
    finally:
        await conn.close()


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("postgresql://x@/x")).get_current_head()


# -- used from inside revisions --------------------------------------------------------------------

def _driver(op: Any) -> tuple[Any, Any]:
    from sqlalchemy.util import await_only

    bind = op.get_bind()
    bind.exec_driver_sql("SELECT 1")  # make sure the migration transaction has begun
    return bind.connection.driver_connection, await_only


def run_script(op: Any, script: str) -> None:
    """Run a multi-statement SQL script inside the migration's transaction."""
    raw, await_only = _driver(op)
    await_only(raw.execute(script))


def apply_sql(op: Any, *files: str) -> None:
    """Apply ``sql/<file>`` scripts in order as the owner role, then re-apply the grants (as the
    migrating user, who also owns Alembic's version table)."""
    folder = sql_dir()
    run_script(op, (folder / "roles.sql").read_text())
    run_script(op, "CREATE EXTENSION IF NOT EXISTS vector")
    run_script(
        op,
        "DO $$ BEGIN IF pg_has_role(current_user, 'mycelium_admin', 'MEMBER') THEN "
        "SET LOCAL ROLE mycelium_admin; END IF; END $$",
    )
    for name in files:
        run_script(op, (folder / name).read_text())
    run_script(op, "RESET ROLE")
    run_script(op, (folder / "grants.sql").read_text())


def drop_sql(op: Any, script: str) -> None:
    """Run a downgrade script as the owner role."""
    run_script(
        op,
        "DO $$ BEGIN IF pg_has_role(current_user, 'mycelium_admin', 'MEMBER') THEN "
        "SET LOCAL ROLE mycelium_admin; END IF; END $$",
    )
    run_script(op, script)
    run_script(op, "RESET ROLE")
