"""The Postgres store on a database without the hub's schema: it installs it at its first connection
(the default), or refuses at once with a message naming ``mycelium db upgrade`` (install_schema off,
an older revision, a user who may not install). Real databases, real processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest

from mycelium import (
    ActionLedger,
    LedgerSchemaError,
    LedgerStorageUnavailableError,
    PostgresLedgerStorage,
    ToolTransitionBinding,
    ledger,
    ledger_sync,
    load_config,
)
from mycelium.db import migrate, schema
from mycelium.db.releases import RELEASES
from mycelium.ledger.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
KEYED = ToolTransitionBinding.for_tool(side_effect_class="keyed_mutate")


@pytest.fixture
async def plain_user(pg_server) -> AsyncIterator[tuple[str, str]]:
    """A login role with no rights beyond logging in (no superuser, CREATEROLE or CREATEDB)."""
    name, password = f"plain_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    conn = await pg_server.admin()
    try:
        await conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
        yield name, password
    finally:
        await conn.execute(f"DROP ROLE {name}")  # its memberships go with it
        await conn.close()


def as_user(dsn: str, user: str, password: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}:{quote(password)}@{host}", parts.path, parts.query, ""))


async def fetch(dsn: str, sql: str, *args):
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def hub_objects(dsn: str) -> tuple[bool, bool]:
    """(schema mycelium exists, alembic_version exists)."""
    [row] = await fetch(dsn, "SELECT to_regnamespace('mycelium') IS NOT NULL AS s,"
                             " to_regclass('public.alembic_version') IS NOT NULL AS v")
    return row["s"], row["v"]


async def transition(dsn: str, tool: str):
    rows = await fetch(dsn, "SELECT tool, terminal_outcome, result, fence, agent_id"
                            " FROM mycelium.transitions WHERE tool = $1", tool)
    assert len(rows) == 1, rows
    return rows[0]


async def close(store: PostgresLedgerStorage) -> None:
    await store.aclose()
    await asyncio.to_thread(store.close)


async def test_a_fresh_database_gets_the_schema_at_head_and_the_call_is_ledgered(empty_dsn, caplog):
    assert await hub_objects(empty_dsn) == (False, False)
    store = PostgresLedgerStorage(empty_dsn)
    led = ActionLedger(store, agent_id="payments", policy_version="1")
    charges: list[int] = []

    @ledger(action_ledger=led, transition_binding=KEYED)
    async def charge(cents: int) -> dict:
        charges.append(cents)
        return {"charged": cents}

    try:
        with caplog.at_level("WARNING", logger="mycelium.ledger.postgres"):
            assert await charge(500, tool_call_id="c1") == {"charged": 500}
        assert await charge(500, tool_call_id="c1") == {"charged": 500}  # the stored result
    finally:
        await close(store)
    assert charges == [500]
    row = await transition(empty_dsn, "charge")
    assert (row["terminal_outcome"], row["result"], row["fence"]) == ("COMPLETED", '{"charged": 500}', 1)
    [version] = await fetch(empty_dsn, "SELECT version_num FROM alembic_version")
    assert version["version_num"] == migrate.head_revision()
    assert await migrate.current_revision(empty_dsn) == migrate.head_revision()
    assert "had no hub schema: it is at revision" in caplog.text  # not silently
    # the verbs run as the app role, which writes no table itself
    [app] = await fetch(empty_dsn, "SELECT has_table_privilege('mycelium_app', 'mycelium.transitions',"
                                   " 'INSERT') AS may")
    assert app["may"] is False


async def test_a_second_store_on_an_installed_database_installs_nothing(empty_dsn, caplog):
    first = PostgresLedgerStorage(empty_dsn)
    await first.connections()
    await close(first)
    caplog.clear()
    second = PostgresLedgerStorage(empty_dsn)
    try:
        with caplog.at_level("WARNING", logger="mycelium.ledger.postgres"):
            await second.connections()
    finally:
        await close(second)
    assert "no hub schema" not in caplog.text


def test_a_sync_tool_on_a_fresh_database(empty_dsn):
    store = PostgresLedgerStorage(empty_dsn)
    led = ActionLedger(store, agent_id="payments", policy_version="1")

    @ledger_sync(action_ledger=led, transition_binding=KEYED)
    def refund(cents: int) -> dict:
        return {"refunded": cents}

    try:
        assert refund(70, tool_call_id="r1") == {"refunded": 70}
    finally:
        store.close()
    row = asyncio.run(transition(empty_dsn, "refund"))
    assert (row["terminal_outcome"], row["result"]) == ("COMPLETED", '{"refunded": 70}')


async def test_install_schema_off_refuses_a_fresh_database_at_once_and_writes_nothing(empty_dsn):
    store = PostgresLedgerStorage(empty_dsn, install_schema=False)
    led = ActionLedger(store, agent_id="payments", policy_version="1")
    ran: list[int] = []

    @ledger(action_ledger=led, transition_binding=KEYED)
    async def charge(cents: int) -> dict:
        ran.append(cents)
        return {}

    try:
        with pytest.raises(LedgerSchemaError, match=r"mycelium db upgrade") as caught:
            await charge(1, tool_call_id="c1")
        assert isinstance(caught.value, LedgerStorageUnavailableError)
        assert "install_schema" in str(caught.value)
        with pytest.raises(LedgerSchemaError):  # still refused, not half-open
            await charge(1, tool_call_id="c1")
    finally:
        await close(store)
    assert ran == []
    assert await hub_objects(empty_dsn) == (False, False)


async def test_install_schema_off_works_on_a_migrated_database(db_dsn):
    store = PostgresLedgerStorage(db_dsn, install_schema=False)
    led = ActionLedger(store, agent_id="payments", policy_version="1")

    @ledger(action_ledger=led, transition_binding=KEYED)
    async def charge(cents: int) -> dict:
        return {"charged": cents}

    try:
        assert await charge(3, tool_call_id="c1") == {"charged": 3}
    finally:
        await close(store)


async def test_a_database_at_an_older_revision_is_refused_and_left_as_it_was(empty_dsn):
    older = [rev for rev in RELEASES.values() if rev != schema.head()][-1]  # a release before the head
    await asyncio.to_thread(migrate.upgrade, empty_dsn, older)
    store = PostgresLedgerStorage(empty_dsn)
    ran: list[int] = []

    @ledger_sync(action_ledger=ActionLedger(store), transition_binding=KEYED)
    def charge(cents: int) -> dict:
        ran.append(cents)
        return {}

    try:
        with pytest.raises(LedgerSchemaError, match=r"mycelium db upgrade"):
            await asyncio.to_thread(charge, 1, tool_call_id="c1")
    finally:
        await asyncio.to_thread(store.close)
    assert ran == []
    assert await migrate.current_revision(empty_dsn) == older


async def test_a_later_releases_schema_is_used_as_it_is(db_dsn):
    """During a rolling upgrade the database may be a release ahead of this SDK; its migrations keep
    the verbs this release calls, so the store carries on (as an older hub replica does)."""
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("UPDATE alembic_version SET version_num = '9999_a_later_release'")
    finally:
        await conn.close()
    store = PostgresLedgerStorage(db_dsn)

    @ledger(action_ledger=ActionLedger(store, agent_id="a"), transition_binding=KEYED)
    async def charge(cents: int) -> dict:
        return {"charged": cents}

    try:
        assert await charge(4, tool_call_id="c1") == {"charged": 4}
    finally:
        await close(store)


async def test_a_read_only_database_is_refused_with_what_failed_and_nothing_installed(empty_dsn, pg_server):
    """A hot standby, or a database set read-only: the install fails on the server's refusal."""
    name = urlsplit(empty_dsn).path.lstrip("/")
    conn = await pg_server.admin()
    try:
        await conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    finally:
        await conn.close()
    store = PostgresLedgerStorage(empty_dsn)
    try:
        with pytest.raises(LedgerSchemaError, match=r"ReadOnlySQLTransaction.*mycelium db upgrade"):
            await store.connections()
    finally:
        await close(store)
    assert await hub_objects(empty_dsn) == (False, False)


