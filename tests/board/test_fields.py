"""Board field writes and the board verbs (block, unblock, dismiss, promote)."""

from __future__ import annotations

import pytest

from tests.board.conftest import ROOM, notices, refusal, task

F = f"/api/rooms/{ROOM}/fields"


async def write(client, key, values, handle="julia"):
    return await client.post(F, json={"key": key, "handle": handle, "fields": values})


async def test_a_field_write_changes_frontmatter_only_and_bumps_the_version(client, admin_conn, room):
    key = await task(admin_conn, "Fielded")
    await write(client, key, {"priority": "high", "upstream": "#12"})
    before = (await client.get(f"/api/rooms/{room}/memory/{key}")).json()
    r = await write(client, key, {"priority": "low", "upstream": None})
    assert r.status_code == 200, r.text
    after = r.json()
    assert after["version"] == before["version"] + 1
    assert after["value"] == before["value"] and after["episode"] == before["episode"]
    assert after["meta"] == {"status": "open", "kind": "action", "priority": "low"}
    got = (await client.get(f"{F}/{key}")).json()
    assert got == {"room": room, "key": key, "version": after["version"],
                   "fields": {"status": "open", "kind": "action", "priority": "low"}}


async def test_reserved_lease_fields_are_refused_whole_and_nothing_is_written(client, admin_conn, room):
    key = await task(admin_conn, "Reserved")
    r = await write(client, key, {"priority": "high", "owner": "@mallory", "assignment": "held"})
    assert r.status_code == 422
    body = r.json()
    assert (body["error"], body["reserved"]) == ("reserved_fields", ["assignment", "owner"])
    assert "assignments" in body["message"]
    m = (await client.get(f"/api/rooms/{room}/memory/{key}")).json()
    assert m["version"] == 1 and "priority" not in m["meta"]


@pytest.mark.parametrize(("values", "status", "error"), [
    ({}, 422, "empty_fields"),
    ({"version": 9}, 422, "managed_fields"),
    ({"status": "done"}, 422, "invalid_field_value"),
    ({"priority": 3}, 422, "invalid_field_value"),
])
async def test_bad_field_writes_are_clear_4xx_and_write_nothing(client, admin_conn, room, values, status, error):
    key = await task(admin_conn, "Bad fields")
    r = await write(client, key, values)
    assert (r.status_code, r.json()["error"]) == (status, error)
    assert (await client.get(f"/api/rooms/{room}/memory/{key}")).json()["version"] == 1


async def test_a_field_write_to_a_missing_row_is_404_and_creates_nothing(client, room):
    r = await write(client, "work/ghost", {"priority": "high"})
    assert (r.status_code, r.json()["error"]) == (404, "memory_not_found")
    assert (await client.get(f"/api/rooms/{room}/memory/work/ghost")).status_code == 404
    assert (await client.get(f"{F}/work/ghost")).status_code == 404


async def test_fields_work_in_any_namespace(client, admin_conn, room):
    await admin_conn.execute("SELECT 1 FROM mycelium.write_memory($1, 'context/goal', '\"g\"', 'ana')", room)
    r = await write(client, "context/goal", {"status": "whatever"})
    assert r.status_code == 200 and r.json()["meta"] == {"status": "whatever"}


async def test_a_field_write_leaves_a_live_lease_intact(client, admin_conn, room):
    key = await task(admin_conn, "Leased")
    await client.post(f"/api/rooms/{room}/assignments/claim", json={"key": key, "handle": "growth"})
    await write(client, key, {"priority": "urgent"})
    lease = (await client.get(f"/api/rooms/{room}/assignments/{key}")).json()
    assert (lease["assignment"], lease["owner"]) == ("held", "growth")


