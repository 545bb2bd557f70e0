"""The database going away: a claim while it is down never runs the body; a restart mid-call surfaces
as LedgerStorageUnavailableError and the redispatch never duplicates the effect."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from mycelium import (
    ActionLedger,
    LedgerHardBlockError,
    LedgerStorageUnavailableError,
    PostgresLedgerStorage,
    ToolTransitionBinding,
    ledger_sync,
    side_effect,
)
from mycelium.db import migrate
from mycelium.db.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def own_server(tmp_path):
    """A server of this test's own, so it can be stopped and restarted."""
    server = EmbeddedPostgres(tmp_path / "db")
    dsn = server.attach()
    migrate.upgrade(dsn)
    try:
        yield server, dsn
    finally:
        server.detach()


async def test_a_database_restart_mid_call_is_reported_and_never_yields_a_duplicate(own_server):
    server, dsn = own_server
    store = PostgresLedgerStorage(dsn)
    led = ActionLedger(
        store,
        agent_id="a",
        policy_version="1",
        lease_ttl=1.0,
        lease_renew_interval=0,
        poll_interval=0.05,
        poll_timeout=30,
    )
    effects = []

    @ledger_sync(
        action_ledger=led, transition_binding=ToolTransitionBinding.for_tool(side_effect_class="payment")
    )
    def charge(amount: int) -> dict:
        with side_effect():
            effects.append(amount)
        server.stop()  # the database restarts after the charge, before completion is recorded
        return {"charged": amount}

    try:
        with pytest.raises(LedgerStorageUnavailableError):
            await asyncio.to_thread(charge, 7, tool_call_id="c1")
        with pytest.raises(LedgerStorageUnavailableError):  # while it is down nothing runs
            await asyncio.to_thread(charge, 8, tool_call_id="c2")
        await asyncio.to_thread(server.attach)
        with pytest.raises(LedgerHardBlockError, match="crossed"):
            await asyncio.to_thread(charge, 7, tool_call_id="c1")
        assert effects == [7]
    finally:
        await asyncio.to_thread(store.close)


def test_mycelium_demo_shows_the_bug_then_the_fix_on_the_embedded_database(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mycelium.cli.main", "demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    counts = [line.split()[2] for line in done.stdout.splitlines() if "side effects:" in line]
    assert counts == ["2", "1"]
    assert "returned A's result" in done.stdout
