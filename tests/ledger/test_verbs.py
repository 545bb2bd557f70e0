"""The SQL verbs, as a person in psql uses them: claims decided under the row lock, fenced mutators,
and the rules the table keeps even against direct SQL."""

from __future__ import annotations

import asyncpg
import pytest

from tests.ledger.conftest import claim, expire, outcome

MUTATORS = {
    "complete": "SELECT 1 FROM mycelium.complete($1, $2, $3, '{\"ok\": true}')",
    "fail_before": "SELECT 1 FROM mycelium.fail($1, $2, $3, 'boom', false)",
    "fail_after": "SELECT 1 FROM mycelium.fail($1, $2, $3, 'boom', true)",
    "mark_blocked": "SELECT 1 FROM mycelium.mark_blocked($1, $2, $3, 'stop')",
    "mark_unknown": "SELECT 1 FROM mycelium.mark_unknown($1, $2, $3, 'lost')",
}


async def refused(conn, sql: str, *args) -> dict:
    with pytest.raises(asyncpg.PostgresError) as info:
        await conn.execute(sql, *args)
    import json

    return {"sqlstate": info.value.sqlstate, **json.loads(info.value.detail or "{}")}


async def test_a_first_claim_runs_a_duplicate_polls_and_completion_returns_the_stored_result(admin_conn):
    first = await claim(admin_conn, "r1", "w:1")
    assert (first["gate"], first["action"], first["fence"]) == ("ALLOW", "run", 1)
    dup = await claim(admin_conn, "r1", "w:2")
    assert (dup["gate"], dup["action"]) == ("POLL", "poll")
    await admin_conn.execute(MUTATORS["complete"], "r1", "w:1", 1)
    again = await claim(admin_conn, "r1", "w:2")
    assert (again["gate"], again["action"], again["result"]) == ("RETURN", "return", {"ok": True})
    assert again["fence"] == 1 and again["terminal_outcome"] == "COMPLETED"


@pytest.mark.parametrize("verb", sorted(MUTATORS))
async def test_a_mutator_with_a_stale_fence_or_another_owner_loses(admin_conn, verb):
    await claim(admin_conn, "r", "w:1", cls="idempotent_mutate")
    await admin_conn.execute(MUTATORS["fail_before"], "r", "w:1", 1)
    taken = await claim(admin_conn, "r", "w:2", cls="idempotent_mutate")
    assert (taken["action"], taken["fence"]) == ("run", 2)
    assert (await refused(admin_conn, MUTATORS[verb], "r", "w:1", 1))["error"] == "fence_lost"
    assert (await refused(admin_conn, MUTATORS[verb], "r", "w:1", 2))["error"] == "fence_lost"
    detail = await refused(admin_conn, MUTATORS[verb], "r", "w:2", None)
    assert detail["error"] == "fence_required" and detail["sqlstate"] == "MY422"
    await admin_conn.execute(MUTATORS[verb], "r", "w:2", 2)


@pytest.mark.parametrize("verb", sorted(MUTATORS))
@pytest.mark.parametrize("first", sorted(MUTATORS))
async def test_only_an_in_flight_row_accepts_an_outcome(admin_conn, first, verb):
    await claim(admin_conn, "r", "w:1")
    await admin_conn.execute(MUTATORS[first], "r", "w:1", 1)
    before = await outcome(admin_conn, "r")
    detail = await refused(admin_conn, MUTATORS[verb], "r", "w:1", 1)
    assert detail["error"] == "not_in_flight" and detail["sqlstate"] == "MY409"
    assert (await outcome(admin_conn, "r"))["terminal_outcome"] == before["terminal_outcome"]


async def test_the_boundary_only_moves_forward(admin_conn):
    await claim(admin_conn, "r", "w:1")
    seen = []
    for b in ("maybe_crossed", "not_crossed", "crossed", "maybe_crossed"):
        row = await admin_conn.fetchrow("SELECT * FROM mycelium.advance_boundary('r', 'w:1', 1, $1)", b)
        seen.append(row["side_effect_boundary"])
    assert seen == ["maybe_crossed", "maybe_crossed", "crossed", "crossed"]


async def test_a_failure_is_classified_by_the_stored_boundary(admin_conn):
    for rid, boundary, expected in (
        ("a", None, "FAILED_BEFORE_EFFECT"),
        ("b", "maybe_crossed", "UNKNOWN"),
        ("c", "crossed", "FAILED_AFTER_EFFECT"),
    ):
        await claim(admin_conn, rid, "w:1")
        if boundary:
            await admin_conn.execute(
                "SELECT 1 FROM mycelium.advance_boundary($1, 'w:1', 1, $2)", rid, boundary
            )
        row = await admin_conn.fetchrow("SELECT * FROM mycelium.fail($1, 'w:1', 1, 'x')", rid)
        assert row["terminal_outcome"] == expected
    await claim(admin_conn, "d", "w:1")
    await admin_conn.execute("SELECT 1 FROM mycelium.advance_boundary('d', 'w:1', 1, 'maybe_crossed')")
    detail = await refused(admin_conn, MUTATORS["fail_before"], "d", "w:1", 1)
    assert detail["error"] == "boundary_crossed"


