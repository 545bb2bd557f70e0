"""Private rooms, enforced by PostgreSQL: with the gate on, a private room and every row of it are
seen only by its owner, its members and operators — over HTTP, and in plain SQL as the app role
with a principal set (and with none, as a psql session or a replica with a bug would be)."""

from __future__ import annotations

import asyncpg
import pytest

from tests.auth.conftest import Provider, bearer


async def _fill(gated, provider: Provider) -> None:
    """A private room (owner alice, member bob) and a public one, each with memories, messages, a
    task, its lease and its thread."""
    alice = bearer(provider.token("alice"))
    r = await gated.post("/api/rooms", json={"name": "vault", "is_public": False, "owner": "alice",
                                              "members": ["bob"]}, headers=alice)
    assert r.status_code == 201, r.text
    assert (await gated.post("/api/rooms", json={"name": "lobby"}, headers=alice)).status_code == 201
    for room in ("vault", "lobby"):
        items = [{"key": "plans/q3", "value": "Ship [[plans/q4]] after this", "created_by": "alice"},
                 {"key": "plans/q4", "value": "Later", "created_by": "alice"}]
        r = await gated.post(f"/api/rooms/{room}/memory", json={"items": items}, headers=alice)
        assert r.status_code == 201, r.text
        r = await gated.post(f"/api/rooms/{room}/messages",
                             json={"sender_handle": "alice", "content": "hello @bob"}, headers=alice)
        assert r.status_code == 201, r.text
        r = await gated.post(f"/api/rooms/{room}/tasks", json={"title": "Write it", "handle": "alice"},
                             headers=alice)
        assert r.status_code == 201, r.text
        key = r.json()["key"]
        r = await gated.post(f"/api/rooms/{room}/assignments/claim", json={"key": key, "handle": "alice"},
                             headers=alice)
        assert r.status_code == 200, r.text


async def _counts(conn: asyncpg.Connection, room: str) -> dict[str, int]:
    tables = await conn.fetch("SELECT * FROM mycelium.room_scoped_tables()")
    return {t["table_name"]: await conn.fetchval(
        f'SELECT count(*) FROM mycelium."{t["table_name"]}" WHERE "{t["room_column"]}" = $1', room)
        for t in tables}


async def _as_app(conn: asyncpg.Connection, principal: str | None, role: str = "agent") -> None:
    await conn.execute("RESET ROLE")
    await conn.execute("SET ROLE mycelium_app")
    await conn.execute("SELECT set_config('mycelium.principal', $1, false), "
                       "set_config('mycelium.principal_role', $2, false)", principal or "", role)


async def test_every_table_with_a_room_is_protected_once_the_gate_closes(admin_conn):
    columns = {r["table_name"] for r in await admin_conn.fetch(
        "SELECT table_name FROM information_schema.columns c JOIN pg_class k ON k.relname = c.table_name "
        "AND k.relnamespace = 'mycelium'::regnamespace AND k.relkind = 'r' "
        "WHERE c.table_schema = 'mycelium' AND c.column_name = 'room'")} - {"config"} | {"rooms"}
    protected = {r["tablename"] for r in await admin_conn.fetch(
        "SELECT tablename FROM pg_policies WHERE schemaname = 'mycelium' AND policyname = 'room_visible'")}
    secured = "SELECT relname FROM pg_class WHERE relnamespace = 'mycelium'::regnamespace AND relrowsecurity"
    assert columns and columns == protected
    assert await admin_conn.fetch(secured) == []  # an open hub plans its reads without policies
    await admin_conn.execute("SELECT * FROM mycelium.write_setting('auth.gate', 'true', '', 'ops')")
    assert {r["relname"] for r in await admin_conn.fetch(secured)} == columns
    await admin_conn.execute("SELECT * FROM mycelium.write_setting('auth.gate', 'false', '', 'ops')")
    assert await admin_conn.fetch(secured) == []


async def test_in_sql_a_non_member_sees_no_row_of_a_private_room_in_any_table(gated, provider, admin_conn):
    await _fill(gated, provider)
    everything = await _counts(admin_conn, "vault")
    filled = {t for t, n in everything.items() if n}
    assert len(filled) >= 8, everything  # the room's rows are in most tables, not one or two
    public = await _counts(admin_conn, "lobby")

    for principal, role in (("carol", "agent"), (None, "agent"), ("vera", "viewer")):
        await _as_app(admin_conn, principal, role)
        assert await _counts(admin_conn, "vault") == dict.fromkeys(everything, 0), principal
        assert await _counts(admin_conn, "lobby") == public, principal  # public rooms stay readable
    for principal, role in (("alice", "agent"), ("bob", "agent"), ("olga", "operator")):
        await _as_app(admin_conn, principal, role)
        assert await _counts(admin_conn, "vault") == everything, principal
    await admin_conn.execute("RESET ROLE")
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.rooms WHERE name = 'vault'") == 1


