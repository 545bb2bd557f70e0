"""The app role calls the public functions (mycelium.public_verbs()) and nothing else of the schema;
the auditor keeps every read-only function; nothing a public read or a view names is internal."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

from mycelium.db import schema
from mycelium.paths import sql_dir

CALL = re.compile(r"mycelium\.([a-z_0-9]+)\s*\(")
MARK = re.compile(r"COMMENT ON FUNCTION mycelium\.([a-z_0-9]+) IS '(public[^']*)'")
DEFINES = re.compile(r"(?:CREATE OR REPLACE FUNCTION|EXECUTE format\(\s*'CREATE OR REPLACE FUNCTION) mycelium\.([a-z_0-9]+)\(")


@pytest.fixture
async def as_app(admin_conn: asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    """The admin connection acting as mycelium_app (what a hub replica connects as)."""
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("SET ROLE mycelium_app")
    try:
        yield admin_conn
    finally:
        await admin_conn.execute("RESET ROLE")


@pytest.mark.parametrize("statement", [
    "SELECT mycelium.post_notice('atlas', 'filed', 'work/x')",
    "SELECT mycelium.set_config('presence.ttl_seconds', '5')",
    "SELECT mycelium.wake_hint('mycelium_board', 'atlas')",
    "SELECT mycelium.touch_presence('atlas', 'julia')",
    "SELECT mycelium.refuse(404, 'x', 'y')",
    "SELECT mycelium.author('julia')",
    "SELECT mycelium.announce_expiry(NULL, 'x')",
])
async def test_the_app_role_cannot_call_an_internal_helper(as_app, statement):
    with pytest.raises(asyncpg.PostgresError) as err:
        await as_app.execute(statement)
    assert err.value.sqlstate == "42501"


async def test_the_app_role_calls_the_public_verbs_and_reads(as_app):
    await as_app.execute("SELECT mycelium.write_memory('atlas', 'work/x', '\"# X\"', 'julia')")
    assert await as_app.fetchval("SELECT owner FROM mycelium.claim_task('atlas', 'work/x', 'julia')") == "julia"
    assert await as_app.fetchval("SELECT assignment FROM mycelium.read_assignment('atlas', 'work/x')") == "held"
    assert await as_app.fetchval("SELECT count(*) FROM mycelium.board_rows") == 1
    assert await as_app.fetchval("SELECT count(*) FROM mycelium.timeline") == 2  # filed, claimed
    with pytest.raises(asyncpg.PostgresError) as err:
        await as_app.execute("SELECT mycelium.room_known('nowhere')")
    assert err.value.sqlstate == "MY404"


async def test_every_public_name_is_a_function_and_every_function_is_public_or_internal(admin_conn):
    rows = await admin_conn.fetch("""
        SELECT v.name, v.kind, count(p.oid) AS n FROM mycelium.public_verbs() v
        LEFT JOIN pg_proc p ON p.proname = v.name AND p.pronamespace = 'mycelium'::regnamespace
        GROUP BY 1, 2""")
    assert [r["name"] for r in rows if r["n"] == 0] == []
    assert {r["kind"] for r in rows} == {"write", "read", "inlined"}
    granted = await admin_conn.fetch("""
        SELECT p.proname, has_function_privilege('mycelium_app', p.oid, 'EXECUTE') AS app,
               has_function_privilege('mycelium_auditor', p.oid, 'EXECUTE') AS auditor, p.provolatile::text,
               EXISTS (SELECT 1 FROM mycelium.public_verbs() v WHERE v.name = p.proname) AS public
        FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace AND p.prokind = 'f'""")
    assert [g["proname"] for g in granted if g["app"] != g["public"]] == []
    assert [g["proname"] for g in granted if g["auditor"] != (g["provolatile"] != "v")] == []
    assert not any(g["public"] for g in granted if g["proname"] in ("post_notice", "set_config", "wake_hint"))


async def test_nothing_a_public_read_or_a_view_names_is_internal(admin_conn):
    """A view, a public SQL read and the helpers they name run with the caller's rights (inlined into
    its query); a PL/pgSQL read and every write run with the owner's."""
    procs = {r["proname"]: r for r in await admin_conn.fetch("""
        SELECT p.proname, pg_get_functiondef(p.oid) AS def, p.prosecdef,
               EXISTS (SELECT 1 FROM mycelium.public_verbs() v WHERE v.name = p.proname) AS public
        FROM pg_proc p WHERE p.pronamespace = 'mycelium'::regnamespace AND p.prokind = 'f'""")}
    views = await admin_conn.fetch("""SELECT c.relname, pg_get_viewdef(c.oid) AS def FROM pg_class c
                                      WHERE c.relnamespace = 'mycelium'::regnamespace AND c.relkind = 'v'""")
    todo = [(name, f"view {v['relname']}") for v in views for name in CALL.findall(v["def"])]
    todo += [(name, "public") for name, p in procs.items() if p["public"]]
    seen: dict[str, str] = {}
    while todo:
        name, why = todo.pop()
        if name in seen or name not in procs:
            continue
        seen[name] = why
        if not procs[name]["prosecdef"]:
            todo += [(inner, name) for inner in CALL.findall(procs[name]["def"]) if inner != name]
    assert {name: why for name, why in seen.items() if not procs[name]["public"]} == {}


async def test_the_app_role_reads_every_view(as_app):
    views = await as_app.fetch("SELECT relname FROM pg_class WHERE relnamespace = 'mycelium'::regnamespace "
                               "AND relkind = 'v'")
    assert views
    for v in views:
        await as_app.fetch(f'SELECT * FROM mycelium."{v["relname"]}" LIMIT 1')


def test_each_public_mark_follows_the_definition_it_marks():
    """A verb is made public where it is defined: its COMMENT is the statement right after its
    CREATE (or the DO block that creates it), so reading one file shows what a verb is."""
    misplaced, marked = [], []
    for path in sorted(sql_dir().glob("*.sql")):
        statements = [schema._bare(s) for s in schema.split(path.read_text())]
        for before, statement in itertools.pairwise(statements):
            mark = MARK.match(statement)
            if mark is None:
                continue
            marked.append(mark.group(1))
            if mark.group(1) not in DEFINES.findall(before):
                misplaced.append(f"{path.name}: {mark.group(1)}")
    assert misplaced == []
    assert len(marked) == len(set(marked)) > 100


async def test_a_verb_is_one_name_and_its_mark_is_well_formed(admin_conn):
    """\\df mycelium.* lists one function per name, and a comment that starts with "public" is one
    of the three marks (a misspelt mark would silently make a verb internal)."""
    overloaded = await admin_conn.fetch("""
        SELECT proname FROM pg_proc WHERE pronamespace = 'mycelium'::regnamespace
        GROUP BY 1 HAVING count(*) > 1""")
    assert [r["proname"] for r in overloaded] == []
    marks = await admin_conn.fetch("""
        SELECT p.proname, d.description FROM pg_proc p
        JOIN pg_description d ON d.objoid = p.oid AND d.classoid = 'pg_proc'::regclass
        WHERE p.pronamespace = 'mycelium'::regnamespace AND d.description ILIKE 'public%'""")
    mark = re.compile(r"public (write|read|inlined)(: .+)?")
    assert [r["proname"] for r in marks if not mark.fullmatch(r["description"])] == []
    listed = await admin_conn.fetchval("SELECT count(*) FROM mycelium.public_verbs()")
    assert listed == len(marks)