async def test_direct_writes_from_psql_are_refused_even_for_the_owner(admin_conn):
    await claim(admin_conn, "r", "w:1")
    await admin_conn.execute(MUTATORS["complete"], "r", "w:1", 1)
    for sql in (
        "UPDATE mycelium.transitions SET terminal_outcome = 'IN_FLIGHT'",
        "UPDATE mycelium.transitions SET result = '{\"forged\": 1}'",
        "DELETE FROM mycelium.transitions",
        "INSERT INTO mycelium.transitions (request_id, transition_key, tool, agent_id, policy_version,"
        " side_effect_class, spendability, retry_permission, capability, owner)"
        " VALUES ('x', 'k', 't', 'a', 'v', 'read', 'multi_use', 'safe_retry', 'idempotent', 'o')",
    ):
        assert (await refused(admin_conn, sql))["error"] == "verbs_only"
    assert (await refused(admin_conn, "TRUNCATE mycelium.transitions"))["error"] == "append_only"
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL ROLE mycelium_admin")
        assert (await refused(admin_conn, "UPDATE mycelium.transitions SET fence = 9"))[
            "error"
        ] == "verbs_only"
    row = await outcome(admin_conn, "r")
    assert (row["terminal_outcome"], row["result"], row["fence"]) == ("COMPLETED", {"ok": True}, 1)


async def test_even_a_verb_cannot_reopen_a_completed_row_or_lower_a_fence(admin_conn):
    await claim(admin_conn, "r", "w:1")
    await admin_conn.execute(MUTATORS["complete"], "r", "w:1", 1)
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT set_config('mycelium.transition_verb', 'claim_transition', true)")
        detail = await refused(
            admin_conn,
            "UPDATE mycelium.transitions SET terminal_outcome = 'IN_FLIGHT', finished_at = NULL, fence = 2",
        )
        assert detail["error"] == "completed_is_final"
    await claim(admin_conn, "s", "w:1", cls="idempotent_mutate")
    await admin_conn.execute(MUTATORS["fail_before"], "s", "w:1", 1)
    await claim(admin_conn, "s", "w:2", cls="idempotent_mutate")
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT set_config('mycelium.transition_verb', 'claim_transition', true)")
        detail = await refused(admin_conn, "UPDATE mycelium.transitions SET fence = 1 WHERE request_id = 's'")
        assert detail["error"] == "fence_regressed"


@pytest.mark.parametrize(
    ("write", "rule"),
    [
        ("UPDATE mycelium.transitions SET finished_at = now() WHERE request_id = 'r'", "in_flight_is_unfinished"),
        (
            "UPDATE mycelium.transitions SET terminal_outcome = 'FAILED_BEFORE_EFFECT', finished_at = now()"
            " WHERE request_id = 'r'",
            "terminal_holds_no_lease",
        ),
        (
            "UPDATE mycelium.transitions SET terminal_outcome = 'COMPLETED', finished_at = now(),"
            " lease_until = NULL WHERE request_id = 'r'",
            "completed_crossed",
        ),
        (
            "UPDATE mycelium.transitions SET terminal_outcome = 'FAILED_BEFORE_EFFECT', finished_at = now(),"
            " lease_until = NULL, side_effect_boundary = 'maybe_crossed' WHERE request_id = 'r'",
            "failed_before_not_crossed",
        ),
        (
            "UPDATE mycelium.transitions SET operator_resolution = 'not_executed', resolved_by = 'ops'"
            " WHERE request_id = 'r'",
            "release_is_recorded",
        ),
        (
            "INSERT INTO mycelium.transitions (request_id, transition_key, tool, agent_id, policy_version,"
            " side_effect_class, spendability, retry_permission, capability, owner, terminal_outcome)"
            " VALUES ('x', 'k', 't', 'a', 'v', 'read', 'multi_use', 'safe_retry', 'idempotent', 'o', 'COMPLETED')",
            "in_flight_is_unfinished",
        ),
    ],
)
async def test_a_write_past_the_verb_check_still_keeps_the_row_consistent(admin_conn, write, rule):
    """The consistency rules hold for any write a verb could make, INSERT or UPDATE: a check violation
    naming the rule, and nothing written."""
    await claim(admin_conn, "r", "w:1")
    with pytest.raises(asyncpg.CheckViolationError) as info:
        async with admin_conn.transaction():
            await admin_conn.execute("SELECT set_config('mycelium.transition_verb', 'release', true)")
            await admin_conn.execute(write)
    assert rule in str(info.value)
    assert info.value.constraint_name == "transition_consistent"
    row = await outcome(admin_conn, "r")
    assert (row["terminal_outcome"], row["finished_at"], row["operator_resolution"]) == ("IN_FLIGHT", None, None)
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.transitions") == 1


