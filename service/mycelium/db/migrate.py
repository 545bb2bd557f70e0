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

from mycelium.db import releases, schema
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
    check_target(revision, downgrading=False)
    command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str) -> None:
    """Down to a release's revision (or base): see :mod:`mycelium.db.releases`."""
    check_target(revision, downgrading=True)
    cfg = alembic_config(dsn)
    cfg.attributes["downgrading"] = True
    command.downgrade(cfg, revision)


async def upgrade_async(dsn: str, revision: str = "head") -> None:
    """Alembic drives its own event loop; keep it off the caller's."""
    await asyncio.to_thread(upgrade, dsn, revision)


#: how often a start reads whether its code is current when the read keeps meeting a deadlock
CURRENT_CHECK_ATTEMPTS = 5


async def upgrade_on_start(dsn: str) -> bool:
    """A hub's start: migrate to the head unless the database already runs exactly this package's
    code (:func:`mycelium.db.schema.code_is_current`), so replicas starting beside serving ones take
    no locks. Whether it migrated."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        for attempt in range(CURRENT_CHECK_ATTEMPTS):
            try:
                current = await schema.code_is_current(conn)
                break
            except asyncpg.DeadlockDetectedError:
                # the read met a replica turning the token gate's row security (ALTER TABLE locks,
                # sql/privacy.sql), which the deadlock let through: the read is safe to repeat
                if attempt == CURRENT_CHECK_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
    finally:
        await conn.close()
    if not current:
        await upgrade_async(dsn)
    return not current


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


def code_at(revision: str, *, downgrading: bool = False) -> str:
    """The code (functions, views, triggers) a database at ``revision`` runs (see
    :mod:`mycelium.db.releases`): ``sql/`` at the head, a release's snapshot when a downgrade goes to
    it (to the head's own revision too, when the head is that release), and the revisions' own frozen
    files up to the first release. Any other revision is refused: its code is not shipped."""
    chain = schema.revisions()
    if revision not in chain:
        raise schema.SchemaRefused(f"unknown schema revision {revision!r} (the head is {chain[-1]})")
    versions = migrations_dir() / "versions"
    snapshot = versions / f"{revision}.code.sql"
    if revision == chain[-1] and not (downgrading and snapshot.exists()):
        return schema.current_code()
    if snapshot.exists():
        return snapshot.read_text()
    at = chain.index(revision)
    if at <= chain.index(releases.RELEASES[releases.FIRST]):
        frozen = (versions / f"{rev}.sql" for rev in chain[: at + 1])
        return "\n".join(schema.code_of(path.read_text()) for path in frozen if path.exists())
    version = releases.release_of(revision)
    if version is not None:
        raise schema.SchemaRefused(
            f"release {version}'s code ({revision}) is no longer shipped (only the previous release's "
            "is): go there with the next release's package, then on with that release's")
    raise schema.SchemaRefused(
        f"{revision} is not a release revision: a database goes to the head ({chain[-1]}), "
        f"a release ({releases.listed()}) or base")


def check_target(revision: str, *, downgrading: bool) -> None:
    """Refuse, before anything runs, a target no database may be left at. ``head`` and ``base`` pass;
    a revision id (or a unique prefix of one, as Alembic takes) must have shipped code; Alembic's
    relative forms (``-1``, ``+2``, ``rev@head``) are judged by :func:`finish` where they land."""
    relative = "@" in revision or (revision[:1] in ("+", "-") and revision[1:].isdigit())
    if revision in ("head", "heads", "base") or relative:
        return
    matches = [rev for rev in schema.revisions() if rev == revision or rev.startswith(revision)]
    if len(matches) != 1:
        raise schema.SchemaRefused(
            f"unknown schema revision {revision!r}: a database goes to the head ({schema.head()}), "
            f"a release ({releases.listed()}) or base")
    code_at(matches[0], downgrading=downgrading)


def code_is_current_on(connection: Any) -> bool:
    """On a migration connection at the head: :func:`mycelium.db.schema.code_is_current`."""
    from sqlalchemy import text

    query = schema.CODE_IS_CURRENT.replace("$1", ":digest")
    return bool(connection.execute(text(query), {"digest": schema.code_digest()}).scalar())


def drop_triggers(connection: Any) -> None:
    """Before a downgrade's revisions run: every trigger of schema mycelium goes, and every
    function's comment (the code of the revision it ends at brings back its own), so no revision's
    downgrade depends on what a later release named its triggers or marked public."""
    run_on(connection, schema.as_owner("""
      DO $drop$
      DECLARE t record;
      BEGIN
        FOR t IN SELECT g.tgname, g.tgrelid::regclass AS tbl
                 FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
                 WHERE c.relnamespace = 'mycelium'::regnamespace AND NOT g.tgisinternal
        LOOP
          EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.tbl);
        END LOOP;
        -- and every function's comment: CREATE OR REPLACE keeps one, so a mark the older code
        -- does not make would outlive the downgrade
        FOR t IN SELECT p.oid::regprocedure AS f FROM pg_proc p
                 JOIN pg_description d ON d.objoid = p.oid AND d.classoid = 'pg_proc'::regclass
                 WHERE p.pronamespace = 'mycelium'::regnamespace
        LOOP
          EXECUTE format('COMMENT ON FUNCTION %s IS NULL', t.f);
        END LOOP;
      END
      $drop$;
    """))


def finish(connection: Any, revision: str | None, *, downgrading: bool = False) -> None:
    """The end of every migration run, in its transaction: the code of the revision the database
    is now at (:func:`code_at`) replaces what is there, what it leaves out is dropped, and the
    privileges are applied again."""
    if revision is None:
        return  # everything the hub created is gone
    code = code_at(revision, downgrading=downgrading)
    run_on(connection, schema.reapply(code))
    run_on(connection, schema.grants())
    run_on(connection, schema.stamp(applied=code == schema.current_code()))
