"""The database's code and schema: sql/ statements are schema or code, a fresh build from sql/ and a
database taken through every revision have one catalogue, code that left sql/ leaves the database,
and the SDK's installer builds an empty database once, whoever races it."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from alembic.script import ScriptDirectory

from mycelium.db import migrate, schema
from mycelium.paths import sql_dir
from tests.support.catalogue import catalogue, differences, install


def test_the_splitter_keeps_semicolons_inside_quotes_comments_and_bodies():
    script = """
    -- a comment; still a comment
    CREATE TABLE t (a text DEFAULT 'x;y', b text DEFAULT E'it\\'s;');
    /* block; /* nested; */ still; */ INSERT INTO t VALUES ('a''b;', $1);
    CREATE OR REPLACE FUNCTION f() RETURNS text LANGUAGE sql AS $body$ SELECT 'a;b' $body$;
    CREATE OR REPLACE FUNCTION g() RETURNS text LANGUAGE plpgsql AS $$ BEGIN RETURN ';'; END $$;
    SELECT "odd;name" FROM t
    """
    parts = schema.split(script)
    assert [schema.kind(p) for p in parts] == ["schema", "schema", "code", "code", "schema"]
    assert "'x;y'" in parts[0] and "E'it\\'s;'" in parts[0]
    assert "$body$ SELECT 'a;b' $body$" in parts[2]


def test_every_statement_in_sql_is_schema_or_code_and_code_is_replaceable():
    for name in schema.SQL_FILES:
        for statement in schema.split((sql_dir() / name).read_text()):
            schema.kind(statement)  # raises on anything else
    with pytest.raises(ValueError, match="CREATE OR REPLACE"):
        schema.kind("CREATE FUNCTION mycelium.f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;")
    with pytest.raises(ValueError, match="unknown kind"):
        schema.kind("GRANT SELECT ON mycelium.rooms TO someone;")
    listed = set(schema.SQL_FILES) | {"roles.sql", "grants.sql"}
    assert {p.name for p in sql_dir().glob("*.sql")} == listed, "every sql/ file is applied, in a known order"


def test_the_revision_history_is_one_line_that_alembic_and_the_installer_agree_on():
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://x@/x"))
    walked = [r.revision for r in script.walk_revisions()][::-1]
    assert tuple(walked) == schema.revisions()
    assert script.get_current_head() == schema.head() == migrate.head_revision()


async def test_a_fresh_build_from_sql_equals_every_revision_applied(pg_server, empty_dsn, db_dsn):
    # db_dsn: a copy of the suite's template, migrated by Alembic through every revision
    assert await install(empty_dsn) == schema.head()
    migrated, fresh = await catalogue(db_dsn), await catalogue(empty_dsn)
    assert len(fresh) > 500
    assert migrated == fresh, "\n".join(differences(migrated, fresh)[:40])
    conn = await asyncpg.connect(empty_dsn)
    try:
        assert await conn.fetchval("SELECT version_num FROM alembic_version") == schema.head()
        assert await conn.fetchval("SELECT count(*) FROM mycelium.store") == 1
    finally:
        await conn.close()
    # Alembic carries on from the installer's record: nothing to apply, and the schema stays
    await asyncio.to_thread(migrate.upgrade, empty_dsn)
    assert await catalogue(empty_dsn) == fresh


async def test_an_upgrade_drops_code_that_sql_no_longer_defines(db_dsn):
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("""
          CREATE FUNCTION mycelium.left_behind(p int) RETURNS int LANGUAGE sql AS $$ SELECT p $$;
          CREATE FUNCTION mycelium.left_behind_trigger() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN RETURN NEW; END $$;
          CREATE TRIGGER left_behind BEFORE INSERT ON mycelium.rooms
            FOR EACH ROW EXECUTE FUNCTION mycelium.left_behind_trigger();
          CREATE VIEW mycelium.left_behind_view AS SELECT name FROM mycelium.rooms;
          -- an overload of a verb that sql/ defines with another signature
          CREATE FUNCTION mycelium.refuse(status text) RETURNS void LANGUAGE sql AS $$ SELECT $$;
        """)
        before = await conn.fetchval("SELECT mycelium.schema_fingerprint()")
    finally:
        await conn.close()
    await asyncio.to_thread(migrate.upgrade, db_dsn)
    conn = await asyncpg.connect(db_dsn)
    try:
        left = await conn.fetch("""
          SELECT proname::text AS name FROM pg_proc
          WHERE pronamespace = 'mycelium'::regnamespace AND (proname LIKE 'left_behind%'
                OR oid = to_regprocedure('mycelium.refuse(text)'))
          UNION ALL SELECT tgname FROM pg_trigger WHERE tgname = 'left_behind'
          UNION ALL SELECT relname FROM pg_class WHERE relname = 'left_behind_view'""")
        assert left == []
        assert await conn.fetchval("SELECT to_regprocedure('mycelium.refuse(integer,text,text,jsonb)') IS NOT NULL")
        assert await conn.fetchval("SELECT mycelium.schema_fingerprint()") != before
    finally:
        await conn.close()


async def test_code_an_older_revision_created_in_the_same_transaction_is_dropped_too(db_dsn):
    # A migration from scratch runs every revision and then the code in one transaction: what an
    # older revision's frozen SQL defined there (the trigger transitions_receipt, once) is as new as
    # what the code re-creates, and must go all the same when sql/ no longer defines it.
    before = await catalogue(db_dsn)
    conn = await asyncpg.connect(db_dsn)
    try:
        async with conn.transaction():
            await conn.execute("""
              CREATE FUNCTION mycelium.old_revision_fn(p int) RETURNS int LANGUAGE sql AS $$ SELECT p $$;
              CREATE FUNCTION mycelium.old_revision_trigger() RETURNS trigger LANGUAGE plpgsql AS
                $$ BEGIN RETURN NULL; END $$;
              CREATE TRIGGER old_revision_receipt AFTER UPDATE ON mycelium.transitions
                FOR EACH ROW EXECUTE FUNCTION mycelium.old_revision_trigger();
              CREATE VIEW mycelium.old_revision_view AS SELECT name FROM mycelium.rooms;
            """)
            await conn.execute(schema.reapply(schema.current_code()))  # as migrate.finish does
            await conn.execute(schema.grants())
    finally:
        await conn.close()
    after = await catalogue(db_dsn)
    assert after == before, "\n".join(differences(after, before))


async def test_code_a_table_still_depends_on_is_not_dropped_silently(db_dsn):
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("""
          CREATE FUNCTION mycelium.stray_default() RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$;
          ALTER TABLE mycelium.rooms ADD COLUMN stray text DEFAULT mycelium.stray_default();
        """)
    finally:
        await conn.close()
    with pytest.raises(Exception, match="stray"):
        await asyncio.to_thread(migrate.upgrade, db_dsn)
    conn = await asyncpg.connect(db_dsn)
    try:  # the failed upgrade changed nothing
        assert await conn.fetchval("SELECT to_regprocedure('mycelium.stray_default()') IS NOT NULL")
    finally:
        await conn.close()


async def test_two_processes_installing_at_once_build_the_schema_once(empty_dsn):
    results = await asyncio.gather(install(empty_dsn), install(empty_dsn), install(empty_dsn))
    assert results == [schema.head()] * 3
    conn = await asyncpg.connect(empty_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM alembic_version") == 1
        assert await conn.fetchval("SELECT count(*) FROM mycelium.store") == 1
    finally:
        await conn.close()


async def test_the_installer_leaves_an_older_or_unrecorded_schema_to_alembic(empty_dsn):
    await asyncio.to_thread(migrate.upgrade, empty_dsn, schema.revisions()[0])
    with pytest.raises(schema.SchemaRefused, match="mycelium db upgrade"):
        await install(empty_dsn)
    conn = await asyncpg.connect(empty_dsn)
    try:
        await conn.execute("DROP TABLE alembic_version")
    finally:
        await conn.close()
    with pytest.raises(schema.SchemaRefused, match="no record of its revision"):
        await install(empty_dsn)


async def test_a_role_that_may_not_build_the_schema_is_told_what_to_run(pg_server, empty_dsn):
    admin = await pg_server.admin()
    try:
        await admin.execute("DROP ROLE IF EXISTS mycelium_test_weak")
        await admin.execute("CREATE ROLE mycelium_test_weak LOGIN")
    finally:
        await admin.close()
    conn = await asyncpg.connect(empty_dsn, user="mycelium_test_weak")
    try:
        with pytest.raises(schema.SchemaRefused, match="mycelium db upgrade"):
            await schema.install(conn)
        assert await conn.fetchval("SELECT to_regnamespace('mycelium') IS NULL")
    finally:
        await conn.close()
        admin = await pg_server.admin()
        try:
            await admin.execute("DROP OWNED BY mycelium_test_weak; DROP ROLE mycelium_test_weak")
        finally:
            await admin.close()