async def test_an_expired_strict_lease_is_parked_blocked_and_hard_blocks(admin_conn):
    await claim(admin_conn, "r", "w:1", lease_ttl=0.001)
    await expire(admin_conn, "r")
    row = await claim(admin_conn, "r", "w:2")
    assert (row["gate"], row["action"], row["terminal_outcome"]) == ("HARD_BLOCK", "hard_block", "BLOCKED")
    assert "not_crossed" in row["error"] and row["fence"] == 1
    late = await refused(admin_conn, MUTATORS["complete"], "r", "w:1", 1)
    assert late["error"] == "not_in_flight"
    entering = await refused(
        admin_conn, "SELECT 1 FROM mycelium.advance_boundary('r', 'w:1', 1, 'maybe_crossed')"
    )
    assert entering["error"] == "not_in_flight"


async def test_an_expired_lease_of_a_retry_safe_tool_is_reclaimed_with_a_new_fence(admin_conn):
    await claim(admin_conn, "r", "w:1", cls="idempotent_mutate", lease_ttl=0.001)
    await expire(admin_conn, "r")
    row = await claim(admin_conn, "r", "w:2", cls="idempotent_mutate")
    assert (row["gate"], row["action"], row["fence"], row["owner"]) == ("ALLOW", "run", 2, "w:2")
    assert (await refused(admin_conn, MUTATORS["complete"], "r", "w:1", 1))["error"] == "fence_lost"


async def test_entering_the_boundary_needs_a_live_lease(admin_conn):
    await claim(admin_conn, "r", "w:1", lease_ttl=0.001)
    await expire(admin_conn, "r")
    detail = await refused(
        admin_conn, "SELECT 1 FROM mycelium.advance_boundary('r', 'w:1', 1, 'maybe_crossed')"
    )
    assert detail["error"] == "lease_expired"


async def test_renewal_is_refused_once_the_lease_expired_or_the_row_is_terminal(admin_conn):
    await claim(admin_conn, "r", "w:1", lease_ttl=60)
    row = await admin_conn.fetchrow("SELECT * FROM mycelium.renew_lease('r', 'w:1', 1, 120)")
    assert row["lease_until"] > row["last_heartbeat_at"]
    await admin_conn.execute(MUTATORS["complete"], "r", "w:1", 1)
    assert (await refused(admin_conn, "SELECT 1 FROM mycelium.renew_lease('r', 'w:1', 1, 60)"))[
        "error"
    ] == "not_in_flight"
    await claim(admin_conn, "s", "w:1", lease_ttl=0.001)
    await expire(admin_conn, "s")
    assert (await refused(admin_conn, "SELECT 1 FROM mycelium.renew_lease('s', 'w:1', 1, 60)"))[
        "error"
    ] == "lease_expired"


async def test_an_explicit_request_id_reused_for_another_call_is_refused(admin_conn):
    await claim(admin_conn, "req-1", "w:1", key="key-a")
    detail = await refused(
        admin_conn, "SELECT 1 FROM mycelium.claim_transition('req-1', 'key-b', 'pay', 'w:1', 'payment')"
    )
    assert detail["error"] == "identity_conflict"


async def test_a_missing_idempotency_key_is_repaired_and_gated_again(admin_conn):
    await claim(admin_conn, "r", "w:1")
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL session_replication_role = replica")  # plant a damaged record
        await admin_conn.execute(
            "UPDATE mycelium.transitions SET idempotency_key = NULL WHERE request_id = 'r'"
        )
    row = await claim(admin_conn, "r", "w:2")
    assert (row["repaired"], row["gate"], row["action"], row["idempotency_key"]) == (
        True,
        "POLL",
        "poll",
        "r",
    )


async def test_bad_input_is_refused_with_a_named_problem(admin_conn):
    cases = {
        "SELECT 1 FROM mycelium.claim_transition('r', 'k', 'pay', 'w', 'teleport')": "invalid_side_effect_class",
        "SELECT 1 FROM mycelium.claim_transition(' ', 'k', 'pay', 'w', 'read')": "missing_request_id",
        "SELECT 1 FROM mycelium.claim_transition('r', 'k', 'pay', '', 'read')": "missing_owner",
        "SELECT 1 FROM mycelium.release('nope', 'completed', 'ann', 'checked')": "transition_not_found",
        "SELECT 1 FROM mycelium.release('nope', 'maybe', 'ann', 'checked')": "invalid_release",
        "SELECT 1 FROM mycelium.apply_reconcile_result('nope', 1, 'PERHAPS')": "invalid_reconcile_status",
    }
    for sql, code in cases.items():
        assert (await refused(admin_conn, sql))["error"] == code, sql
