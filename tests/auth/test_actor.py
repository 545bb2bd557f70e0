"""With the gate on, the verified principal is the actor: a write naming another author is refused
unless an operator makes it, a viewer only reads, and the administrative verbs need an operator."""

from __future__ import annotations

import asyncpg
import pytest

from tests.auth.conftest import Provider, bearer


async def _room(gated, provider: Provider, name: str = "atlas") -> None:
    r = await gated.post("/api/rooms", json={"name": name}, headers=bearer(provider.token("alice")))
    assert r.status_code == 201, r.text


async def test_a_write_is_recorded_as_the_principal_and_naming_another_author_is_refused(gated, provider):
    alice = bearer(provider.token("alice"))
    r = await gated.post("/api/rooms", json={"name": "atlas", "created_by": "bob"}, headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "actor_mismatch", r.text
    await _room(gated, provider)
    r = await gated.post("/api/rooms/atlas/messages", json={"sender_handle": "bob", "content": "I am bob"},
                         headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "actor_mismatch"
    r = await gated.post("/api/rooms/atlas/messages", json={"sender_handle": "alice", "content": "hello"},
                         headers=alice)
    assert r.status_code == 201 and r.json()["sender_handle"] == "alice"
    r = await gated.post("/api/rooms/atlas/memory", json={"items": [{"key": "notes/a", "value": "x", "created_by": "bob"}]},
                         headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "actor_mismatch", r.text
    messages = (await gated.get("/api/rooms/atlas/messages", headers=alice)).json()
    assert [m["sender_handle"] for m in messages if m["content"] in ("hello", "I am bob")] == ["alice"]


async def test_an_operator_may_act_for_another_handle(gated, provider):
    await _room(gated, provider)
    op = bearer(provider.token("olga", role="operator"))
    r = await gated.post("/api/rooms/atlas/messages", json={"sender_handle": "bob", "content": "for bob"},
                         headers=op)
    assert r.status_code == 201 and r.json()["sender_handle"] == "bob"


async def test_a_viewer_reads_and_writes_nothing(gated, provider):
    await _room(gated, provider)
    viewer = bearer(provider.token("vera", role="viewer"))
    assert (await gated.get("/api/rooms/atlas", headers=viewer)).status_code == 200
    r = await gated.post("/api/rooms/atlas/messages", json={"sender_handle": "vera", "content": "hi"},
                         headers=viewer)
    assert r.status_code == 403 and r.json()["error"] == "read_only"
    r = await gated.post("/api/rooms", json={"name": "mine"}, headers=viewer)
    assert r.status_code == 403 and r.json()["error"] == "read_only"
    assert (await gated.get("/api/rooms/mine", headers=viewer)).status_code == 404


async def test_the_administrative_verbs_need_an_operator(gated, provider):
    await _room(gated, provider)
    alice = bearer(provider.token("alice"))
    op = bearer(provider.token("olga", role="operator"))
    r = await gated.put("/api/config/board.dependency_gate", json={"value": True, "handle": "alice"},
                        headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "operator_only", r.text
    r = await gated.post("/api/receipts/keys/rotate", headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "operator_only", r.text
    r = await gated.delete("/api/rooms/atlas", headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "operator_only"
    r = await gated.get("/api/rooms/atlas/export", headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "operator_only"
    assert (await gated.get("/api/rooms/atlas/export", headers=op)).status_code == 200
    assert (await gated.get("/api/rooms/atlas", headers=alice)).status_code == 200  # still there
    r = await gated.put("/api/config/board.dependency_gate", json={"value": True, "handle": "olga"}, headers=op)
    assert r.status_code == 200, r.text
    assert (await gated.delete("/api/rooms/atlas", headers=op)).status_code in (200, 204)
    assert (await gated.get("/api/rooms/atlas", headers=op)).status_code == 404


async def test_in_sql_only_an_operator_calls_the_administrative_verbs(gated, provider, admin_conn):
    """The rule lives in the database: psql as the app role with an agent's principal, or with none
    on a gated hub, is refused every administrative verb; an operator's principal and the owner's
    own session are not."""
    olga = bearer(provider.token("olga", role="operator"))
    assert (await gated.post("/api/rooms", json={"name": "atlas"}, headers=olga)).status_code == 201
    administrative = (
        "SELECT * FROM mycelium.write_setting('board.dependency_gate', 'true', '', 'alice')",
        "SELECT mycelium.set_dependency_gate(true, '', 'alice')",
        "SELECT mycelium.delete_room('atlas')",
        "SELECT * FROM mycelium.register_receipt_key('k1', '\\x00'::bytea)",
        "SELECT * FROM mycelium.retire_receipt_keys('k1')",
        "SELECT * FROM mycelium.rotate_hub_key('0123456789abcdef', '{}', '\\x00'::bytea)",
        "SELECT count(*) FROM mycelium.audit_log WHERE (SELECT mycelium.operator_only('export'))",
    )
    for principal, role in (("alice", "agent"), ("vic", "viewer"), (None, "")):
        await admin_conn.execute("SET ROLE mycelium_app")
        await admin_conn.execute("SELECT set_config('mycelium.principal', $1, false), "
                                 "set_config('mycelium.principal_role', $2, false)", principal or "", role)
        for statement in administrative:
            with pytest.raises(asyncpg.PostgresError) as refused:
                await admin_conn.execute(statement)
            assert refused.value.sqlstate == "MY403", (principal, statement)
            assert "operator" in str(refused.value), (principal, statement)
    await admin_conn.execute("SELECT set_config('mycelium.principal', 'olga', false), "
                             "set_config('mycelium.principal_role', 'operator', false)")
    await admin_conn.execute(administrative[0])
    await admin_conn.execute("RESET ROLE")
    await admin_conn.execute("SELECT set_config('mycelium.principal', '', false), "
                             "set_config('mycelium.principal_role', '', false)")
    await admin_conn.execute(administrative[1])  # the owner's own session is an administrator's
    assert (await gated.get("/api/rooms/atlas", headers=olga)).status_code == 200


async def test_a_refused_key_rotation_leaves_the_hub_key_alone(gated, provider):
    alice = bearer(provider.token("alice"))
    olga = bearer(provider.token("olga", role="operator"))
    before = (await gated.get("/api/receipts/keys", headers=olga)).json()["keys"]
    r = await gated.post("/api/receipts/keys/rotate", headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "operator_only", r.text
    # the hub still signs with the key it had: a new receipt key was neither made nor registered
    r = await gated.post("/api/receipts/keys/rotate", headers=olga)
    assert r.status_code == 201, r.text
    after = (await gated.get("/api/receipts/keys", headers=olga)).json()["keys"]
    assert len(after) == len(before) + 1