async def test_in_sql_a_write_into_a_private_room_is_refused_for_a_non_member(gated, provider, admin_conn):
    await _fill(gated, provider)
    await _as_app(admin_conn, "carol")
    for statement in (
        "SELECT * FROM mycelium.write_memory('vault', 'x/y', '\"mine\"', 'carol')",
        "SELECT * FROM mycelium.create_task('vault', 'Steal it', 'carol')",
        "SELECT * FROM mycelium.delete_memory('vault', 'plans/q3', 'carol')",
    ):
        with pytest.raises(asyncpg.PostgresError) as refused:
            await admin_conn.execute(statement)
        assert refused.value.sqlstate == "MY404" and "vault" in str(refused.value), statement
    # reads of the verbs (run as their owner) hide it too, from a principal and from nobody
    for principal in ("carol", None):
        await _as_app(admin_conn, principal)
        with pytest.raises(asyncpg.PostgresError) as refused:
            await admin_conn.fetchval("SELECT mycelium.room_known('vault')")
        assert refused.value.sqlstate == "MY404", principal
    await _as_app(admin_conn, "bob")
    assert await admin_conn.fetchval("SELECT mycelium.room_known('vault')") is True
    await admin_conn.execute("SELECT * FROM mycelium.write_memory('vault', 'x/y', '\"ours\"', 'bob')")


async def test_a_room_found_visible_in_a_transaction_opens_no_other(gated, provider, admin_conn):
    """The guard remembers the room it let a principal write in for the rest of the transaction:
    for that principal and that room only."""
    await _fill(gated, provider)
    await _as_app(admin_conn, "carol")
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT * FROM mycelium.write_memory('lobby', 'x/y', '\"mine\"', 'carol')")
        with pytest.raises(asyncpg.PostgresError) as refused:
            await admin_conn.execute("SELECT * FROM mycelium.create_task('vault', 'Steal it', 'carol')")
        assert refused.value.sqlstate == "MY404"
    await _as_app(admin_conn, "bob")
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT * FROM mycelium.write_memory('vault', 'x/z', '\"ours\"', 'bob')")
        await admin_conn.execute("SELECT set_config('mycelium.principal', 'carol', true)")
        with pytest.raises(asyncpg.PostgresError) as refused:  # another principal: looked at again
            await admin_conn.execute("SELECT * FROM mycelium.write_memory('vault', 'x/w', '\"mine\"', 'carol')")
        assert refused.value.sqlstate == "MY404"


async def test_over_http_a_private_room_does_not_exist_for_a_non_member(gated, provider):
    await _fill(gated, provider)
    carol = bearer(provider.token("carol"))
    bob = bearer(provider.token("bob"))
    olga = bearer(provider.token("olga", role="operator"))
    names = [r["name"] for r in (await gated.get("/api/rooms", headers=carol)).json()]
    assert "vault" not in names and "lobby" in names
    assert "vault" in [r["name"] for r in (await gated.get("/api/rooms", headers=bob)).json()]
    for method, path, body in (
        ("GET", "/api/rooms/vault", None),
        ("GET", "/api/rooms/vault/memory", None),
        ("GET", "/api/rooms/vault/memory/plans/q3", None),
        ("GET", "/api/rooms/vault/messages", None),
        ("POST", "/api/rooms/vault/messages", {"sender_handle": "carol", "content": "let me in"}),
        ("POST", "/api/rooms/vault/memory", {"items": [{"key": "a/b", "value": "x", "created_by": "carol"}]}),
        ("POST", "/api/rooms/vault/tasks", {"title": "Mine now", "handle": "carol"}),
        ("POST", "/api/rooms/vault/memory/search", {"query": "plans"}),
    ):
        r = await gated.request(method, path, json=body, headers=carol)
        assert r.status_code == 404 and r.json()["error"] == "room_not_found", (method, path, r.text)
        if method == "GET":
            assert (await gated.request(method, path, headers=bob)).status_code == 200, path
            assert (await gated.request(method, path, headers=olga)).status_code == 200, path


async def test_await_acts_as_the_principal(gated, provider):
    await _fill(gated, provider)  # alice said "hello @bob" in both rooms
    bob, carol = bearer(provider.token("bob")), bearer(provider.token("carol"))
    alice = bearer(provider.token("alice"))
    r = await gated.get("/api/rooms/vault/await", params={"handle": "carol", "timeout": 0.2}, headers=carol)
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"
    r = await gated.get("/api/rooms/vault/await", params={"handle": "bob", "timeout": 0.2}, headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "actor_mismatch", r.text
    r = await gated.get("/api/rooms/vault/await", params={"handle": "bob", "timeout": 2}, headers=bob)
    assert r.status_code == 200 and r.json()["prompt"] == "hello @bob", r.text
    r = await gated.get("/api/rooms/vault/messages/stream", headers=carol)
    assert r.status_code == 404


async def test_an_agent_follows_its_own_events_only(gated, provider):
    await _fill(gated, provider)
    bob, carol = bearer(provider.token("bob")), bearer(provider.token("carol"))
    olga = bearer(provider.token("olga", role="operator"))
    r = await gated.get("/api/events", params={"handle": "bob"}, headers=carol)
    assert r.status_code == 403 and r.json()["error"] == "not_your_events", r.text
    r = await gated.post("/api/rooms/lobby/subscriptions", json={"handle": "bob", "prefix": ""}, headers=carol)
    assert r.status_code == 403 and r.json()["error"] == "not_your_events"
    r = await gated.post("/api/rooms/vault/subscriptions", json={"handle": "carol", "prefix": ""}, headers=carol)
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"  # a private room she is not in
    r = await gated.post("/api/rooms/lobby/subscriptions", json={"handle": "bob", "prefix": "plans/"}, headers=olga)
    assert r.status_code == 201, r.text  # an operator acts for anyone
    r = await gated.post("/api/rooms/vault/subscriptions", json={"handle": "bob", "prefix": "plans/"}, headers=bob)
    assert r.status_code == 201, r.text
    listed = (await gated.get("/api/rooms/vault/subscriptions", headers=carol))
    assert listed.status_code == 404  # nor does she see who follows what there
