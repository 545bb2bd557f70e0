"""Resolution: operator release, reconciler results, provider keys, worker death (SQL level)."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from tests.ledger.conftest import claim, expire, outcome


async def refused(conn, sql: str, *args) -> str:
    with pytest.raises(asyncpg.PostgresError) as info:
        await conn.execute(sql, *args)
    return json.loads(info.value.detail)["error"]


async def unknown_row(conn, rid: str = "r") -> None:
    await claim(conn, rid, "w:1")
    await conn.execute("SELECT 1 FROM mycelium.advance_boundary($1, 'w:1', 1, 'maybe_crossed')", rid)
    await conn.execute("SELECT 1 FROM mycelium.fail($1, 'w:1', 1, 'crashed inside the call')", rid)


async def test_a_release_not_executed_lets_the_next_claim_run_once(admin_conn):
    await unknown_row(admin_conn)
    assert (await claim(admin_conn, "r", "w:2"))["action"] == "hard_block"
    row = await admin_conn.fetchrow(
        "SELECT * FROM mycelium.release('r', 'not_executed', 'ann', 'provider shows no charge')"
    )
    assert (row["operator_resolution"], row["released_from_outcome"]) == ("not_executed", "UNKNOWN")
    first = await claim(admin_conn, "r", "w:2")
    assert (first["gate"], first["action"], first["fence"]) == ("HARD_BLOCK", "run", 2)
    assert first["operator_resolution"] is None and first["resolved_by"] == "ann"
    assert (await claim(admin_conn, "r", "w:3"))["action"] == "poll"
    await admin_conn.execute("SELECT 1 FROM mycelium.complete('r', 'w:2', 2, '\"done\"')")
    assert (await claim(admin_conn, "r", "w:3"))["action"] == "return"


async def test_release_preconditions(admin_conn):
    await claim(admin_conn, "held", "w:1", lease_ttl=60)
    assert (
        await refused(admin_conn, "SELECT 1 FROM mycelium.release('held', 'not_executed', 'ann', 'x')")
        == "release_refused"
    )
    await claim(admin_conn, "gone", "w:1", lease_ttl=0.001)
    await expire(admin_conn, "gone")
    row = await admin_conn.fetchrow(
        "SELECT * FROM mycelium.release('gone', 'not_executed', 'ann', 'worker died')"
    )
    assert (row["released_from_outcome"], row["terminal_outcome"]) == ("EXPIRED", "BLOCKED")
    assert (
        await refused(admin_conn, "SELECT 1 FROM mycelium.release('gone', 'completed', 'ann', 'x')")
        == "already_resolved"
    )
    await claim(admin_conn, "done", "w:1")
    await admin_conn.execute("SELECT 1 FROM mycelium.complete('done', 'w:1', 1, 'null')")
    assert (
        await refused(admin_conn, "SELECT 1 FROM mycelium.release('done', 'completed', 'ann', 'x')")
        == "release_refused"
    )
    assert (
        await refused(admin_conn, "SELECT 1 FROM mycelium.release('gone', 'completed', '', 'x')")
        == "release_unattributed"
    )


async def test_a_release_completed_settles_the_row_with_the_operator_s_result(admin_conn):
    await unknown_row(admin_conn)
    row = await admin_conn.fetchrow(
        "SELECT * FROM mycelium.release('r', 'completed', 'ann', 'charge ch_1 exists', '{\"charge\": \"ch_1\"}')"
    )
    assert (row["terminal_outcome"], row["result"]) == ("COMPLETED", {"charge": "ch_1"})
    again = await claim(admin_conn, "r", "w:2")
    assert (again["action"], again["result"]) == ("return", {"charge": "ch_1"})


async def test_a_reconciler_completed_answer_settles_and_a_not_executed_answer_runs_once(admin_conn):
    await unknown_row(admin_conn, "a")
    await admin_conn.execute("SELECT 1 FROM mycelium.record_external_operation('a', 'w:1', 1, 'pi_1')")
    asked = await claim(admin_conn, "a", "w:2", has_reconciler=True)
    assert (asked["gate"], asked["action"]) == ("HARD_BLOCK", "reconcile")
    row = await admin_conn.fetchrow(
        "SELECT * FROM mycelium.apply_reconcile_result('a', 1, 'COMPLETED', '{\"pi\": 1}', 'stripe')"
    )
    assert (row["terminal_outcome"], row["reconcile_status"]) == ("COMPLETED", "COMPLETED")

    await unknown_row(admin_conn, "b")
    await admin_conn.execute("SELECT 1 FROM mycelium.record_external_operation('b', 'w:1', 1, 'pi_2')")
    await admin_conn.execute("SELECT 1 FROM mycelium.apply_reconcile_result('b', 1, 'NOT_EXECUTED')")
    run = await claim(admin_conn, "b", "w:2", has_reconciler=True)
    assert (run["action"], run["fence"], run["reconcile_status"]) == ("run", 2, None)
    assert (
        await refused(admin_conn, "SELECT 1 FROM mycelium.apply_reconcile_result('b', 1, 'NOT_EXECUTED')")
        == "transition_moved"
    )


async def test_a_reconciler_unknown_answer_hard_blocks(admin_conn):
    await unknown_row(admin_conn)
    await admin_conn.execute("SELECT 1 FROM mycelium.record_external_operation('r', 'w:1', 1, 'pi_1')")
    await admin_conn.execute("SELECT 1 FROM mycelium.apply_reconcile_result('r', 1, 'UNKNOWN')")
    row = await claim(admin_conn, "r", "w:2", has_reconciler=True, reconciled=True)
    assert (row["action"], row["terminal_outcome"], row["reconcile_status"]) == (
        "hard_block",
        "UNKNOWN",
        "UNKNOWN",
    )


async def test_two_reconcilers_answering_not_executed_at_once_run_the_body_once(db_dsn, admin_conn):
    await unknown_row(admin_conn)
    await admin_conn.execute("SELECT 1 FROM mycelium.record_external_operation('r', 'w:1', 1, 'pi_1')")
    conns = [await asyncpg.connect(db_dsn) for _ in range(2)]
    try:

        async def worker(conn, owner):
            await conn.execute("SELECT 1 FROM mycelium.apply_reconcile_result('r', 1, 'NOT_EXECUTED')")
            return (await claim(conn, "r", owner, has_reconciler=True))["action"]

        actions = await asyncio.gather(
            worker(conns[0], "w:2"), worker(conns[1], "w:3"), return_exceptions=True
        )
    finally:
        for c in conns:
            await c.close()
    ran = [a for a in actions if a == "run"]
    assert len(ran) == 1, actions
    assert all(a == "poll" or isinstance(a, asyncpg.PostgresError) for a in actions if a != "run")
    assert (await outcome(admin_conn, "r"))["fence"] == 2


@pytest.mark.parametrize(
    ("stored", "incoming", "action"),
    [
        ("k1", "k1", "run"),
        ("k1", "k2", "hard_block"),
        ("k1", None, "hard_block"),
        (None, "k1", "hard_block"),
    ],
)
async def test_a_keyed_retry_after_a_clean_failure_needs_the_same_provider_key(
    admin_conn, stored, incoming, action
):
    await claim(admin_conn, "r", "w:1", cls="keyed_mutate", key_param="idempotency_key", incoming_key=stored)
    await admin_conn.execute("SELECT 1 FROM mycelium.fail('r', 'w:1', 1, 'declined')")
    row = await claim(
        admin_conn, "r", "w:2", cls="keyed_mutate", key_param="idempotency_key", incoming_key=incoming
    )
    assert row["action"] == action


async def test_without_a_declared_key_parameter_a_keyed_retry_is_trusted(admin_conn):
    await claim(admin_conn, "r", "w:1", cls="keyed_mutate")
    await admin_conn.execute("SELECT 1 FROM mycelium.fail('r', 'w:1', 1, 'declined')")
    assert (await claim(admin_conn, "r", "w:2", cls="keyed_mutate", incoming_key="other"))["action"] == "run"


async def test_a_same_key_retry_of_an_unknown_call_is_allowed_only_within_the_key_ttl(admin_conn):
    keyed = {"cls": "keyed_mutate", "key_param": "idempotency_key", "incoming_key": "k1"}
    await claim(admin_conn, "r", "w:1", key_ttl=300, **keyed)
    await admin_conn.execute("SELECT 1 FROM mycelium.advance_boundary('r', 'w:1', 1, 'maybe_crossed')")
    await admin_conn.execute("SELECT 1 FROM mycelium.fail('r', 'w:1', 1, 'timeout')")
    within = await claim(admin_conn, "r", "w:2", key_ttl=300, **keyed)
    assert (within["gate"], within["action"], within["fence"]) == ("ALLOW", "run", 2)
    first_attempt = within["provider_key_first_attempt_at"]
    await admin_conn.execute("SELECT 1 FROM mycelium.advance_boundary('r', 'w:2', 2, 'maybe_crossed')")
    await admin_conn.execute("SELECT 1 FROM mycelium.fail('r', 'w:2', 2, 'timeout')")
    await asyncio.sleep(0.05)
    past = await claim(admin_conn, "r", "w:3", key_ttl=0.01, **keyed)
    assert (past["gate"], past["action"]) == ("HARD_BLOCK", "hard_block")
    assert past["provider_key_first_attempt_at"] == first_attempt  # carried across the reset
    blind = await claim(admin_conn, "r", "w:3", key_ttl=300, capability="blind", **keyed)
    assert blind["action"] == "hard_block"


async def test_a_read_that_ended_ambiguous_is_retried_unless_the_tool_defers(admin_conn):
    await claim(admin_conn, "r", "w:1", cls="read")
    await admin_conn.execute("SELECT 1 FROM mycelium.mark_unknown('r', 'w:1', 1, 'timeout')")
    deferred = await claim(admin_conn, "r", "w:2", cls="read", defer_read_unknown=True)
    assert (deferred["gate"], deferred["action"]) == ("SOFT_BLOCK", "soft_block")
    retried = await claim(admin_conn, "r", "w:2", cls="read")
    assert (retried["gate"], retried["action"], retried["fence"]) == ("SOFT_BLOCK", "run", 2)


async def test_a_worker_death_assertion_is_refused_while_its_heartbeat_is_recent(admin_conn):
    await claim(admin_conn, "r", "host:42", lease_ttl=60)
    assert (
        await refused(admin_conn, "SELECT 1 FROM mycelium.mark_worker_dead('host:42', 'ann', 'pod gone')")
        == "worker_alive"
    )
    rows = await admin_conn.fetch(
        "SELECT * FROM mycelium.mark_worker_dead('host:42', 'ann', 'pod gone', true)"
    )
    assert [r["resolution_reason"] for r in rows] == ["pod gone (heartbeat overridden)"]