async def test_the_memory_route_and_psql_cannot_forge_a_lease_in_frontmatter(client, admin_conn, room):
    key = await task(admin_conn, "Forged")
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": [
        {"key": key, "value": "x", "created_by": "m", "meta": {"owner": "@mallory"}, "embed": False}]})
    assert (r.status_code, r.json()["error"], r.json()["reserved"]) == (422, "reserved_fields", ["owner"])
    status, detail, _ = await refusal(
        admin_conn, "UPDATE mycelium.memories SET meta = meta || '{\"assignment\": \"held\"}' WHERE key = $1", key)
    assert (status, detail["error"]) == (422, "reserved_fields")
    # outside the board a field named owner is just a field
    r = await client.post(f"/api/rooms/{room}/memory", json={"items": [
        {"key": "context/team", "value": "x", "created_by": "m", "meta": {"owner": "ana"}, "embed": False}]})
    assert r.status_code == 201


async def test_block_and_unblock_raise_their_notices(client, admin_conn, room):
    key = await task(admin_conn, "Blockable")
    r = await client.post(f"/api/rooms/{room}/board/block", json={"key": key, "handle": "ops", "on": "#502"})
    assert r.status_code == 200 and r.json()["blocked_by"] == "#502"
    r = await client.post(f"/api/rooms/{room}/board/unblock", json={"key": key, "handle": "ops"})
    assert r.status_code == 200 and r.json()["blocked_by"] is None
    r = await client.post(f"/api/rooms/{room}/board/unblock", json={"key": key, "handle": "ops"})
    assert (r.status_code, r.json()["error"]) == (409, "not_blocked")
    got = [(n["subkind"], n.get("blocked_by"), n["by"]) for n in await notices(admin_conn, room)
           if n["subkind"] in ("blocked", "unblocked")]
    assert got == [("blocked", "#502", "ops"), ("unblocked", None, "ops")]
    r = await client.post(f"/api/rooms/{room}/board/block", json={"key": key, "handle": "ops"})
    assert (r.status_code, r.json()["error"]) == (422, "missing_blocker")


async def test_dismiss_and_promote_settle_a_row(client, admin_conn, room):
    a = await task(admin_conn, "Dismiss me")
    b = await task(admin_conn, "Promote me")
    r = await client.post(f"/api/rooms/{room}/board/dismiss", json={"key": a, "handle": "ops"})
    assert (r.json()["status"], r.json()["attention"]) == ("dismissed", "resolved")
    r = await client.post(f"/api/rooms/{room}/board/promote",
                          json={"key": b, "handle": "ops", "url": "https://example.invalid/issues/7"})
    assert (r.json()["status"], r.json()["attention"]) == ("resolved", "resolved")
    meta = (await client.get(f"{F}/{b}")).json()["fields"]
    assert meta["upstream_url"] == "https://example.invalid/issues/7" and meta["promoted_by"] == "ops"
    r = await client.post(f"/api/rooms/{room}/board/frobnicate", json={"key": a, "handle": "ops"})
    assert (r.status_code, r.json()["error"]) == (404, "unknown_verb")
    r = await client.post(f"/api/rooms/{room}/board/dismiss", json={"key": "context/x", "handle": "ops"})
    assert (r.status_code, r.json()["error"]) == (422, "not_a_board_row")


async def test_field_refusals_also_come_from_plain_sql(admin_conn, room):
    key = await task(admin_conn, "Plain fields")
    cases = [
        ("SELECT 1 FROM mycelium.write_fields($1, $2, 'x', '{}')", key, 422, "empty_fields"),
        ("SELECT 1 FROM mycelium.write_fields($1, $2, 'x', '{\"owner\": \"a\"}')", key, 422, "reserved_fields"),
        ("SELECT 1 FROM mycelium.write_fields($1, $2, 'x', '{\"a\": 1}')", "work/none", 404, "memory_not_found"),
        ("SELECT 1 FROM mycelium.block_row($1, $2, 'x', '')", key, 422, "missing_blocker"),
        ("SELECT 1 FROM mycelium.unblock_row($1, $2, 'x')", key, 409, "not_blocked"),
        ("SELECT 1 FROM mycelium.dismiss_row($1, $2, 'x')", "plan/x", 422, "not_a_board_row"),
        ("SELECT mycelium.read_fields($1, $2)", "work/none", 404, "memory_not_found"),
    ]
    for sql, k, status, error in cases:
        got, detail, _ = await refusal(admin_conn, sql, room, k)
        assert (got, detail["error"]) == (status, error), sql
