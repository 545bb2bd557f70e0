"""Fixtures for the ledger: a store on the test's own database, and plain SQL helpers."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import asyncpg
import pytest

from mycelium.ledger.ledger import ActionLedger
from mycelium.ledger.postgres import PostgresLedgerStorage


@pytest.fixture
async def store(db_dsn: str):
    s = PostgresLedgerStorage(db_dsn, max_size=4)
    try:
        yield s
    finally:
        await s.aclose()
        await asyncio.to_thread(s.close)


@pytest.fixture
def make_ledger(store):
    def make(**options: Any) -> ActionLedger:
        settings: dict[str, Any] = {
            "agent_id": "agent-1",
            "policy_version": "v1",
            "poll_interval": 0.01,
            "poll_timeout": 10.0,
        }
        settings.update(options)
        return ActionLedger(store, **settings)

    return make


async def claim(
    conn: asyncpg.Connection,
    request_id: str,
    owner: str = "w:1",
    cls: str = "non_idempotent_mutate",
    **kw: Any,
) -> asyncpg.Record:
    """Call mycelium.claim_transition as a person in psql would (named arguments)."""
    args: dict[str, Any] = {
        "p_request_id": request_id,
        "p_transition_key": kw.pop("key", "k-" + request_id),
        "p_tool": kw.pop("tool", "pay"),
        "p_owner": owner,
        "p_side_effect_class": cls,
        "p_agent_id": kw.pop("agent", "agent-1"),
        "p_policy_version": "v1",
    }
    args.update({f"p_{k}": v for k, v in kw.items()})
    names = list(args)
    sql = (
        "SELECT c.gate, c.action, c.repaired, (c.transition).* FROM mycelium.claim_transition("
        + ", ".join(f"{n} => ${i + 1}" for i, n in enumerate(names))
        + ") c"
    )
    return await conn.fetchrow(sql, *args.values())


async def outcome(conn: asyncpg.Connection, request_id: str) -> asyncpg.Record:
    return await conn.fetchrow("SELECT * FROM mycelium.transitions WHERE request_id = $1", request_id)


async def expire(conn: asyncpg.Connection, request_id: str) -> None:
    """Wait (on the database clock) until the row's lease has passed."""
    for _ in range(1000):
        if not await conn.fetchval(
            "SELECT lease_until > clock_timestamp() FROM mycelium.transitions WHERE request_id = $1",
            request_id,
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the lease of {request_id} never expired")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory):
    """One real redis-server per test session (Debian's redis-server package; .ci/run installs it)."""
    from tests.ledger.redis_server import BINARY, RedisServer

    if BINARY is None:
        if os.environ.get("MYCELIUM_REQUIRE_REDIS") == "1":  # set by .ci/run: CI never skips these
            pytest.fail("redis-server is not installed (MYCELIUM_REQUIRE_REDIS=1)")
        pytest.skip("redis-server is not installed here (apt-get install -y redis-server); .ci/run installs it")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server) -> str:
    redis_server.flush()
    return redis_server.url
