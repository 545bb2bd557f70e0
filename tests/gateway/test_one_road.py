"""One road to the database: every named query takes named parameters (so only the gateway's binding
can call it), no module of the service sends SQL of its own outside the few that own connections,
and the gateway runs on one connection as well as on a pool."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import asyncpg

import mycelium
from mycelium.db.queries import _load
from mycelium.verbs import HUB_PROCESS, NOBODY, verbs_on

SERVICE = Path(mycelium.__file__).parent
SQL_METHODS = {"fetch", "fetchrow", "fetchval", "execute", "executemany", "copy_records_to_table",
               "copy_to_table", "copy_from_query", "copy_from_table", "cursor", "prepare"}
# the modules that own connections: migrations and the server (db/), the gateway itself, and the SDK
# store's connection set and its connection set-up (role, schema check)
OWNERS = {"db", "verbs/gateway.py", "ledger/connections.py", "ledger/postgres.py"}


def test_every_named_query_takes_named_parameters():
    numbered = [name for name, q in _load().items() if not q.params and re.search(r"\$\d", q.sql)]
    assert numbered == []


def _sends_sql(source: str, where: str) -> list[str]:
    """Each call of a connection's statement method (with an argument) in ``source``."""
    return [f"{where}:{node.lineno} .{node.func.attr}(…)" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in SQL_METHODS and node.args]


def test_no_module_outside_the_connection_owners_sends_sql_of_its_own():
    offenders = []
    for path in sorted(SERVICE.rglob("*.py")):
        rel = path.relative_to(SERVICE).as_posix()
        if rel.split("/")[0] in OWNERS or rel in OWNERS:
            continue
        offenders += _sends_sql(path.read_text(), rel)
    assert offenders == []


def test_the_scan_finds_a_statement_sent_directly():
    source = "async def f(hub):\n    async with hub.db.acquire() as c:\n        await c.fetchval('SELECT 1')\n"
    assert _sends_sql(source, "bad.py") == ["bad.py:3 .fetchval(…)"]


async def test_the_gateway_on_one_connection_keeps_that_connection_and_its_session_locks(db_dsn):
    conn = await asyncpg.connect(db_dsn)
    other = await asyncpg.connect(db_dsn)
    try:
        verbs = verbs_on(conn)
        assert await verbs.call(HUB_PROCESS, "try_lead", lock="test.one-road") is True
        # a session lock: held by this connection across statements, refused to any other
        assert await verbs_on(other).call(HUB_PROCESS, "try_lead", lock="test.one-road") is False
        async with verbs.transaction(readonly=True) as session:
            health = await session.call(NOBODY, "hub_health")
        assert health["schema_fingerprint"]
        await conn.close()
        assert await verbs_on(other).call(HUB_PROCESS, "try_lead", lock="test.one-road") is True
    finally:
        await other.close()
        if not conn.is_closed():
            await conn.close()
