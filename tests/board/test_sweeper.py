"""The lease sweeper: each lease that runs out is announced once, across sweeps and restarts."""

from __future__ import annotations

import json
from pathlib import Path

from mycelium.hub import Hub
from mycelium.verbs import verbs_of
from mycelium.workers.sweeper import apply_board_settings, sweep_once
from tests.board.conftest import ROOM, backdate, notices, task

CONTRACT = json.loads((Path(__file__).resolve().parents[2] / "contracts" / "board-vocabulary.json").read_text())


async def test_a_lease_is_announced_once_when_it_runs_out_and_again_only_after_a_new_claim(hub, admin_conn, room):
    key = await task(admin_conn, "Rotate the keys")
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'growth')", ROOM, key)
    assert await sweep_once(verbs_of(hub)) == []
    await backdate(admin_conn, key, 10)
    assert await sweep_once(verbs_of(hub)) == []
    await backdate(admin_conn, key, 31)
    assert await sweep_once(verbs_of(hub)) == [(ROOM, key)]
    expired = await notices(admin_conn, ROOM, "expired")
    assert [(n["key"], n["title"], n["by"]) for n in expired] == [(key, "Rotate the keys", "growth")]
    assert await sweep_once(verbs_of(hub)) == []
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'other')", ROOM, key)
    await backdate(admin_conn, key, 40)
    assert await sweep_once(verbs_of(hub)) == [(ROOM, key)]
    assert [n["by"] for n in await notices(admin_conn, ROOM, "expired")] == ["growth", "other"]


async def test_released_and_resolved_leases_never_expire(hub, admin_conn, room):
    a = await task(admin_conn, "Released")
    b = await task(admin_conn, "Resolved")
    for key in (a, b):
        await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'growth')", ROOM, key)
        await backdate(admin_conn, key, 29)
    await admin_conn.execute("SELECT 1 FROM mycelium.release_task($1, $2, 'growth')", ROOM, a)
    await admin_conn.execute("SELECT 1 FROM mycelium.resolve_task($1, $2, 'growth')", ROOM, b)
    assert await sweep_once(verbs_of(hub)) == []
    assert await admin_conn.fetchval("SELECT mycelium.next_lease_expiry()") is None


async def test_a_restarted_sweeper_neither_repeats_nor_loses_an_announcement(hub, admin_conn, room, db_dsn,
                                                                             settings_for):
    first, second = await task(admin_conn, "First"), await task(admin_conn, "Second")
    for key in (first, second):
        await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'growth')", ROOM, key)
    await backdate(admin_conn, first, 35)
    assert await sweep_once(verbs_of(hub)) == [(ROOM, first)]
    await hub.stop()
    await backdate(admin_conn, second, 35)  # runs out while no sweeper is up
    again = Hub(settings_for(db_dsn, embedder="none"))
    await again.start()
    try:
        assert await sweep_once(verbs_of(again)) == [(ROOM, second)]
        assert await sweep_once(verbs_of(again)) == []
    finally:
        await again.stop()
    assert [n["key"] for n in await notices(admin_conn, ROOM, "expired")] == [first, second]


async def test_a_sweep_that_fails_announces_nothing_and_the_next_one_retries(hub, admin_conn, room):
    key = await task(admin_conn, "Retried")
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'growth')", ROOM, key)
    await backdate(admin_conn, key, 31)
    async with hub.db.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        assert [r["key"] for r in await conn.fetch("SELECT key FROM mycelium.sweep_expired_leases()")] == [key]
        await tr.rollback()  # the notice and its record go together
    assert await notices(admin_conn, ROOM, "expired") == []
    assert await sweep_once(verbs_of(hub)) == [(ROOM, key)]


async def test_the_environment_turns_the_gate_on_hub_wide(hub, admin_conn, room):
    assert await admin_conn.fetchval("SELECT mycelium.dependency_gate_on($1)", ROOM) is False
    hub.settings.board_dependency_gate = True
    await apply_board_settings(hub)
    assert await admin_conn.fetchval("SELECT mycelium.dependency_gate_on($1)", ROOM) is True
    assert CONTRACT["dependency_gate"]["setting"] == "board.dependency_gate"
