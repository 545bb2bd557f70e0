"""The audit trail: every privileged action appends a hash-chained entry naming who did it (from
the hub or from psql alike), the trail cannot be changed, and a changed entry is found in SQL."""

from __future__ import annotations

import asyncpg
import pytest

from tests.auth.conftest import Provider, bearer
from tests.ledger.conftest import claim


async def _trail(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT action, actor, principal, principal_role, room, target, detail "
                            "FROM mycelium.audit_log ORDER BY id")


async def test_privileged_actions_are_recorded_with_their_principal_and_chained(gated, provider: Provider,
                                                                                 admin_conn):
    op = bearer(provider.token("olga", role="operator"))
    assert (await gated.post("/api/rooms", json={"name": "atlas"}, headers=op)).status_code == 201
    r = await gated.put("/api/config/board.dependency_gate", json={"value": True, "handle": "olga"}, headers=op)
    assert r.status_code == 200, r.text
    assert (await gated.post("/api/receipts/keys/rotate", headers=op)).status_code == 201
    assert (await gated.delete("/api/rooms/atlas", headers=op)).status_code in (200, 204)
    await admin_conn.execute("SELECT * FROM mycelium.write_setting('presence.ttl_seconds', '120', '', 'dba')")

    trail = await _trail(admin_conn)
    actions = [e["action"] for e in trail]
    # the gated hub closed the gate at start, then the operator's actions, then psql's
    assert actions[0] == "settings.write" and trail[0]["target"] == "auth.gate"
    assert actions[1:] == ["settings.write", "receipts.key_registered", "room.delete", "settings.write"], actions
    dependency, key, deleted, psql = trail[1:]
    assert (dependency["target"], dependency["actor"], dependency["principal"], dependency["principal_role"]) \
        == ("board.dependency_gate", "olga", "olga", "operator")
    assert (deleted["room"], deleted["principal"]) == ("atlas", "olga")
    assert key["principal"] == "olga"
    assert (psql["target"], psql["principal"]) == ("presence.ttl_seconds", None)
    assert await admin_conn.fetch("SELECT * FROM mycelium.verify_audit_chain()") == []


async def test_the_trail_is_append_only_and_a_forged_entry_is_found(admin_conn):
    await admin_conn.execute("SELECT * FROM mycelium.create_room('atlas')")
    for value in ("true", "false", "true"):
        await admin_conn.execute(f"SELECT * FROM mycelium.write_setting('board.dependency_gate', '{value}', "
                                 "'atlas', 'dba')")
    assert len(await _trail(admin_conn)) == 3
    for statement in ("UPDATE mycelium.audit_log SET actor = 'someone' WHERE id = (SELECT min(id) FROM mycelium.audit_log)",
                      "DELETE FROM mycelium.audit_log", "TRUNCATE mycelium.audit_log"):
        with pytest.raises(asyncpg.PostgresError) as refused:
            await admin_conn.execute(statement)
        assert refused.value.sqlstate == "MY409", statement
    # a forger who can switch the guard off still cannot make the chain hold
    await admin_conn.execute("ALTER TABLE mycelium.audit_log DISABLE TRIGGER t10_audit_append_only")
    second = await admin_conn.fetchval("SELECT id FROM mycelium.audit_log ORDER BY id OFFSET 1 LIMIT 1")
    await admin_conn.execute("UPDATE mycelium.audit_log SET detail = '{\"value\": false}' WHERE id = $1", second)
    assert [tuple(r) for r in await admin_conn.fetch("SELECT * FROM mycelium.verify_audit_chain()")] == \
        [(second, "content does not match its hash")]
    await admin_conn.execute("DELETE FROM mycelium.audit_log WHERE id = $1", second)
    problems = await admin_conn.fetch("SELECT * FROM mycelium.verify_audit_chain()")
    assert [p["problem"] for p in problems] == ["does not follow the entry before it"]


async def test_an_operator_release_of_a_transition_is_recorded(client, admin_conn):
    await claim(admin_conn, "req-1")
    await admin_conn.execute("SELECT 1 FROM mycelium.mark_unknown('req-1', 'w:1', 1, 'lost')")
    r = await client.post("/api/transitions/release", json={"request_id": "req-1", "verified": "not_executed",
                                                            "by": "ops", "reason": "checked the bank"})
    assert r.status_code == 200, r.text
    entry = (await _trail(admin_conn))[-1]
    assert (entry["action"], entry["target"], entry["actor"]) == ("transition.release", "req-1", "ops")


async def test_a_forced_release_needs_an_operator_behind_the_gate_and_is_recorded(gated, provider, admin_conn):
    alice, bob = bearer(provider.token("alice")), bearer(provider.token("bob"))
    olga = bearer(provider.token("olga", role="operator"))
    assert (await gated.post("/api/rooms", json={"name": "atlas"}, headers=alice)).status_code == 201
    key = (await gated.post("/api/rooms/atlas/tasks", json={"title": "Ship", "handle": "alice"},
                            headers=alice)).json()["key"]
    r = await gated.post("/api/rooms/atlas/assignments/claim", json={"key": key, "handle": "alice"}, headers=alice)
    assert r.status_code == 200, r.text
    r = await gated.post("/api/rooms/atlas/assignments/release", json={"key": key, "handle": "bob", "force": True},
                         headers=bob)
    assert r.status_code == 403 and r.json()["error"] == "operator_only", r.text
    r = await gated.post("/api/rooms/atlas/assignments/release",
                         json={"key": key, "handle": "olga", "force": True, "note": "stuck"}, headers=olga)
    assert r.status_code == 200, r.text
    entry = (await _trail(admin_conn))[-1]
    assert (entry["action"], entry["room"], entry["target"], entry["principal"]) == \
        ("lease.force_release", "atlas", key, "olga")
    assert entry["detail"] == {"holder": "alice", "by": "olga", "note": "stuck"}
