"""With the gate on, the verified principal is the actor: a write naming another author is refused
unless an operator makes it, a viewer only reads, and the administrative verbs need an operator."""

from __future__ import annotations

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