async def test_a_user_who_may_not_install_is_refused_at_once_and_nothing_is_created(
    empty_dsn, plain_user
):
    user, password = plain_user
    store = PostgresLedgerStorage(as_user(empty_dsn, user, password))
    ran: list[int] = []

    @ledger(action_ledger=ActionLedger(store), transition_binding=KEYED)
    async def charge(cents: int) -> dict:
        ran.append(cents)
        return {}

    try:
        with pytest.raises(LedgerSchemaError, match=r"mycelium db upgrade"):
            await charge(1, tool_call_id="c1")
    finally:
        await close(store)
    assert ran == []
    assert await hub_objects(empty_dsn) == (False, False)


async def test_an_app_login_on_a_migrated_database_needs_no_install_rights(db_dsn, plain_user):
    """Production's shape: the hub's database migrated by an operator, the agent connecting as a
    login in mycelium_app. The schema check must not need what only an installer has."""
    user, password = plain_user
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute(f"GRANT mycelium_app TO {user}")
    finally:
        await conn.close()
    store = PostgresLedgerStorage(as_user(db_dsn, user, password))

    @ledger(action_ledger=ActionLedger(store, agent_id="a"), transition_binding=KEYED)
    async def charge(cents: int) -> dict:
        return {"charged": cents}

    try:
        assert await charge(9, tool_call_id="c1") == {"charged": 9}
    finally:
        await close(store)
    assert (await transition(db_dsn, "charge"))["terminal_outcome"] == "COMPLETED"


