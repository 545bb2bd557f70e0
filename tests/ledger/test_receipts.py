"""Receipts: hash chains per agent and lane computed by the database, append-only, verifiable in SQL,
signed with the hub's Ed25519 key and verifiable offline from an export and the public key alone."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from mycelium.errors import Refusal
from mycelium.ledger import receipts as r
from mycelium.verbs import NOBODY, verbs_on
from mycelium.workers.receipts import register, sign_pending
from tests.ledger.conftest import claim


async def completed(conn, rid: str, agent: str = "agent-1", result: str = '{"ok": 1}') -> None:
    await claim(conn, rid, "w:1", agent=agent)
    await conn.execute("SELECT 1 FROM mycelium.complete($1, 'w:1', 1, $2::jsonb)", rid, result)


async def export(conn) -> list[dict]:
    return [dict(x) for x in await conn.fetch("SELECT * FROM mycelium.receipt_export ORDER BY id")]


async def lane_of(conn, request_id: str) -> int:
    return await conn.fetchval("SELECT mycelium.receipt_lane_of($1)", request_id)


async def one_lane(conn, n: int, prefix: str = "r", lane: int | None = None) -> list[str]:
    """``n`` request ids whose receipts share one lane (the first id's, or ``lane``)."""
    ids: list[str] = []
    for i in range(10_000):
        rid = f"{prefix}{i}"
        got = await lane_of(conn, rid)
        if lane is None:
            lane = got
        if got == lane:
            ids.append(rid)
            if len(ids) == n:
                return ids
    raise AssertionError(f"no {n} ids in lane {lane}")


async def test_each_terminal_transition_and_release_appends_a_chained_receipt(admin_conn):
    a, b = await one_lane(admin_conn, 2)
    await completed(admin_conn, a)
    await claim(admin_conn, b, "w:1")
    await admin_conn.execute("SELECT 1 FROM mycelium.advance_boundary($1, 'w:1', 1, 'maybe_crossed')", b)
    await admin_conn.execute("SELECT 1 FROM mycelium.fail($1, 'w:1', 1, 'timeout')", b)
    await admin_conn.execute(
        "SELECT 1 FROM mycelium.release($1, 'not_executed', 'ann', 'no charge at provider')", b
    )
    rows = await export(admin_conn)
    assert {x["lane"] for x in rows} == {await lane_of(admin_conn, a)}
    assert [(x["seq"], x["kind"], x["outcome"], x["verified"]) for x in rows] == [
        (1, "tool", "COMPLETED", None),
        (2, "tool", "UNKNOWN", None),
        (3, "release", "UNKNOWN", "not_executed"),
    ]
    assert rows[0]["prev_hash"] is None and rows[1]["prev_hash"] == rows[0]["hash"]
    assert rows[0]["outputs_hash"] and rows[2]["resolved_by"] == "ann"
    for x in rows:  # the offline renderer produces the database's bytes
        assert r.receipt_hash(x["prev_hash"], x) == x["hash"]
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain()") == []
    t = await admin_conn.fetchrow("SELECT receipt_ref FROM mycelium.transitions WHERE request_id = $1", b)
    assert t["receipt_ref"] == rows[2]["receipt_id"]


async def test_receipts_refuse_updates_and_deletes_even_for_their_owner(admin_conn):
    await completed(admin_conn, "a")
    for sql in (
        "UPDATE mycelium.receipts SET outcome = 'FAILED_BEFORE_EFFECT'",
        "DELETE FROM mycelium.receipts",
        "TRUNCATE mycelium.receipts CASCADE",
    ):
        for role in (None, "mycelium_admin"):
            async with admin_conn.transaction():
                if role:
                    await admin_conn.execute(f"SET LOCAL ROLE {role}")
                with pytest.raises(asyncpg.PostgresError) as info:
                    await admin_conn.execute(sql)
                assert json.loads(info.value.detail)["error"] == "append_only"
    assert len(await export(admin_conn)) == 1


async def test_a_chain_broken_by_a_superuser_is_reported_by_the_verifier(admin_conn):
    for rid in await one_lane(admin_conn, 5):
        await completed(admin_conn, rid)
    await completed(admin_conn, "other", agent="agent-2")
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL session_replication_role = replica")  # triggers off
        await admin_conn.execute(
            "UPDATE mycelium.receipts SET outcome = 'FAILED_BEFORE_EFFECT' WHERE seq = 2"
            " AND agent_id = 'agent-1'"
        )
        await admin_conn.execute("DELETE FROM mycelium.receipts WHERE seq = 4 AND agent_id = 'agent-1'")
        await admin_conn.execute("DELETE FROM mycelium.receipts WHERE seq = 5 AND agent_id = 'agent-1'")
    problems = [
        (p["agent_id"], p["seq"], p["problem"])
        for p in await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain()")
    ]
    assert ("agent-1", 2, "content does not match its hash (edited)") in problems
    assert any(s == 5 and "head is at seq 5" in text for _, s, text in problems)
    assert all(a == "agent-1" for a, _, _ in problems)
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain('agent-2')") == []
    await admin_conn.execute("SET session_replication_role = replica")
    await admin_conn.execute("DELETE FROM mycelium.receipts WHERE seq = 2 AND agent_id = 'agent-1'")
    await admin_conn.execute("SET session_replication_role = origin")
    gaps = [
        p["problem"] for p in await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain('agent-1')")
    ]
    assert any("gap: seq" in g for g in gaps)


async def test_concurrent_completions_of_one_agent_form_unbroken_chains_one_per_lane(db_dsn, admin_conn):
    async def worker(k: int) -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            for i in range(15):
                await completed(conn, f"w{k}-{i}")
        finally:
            await conn.close()

    await asyncio.gather(*(worker(k) for k in range(6)))
    rows = await export(admin_conn)
    lanes = {x["lane"] for x in rows}
    assert len(rows) == 90 and len(lanes) > 1
    for lane in lanes:
        seqs = [x["seq"] for x in rows if x["lane"] == lane]
        assert sorted(seqs) == list(range(1, len(seqs) + 1))
    for x in rows:
        assert x["lane"] == await lane_of(admin_conn, x["request_id"])
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain('agent-1')") == []


async def test_signed_receipts_verify_offline_with_the_public_key_alone(admin_conn, tmp_path):
    keys = r.KeyStore(tmp_path / "keys")
    key = keys.current()
    await register(verbs_on(admin_conn), key)
    for rid in await one_lane(admin_conn, 3):
        await completed(admin_conn, rid)
    assert await sign_pending(verbs_on(admin_conn), key) == 3
    assert await sign_pending(verbs_on(admin_conn), key) == 0
    exported = json.loads(json.dumps(await export(admin_conn), default=str))  # as written to JSONL
    ring = r.load_public_keys(key.public_pem())
    assert r.verify_records(exported, ring) == (3, [])

    tampered = [dict(x) for x in exported]
    tampered[1]["outcome"] = "FAILED_BEFORE_EFFECT"
    tampered[2]["signature"] = tampered[0]["signature"]
    problems = {(p["seq"], p["problem"].split(" (")[0]) for p in r.verify_records(tampered, ring)[1]}
    assert problems == {(2, "content does not match its hash"), (3, "bad signature")}
    assert r.verify_records(exported[:1] + exported[2:], ring)[1][0]["problem"].startswith("gap")
    assert r.verify_records(exported, {})[1][0]["problem"].startswith("signed with unknown key")

    await completed(admin_conn, "unsigned")
    last = json.loads(json.dumps((await export(admin_conn))[-1], default=str))
    assert [p["problem"] for p in r.verify_records([*exported, last], ring)[1]] == ["unsigned"]


async def test_a_rotated_key_signs_from_then_on_and_old_signatures_stay_valid(admin_conn, tmp_path):
    keys = r.KeyStore(tmp_path / "keys")
    old = keys.current()
    await register(verbs_on(admin_conn), old)
    await completed(admin_conn, "a")
    await sign_pending(verbs_on(admin_conn), old)
    new = keys.rotate()
    await verbs_on(admin_conn).call(NOBODY, "rotate_receipt_key", key_id=new.key_id, public_key=new.public_bytes)
    assert keys.current().key_id == new.key_id != old.key_id
    await completed(admin_conn, "b")
    with pytest.raises(Refusal, match="not registered or retired"):
        await sign_pending(verbs_on(admin_conn), old)
    await sign_pending(verbs_on(admin_conn), new)
    rows = json.loads(json.dumps(await export(admin_conn), default=str))
    assert [x["key_id"] for x in rows] == [old.key_id, new.key_id]
    ring = r.load_public_keys(
        json.dumps({"keys": [{"key_id": k.key_id, "public_key": k.public_bytes.hex()} for k in (old, new)]})
    )
    assert r.verify_records(rows, ring) == (2, [])
    retired = await admin_conn.fetchval(
        "SELECT retired_at FROM mycelium.receipt_keys WHERE key_id = $1", old.key_id
    )
    assert retired is not None


async def test_the_audit_views_answer_the_common_questions(admin_conn):
    await completed(admin_conn, "paid")
    await claim(admin_conn, "ambiguous", "w:1")
    await admin_conn.execute(
        "SELECT 1 FROM mycelium.advance_boundary('ambiguous', 'w:1', 1, 'maybe_crossed')"
    )
    await admin_conn.execute(
        "SELECT 1 FROM mycelium.record_external_operation('ambiguous', 'w:1', 1, 'pi_9')"
    )
    await admin_conn.execute("SELECT 1 FROM mycelium.fail('ambiguous', 'w:1', 1, 'timeout')")
    await claim(admin_conn, "settled", "w:1")
    await admin_conn.execute("SELECT 1 FROM mycelium.advance_boundary('settled', 'w:1', 1, 'maybe_crossed')")
    await admin_conn.execute("SELECT 1 FROM mycelium.fail('settled', 'w:1', 1, 'timeout')")
    await admin_conn.execute(
        "SELECT 1 FROM mycelium.apply_reconcile_result('settled', 1, 'COMPLETED', '1', 'stripe')"
    )

    per_day = await admin_conn.fetch("SELECT * FROM mycelium.side_effects_per_tool_per_day")
    assert [(r["tool"], r["completed"], r["ambiguous"]) for r in per_day] == [("pay", 2, 2)]
    waiting = await admin_conn.fetch("SELECT * FROM mycelium.hard_blocks_awaiting_human")
    assert [(r["request_id"], r["external_operation_ref"]) for r in waiting] == [("ambiguous", "pi_9")]
    reconciled = await admin_conn.fetch("SELECT * FROM mycelium.reconciled_transitions")
    assert [(r["request_id"], r["reconcile_status"], r["terminal_outcome"]) for r in reconciled] == [
        ("settled", "COMPLETED", "COMPLETED")
    ]
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL ROLE mycelium_auditor")
        assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.receipts") == 4
        assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain()") == []


async def test_receipts_signed_out_of_order_leave_exactly_the_unsigned_ones_waiting(admin_conn, tmp_path):
    key = r.KeyStore(tmp_path / "keys").current()
    await register(verbs_on(admin_conn), key)
    a_ids = await one_lane(admin_conn, 5, "a")
    for rid in a_ids[:4]:
        await completed(admin_conn, rid)
    await completed(admin_conn, "b0", agent="agent-2")

    async def waiting() -> list[int]:
        return [x["id"] for x in await admin_conn.fetch("SELECT * FROM mycelium.unsigned_receipt_batch(100)")]

    ids = await waiting()
    assert len(ids) == 5
    # sign the second and the fourth of agent-1 only: the first and third still wait, and so does agent-2's
    chosen = [ids[1], ids[3]]
    hashes = {x["id"]: x["hash"] for x in await admin_conn.fetch("SELECT id, hash FROM mycelium.receipts")}
    await admin_conn.fetchval(
        "SELECT mycelium.sign_receipts($1, $2, $3)",
        key.key_id,
        chosen,
        [key.sign(bytes(hashes[i]).hex()) for i in chosen],
    )
    assert await waiting() == [ids[0], ids[2], ids[4]]
    assert await sign_pending(verbs_on(admin_conn), key) == 3
    assert await waiting() == []
    marks = {
        (x["agent_id"], x["lane"]): x["seq"]
        for x in await admin_conn.fetch("SELECT * FROM mycelium.receipts_signed_through")
    }
    lane_a, lane_b = await lane_of(admin_conn, a_ids[0]), await lane_of(admin_conn, "b0")
    assert marks == {("agent-1", lane_a): 4, ("agent-2", lane_b): 1}
    await completed(admin_conn, a_ids[4])
    assert len(await waiting()) == 1


async def test_the_offline_renderer_matches_the_database_on_awkward_fields(admin_conn):
    # written directly (the chain is computed by the database whoever inserts): every nullable field
    # empty, non-ASCII and multi-line texts, an empty text, a five-digit year, a large fence
    for error, verified, finished in (
        (None, None, None),
        ("boom\nsecond line: ü ✓", "completed", "2026-11-30 12:00:00.000001+00"),
    ):
        await admin_conn.execute(
            """INSERT INTO mycelium.receipts (receipt_id, agent_id, seq, kind, action, request_id,
                 transition_key, side_effect_class, policy_version, outcome, boundary, fence, error,
                 verified, resolved_by, resolution_reason, started_at, finished_at, hash)
               VALUES ('-', 'agent-ü', 1, 'release', 'pay €', 'req', 'k', 'irreversible', '', 'UNKNOWN',
                 'maybe_crossed', 12345678901, $1, $2, $3, $3, '12345-01-02 03:04:05+00', $4::text::timestamptz,
                 '\\x')""",
            error,
            verified,
            None if verified is None else "ann",
            finished,
        )
    rows = await export(admin_conn)
    assert [x["seq"] for x in rows] == [1, 2] and rows[0]["started_at"].startswith("12345-")
    for x in rows:
        assert r.receipt_hash(x["prev_hash"], x) == x["hash"]
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain()") == []


async def test_appends_of_one_agent_on_different_lanes_do_not_wait_for_each_other(db_dsn, admin_conn):
    first, same = await one_lane(admin_conn, 2, "x")
    (other,) = await one_lane(admin_conn, 1, "y", lane=(await lane_of(admin_conn, first) + 1) % 32)
    for rid in (first, same, other):
        await claim(admin_conn, rid, "w:1")
    holder = await asyncpg.connect(db_dsn)
    try:
        async with holder.transaction():  # an append that has not committed holds its lane's chain
            await holder.execute("SELECT 1 FROM mycelium.complete($1, 'w:1', 1, '{}')", first)
            # the same agent on another lane appends and commits meanwhile (a wait would hit the timeout)
            await admin_conn.execute("SET lock_timeout = '5s'")
            await admin_conn.execute("SELECT 1 FROM mycelium.complete($1, 'w:1', 1, '{}')", other)
            # the same lane waits for the holder's commit
            await admin_conn.execute("SET lock_timeout = '50ms'")
            with pytest.raises(asyncpg.LockNotAvailableError):
                await admin_conn.execute("SELECT 1 FROM mycelium.complete($1, 'w:1', 1, '{}')", same)
            await admin_conn.execute("RESET lock_timeout")
        await admin_conn.execute("SELECT 1 FROM mycelium.complete($1, 'w:1', 1, '{}')", same)
    finally:
        await holder.close()
    rows = {x["request_id"]: x for x in await export(admin_conn)}
    assert rows[other]["seq"] == 1 and rows[other]["prev_hash"] is None
    # same-lane appends chain in commit order: the one that waited follows the holder's
    assert (rows[first]["seq"], rows[same]["seq"]) == (1, 2)
    assert rows[same]["prev_hash"] == rows[first]["hash"] and rows[first]["lane"] == rows[same]["lane"]
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain('agent-1')") == []


async def test_a_receipt_moved_to_another_lane_is_reported(admin_conn):
    a, b = await one_lane(admin_conn, 2)
    for rid in (a, b):
        await completed(admin_conn, rid)
    lane = await lane_of(admin_conn, a)
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL session_replication_role = replica")  # triggers off
        await admin_conn.execute(
            "UPDATE mycelium.receipts SET lane = $2 WHERE request_id = $1", b, (lane + 1) % 32
        )
    problems = {
        (p["lane"], p["seq"], p["problem"].split(" (")[0])
        for p in await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain()")
    }
    assert ((lane + 1) % 32, 2, "content does not match its hash") in problems
    assert ((lane + 1) % 32, 2, "chain starts at seq 2") in problems
    assert (lane, 2, "head is at seq 2 but the last receipt is 1") in problems
    exported = json.loads(json.dumps(await export(admin_conn), default=str))
    offline = {p["problem"].split(" (")[0] for p in r.verify_records(exported, {})[1]}
    assert "content does not match its hash" in offline


async def test_a_release_joins_its_transitions_lane_even_after_the_lane_count_changed(admin_conn):
    await claim(admin_conn, "b", "w:1")
    await admin_conn.execute("SELECT 1 FROM mycelium.advance_boundary('b', 'w:1', 1, 'maybe_crossed')")
    await admin_conn.execute("SELECT 1 FROM mycelium.fail('b', 'w:1', 1, 'timeout')")
    first = await lane_of(admin_conn, "b")
    # the lane count changes (every request id now hashes to lane 40)
    await admin_conn.execute(
        "CREATE OR REPLACE FUNCTION mycelium.receipt_lane_of(p_request_id text) RETURNS smallint"
        " LANGUAGE sql IMMUTABLE AS $$ SELECT 40::smallint $$"
    )
    await admin_conn.execute("SELECT 1 FROM mycelium.release('b', 'not_executed', 'ann', 'no charge')")
    await completed(admin_conn, "fresh")
    rows = {(x["request_id"], x["kind"]): x for x in await export(admin_conn)}
    assert rows[("b", "release")]["lane"] == rows[("b", "tool")]["lane"] == first != 40
    assert rows[("b", "release")]["prev_hash"] == rows[("b", "tool")]["hash"]
    assert rows[("fresh", "tool")]["lane"] == 40 and rows[("fresh", "tool")]["seq"] == 1
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain()") == []


async def test_a_completion_written_by_plain_sql_gets_its_receipt_and_the_chain_holds(admin_conn):
    """The receipt is appended by the row's guard, not by the verb: a completion that skips the verb
    (its transaction marked as the verb's by hand) is chained like any other."""
    await completed(admin_conn, "by-verb")
    await claim(admin_conn, "by-hand", "w:1")
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT set_config('mycelium.transition_verb', 'complete', true)")
        await admin_conn.execute(
            "UPDATE mycelium.transitions SET terminal_outcome = 'COMPLETED', side_effect_boundary = 'crossed',"
            " lease_until = NULL, finished_at = now(), result = '{\"hand\": 1}' WHERE request_id = 'by-hand'"
        )
    rows = {x["request_id"]: x for x in await export(admin_conn)}
    assert set(rows) == {"by-verb", "by-hand"}
    ref = await admin_conn.fetchval("SELECT receipt_ref FROM mycelium.transitions WHERE request_id = 'by-hand'")
    assert ref == rows["by-hand"]["receipt_id"]
    assert rows["by-hand"]["outcome"] == "COMPLETED"
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_receipt_chain()") == []
    count, problems = r.verify_records(await export(admin_conn), {})
    assert count == 2 and {p["problem"] for p in problems} == {"unsigned"}  # no signer in this test


async def test_an_insert_outside_the_claim_is_still_refused_or_normalised(admin_conn):
    columns = (
        "INSERT INTO mycelium.transitions (request_id, transition_key, tool, agent_id, policy_version,"
        " side_effect_class, spendability, retry_permission, capability, owner, fence, receipt_ref)"
        " VALUES ('x', 'k', 't', 'a', 'v', 'read', 'multi_use', 'safe_retry', 'idempotent', 'w:1', 7, 'rcpt-1')"
        " RETURNING fence, receipt_ref"
    )
    with pytest.raises(asyncpg.PostgresError, match="direct INSERT is refused"):
        await admin_conn.execute(columns)
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT set_config('mycelium.transition_verb', 'claim_transition', true)")
        row = await admin_conn.fetchrow(columns)
    assert (row["fence"], row["receipt_ref"]) == (1, None)