# -- the YAML flow ---------------------------------------------------------------------------------

TOOLS = '''
import json, os

def charge(customer: str, cents: int) -> dict:
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(customer + "\\n")
    return {"customer": customer, "charged": cents}
'''


def write_app(folder: Path, dsn: str, extra: str = "") -> Path:
    (folder / "payments_app.py").write_text(TOOLS)
    config = folder / "mycelium.yaml"
    config.write_text(
        "transition: {agent_id: payment-agent, policy_version: '2026.07.1'}\n"
        f"action_ledger: {{storage: postgres, dsn: {json.dumps(dsn)}{extra}}}\n"
        "tools:\n"
        "  charge: {callable: 'payments_app:charge', side_effect_class: keyed_mutate}\n"
    )
    return config


def test_the_yaml_flow_works_on_a_fresh_database(empty_dsn, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EFFECTS", str(tmp_path / "effects"))
    config = load_config(write_app(tmp_path, empty_dsn))
    import payments_app

    config.instrument(payments_app)
    try:
        assert payments_app.charge("acct_1", 100, tool_call_id="call_abc")["charged"] == 100
        assert payments_app.charge("acct_1", 100, tool_call_id="call_abc")["charged"] == 100
    finally:
        config.action_ledger().storage.close()
        sys.modules.pop("payments_app", None)
    assert (tmp_path / "effects").read_text().splitlines() == ["acct_1"]
    row = asyncio.run(transition(empty_dsn, "charge"))
    assert (row["terminal_outcome"], row["agent_id"]) == ("COMPLETED", "payment-agent")


def test_the_yaml_install_schema_key(empty_dsn, tmp_path):
    config = load_config(write_app(tmp_path, empty_dsn, ", install_schema: false"))
    store = config.action_ledger().storage
    assert isinstance(store, PostgresLedgerStorage) and store.install_schema is False
    with pytest.raises(ConfigError, match="install_schema must be true or false"):
        load_config(write_app(tmp_path, empty_dsn, ", install_schema: 'yes'"))


# -- two processes ---------------------------------------------------------------------------------

def spawn_worker(dsn: str, tmp: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ledger.workers", "slow", "--dsn", dsn, "--effects",
         str(tmp / "effects"), "--ready", str(tmp / f"{name}.ready"), "--sleep", "0.5"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.slow
async def test_two_processes_starting_on_one_fresh_database_install_once_and_run_the_call_once(
    empty_dsn, tmp_path
):
    procs = [spawn_worker(empty_dsn, tmp_path, name) for name in ("a", "b")]
    outs = []
    for proc in procs:
        out, err = await asyncio.to_thread(proc.communicate, timeout=120)
        assert proc.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert all("result" in out for out in outs), outs  # neither was refused nor failed installing
    assert outs[0]["result"] == outs[1]["result"]
    assert len((tmp_path / "effects").read_text().splitlines()) == 1
    assert await migrate.current_revision(empty_dsn) == migrate.head_revision()
    rows = await fetch(empty_dsn, "SELECT terminal_outcome FROM mycelium.transitions")
    assert [r["terminal_outcome"] for r in rows] == ["COMPLETED"]
