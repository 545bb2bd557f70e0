"""The dependency gate: depends-on edges from the links table, waiting_on derived, cycles refused."""

from __future__ import annotations

import itertools

import asyncpg
import pytest

from tests.board.conftest import ROOM, fields, later, notices, refusal, task

A = f"/api/rooms/{ROOM}/assignments"


@pytest.fixture
async def plan(admin_conn, room):
    """work/api depends on an open work/schema and a resolved work/migrate."""
    for title in ("schema", "migrate", "api"):
        await task(admin_conn, title)
    await admin_conn.execute("SELECT 1 FROM mycelium.resolve_task($1, 'work/migrate', 'db')", room)
    await fields(admin_conn, "work/api", {"depends-on": ["work/schema", "work/migrate"]})
    return "work/api"


async def waiting(conn, key):
    return await conn.fetchval("SELECT mycelium.waiting_on($1, $2)", ROOM, key)


async def test_waiting_on_lists_only_existing_unsettled_board_rows(admin_conn, plan):
    assert await waiting(admin_conn, plan) == ["work/schema"]
    await admin_conn.execute("SELECT 1 FROM mycelium.write_memory($1, 'context/design', '\"a note\"', 'ana')", ROOM)
    await task(admin_conn, "refs")
    await fields(admin_conn, "work/refs", {"depends-on": ["context/design", "work/never-filed"]})
    assert await waiting(admin_conn, "work/refs") == []
    await fields(admin_conn, "work/refs", {"depends-on": "  work/schema  "})
    assert await waiting(admin_conn, "work/refs") == ["work/schema"]
    await fields(admin_conn, "work/refs", {"depends-on": None})
    assert await waiting(admin_conn, "work/refs") == []


async def test_dismissed_and_resolved_statuses_settle_a_prerequisite(admin_conn, plan):
    await fields(admin_conn, "work/schema", {"status": "dismissed"})
    assert await waiting(admin_conn, plan) == []
    await fields(admin_conn, "work/schema", {"status": "open"})
    assert await waiting(admin_conn, plan) == ["work/schema"]


async def test_with_the_gate_off_a_waiting_row_is_claimed_and_says_what_it_waits_on(client, plan):
    r = await client.post(f"{A}/claim", json={"key": plan, "handle": "api"})
    assert r.status_code == 200
    assert r.json()["waiting_on"] == ["work/schema"]


async def test_with_the_gate_on_a_waiting_row_is_refused_unless_forced(client, admin_conn, plan):
    r = await client.put(f"/api/rooms/{ROOM}/board/gate", json={"enabled": True, "handle": "ops"})
    assert r.json() == {"room": ROOM, "dependency_gate": True, "room_setting": True, "hub_setting": None}
    r = await client.post(f"{A}/claim", json={"key": plan, "handle": "api"})
    assert r.status_code == 409
    assert r.json()["waiting_on"] == ["work/schema"] and "waits on work/schema" in r.json()["message"]
    forced = await client.post(f"{A}/claim", json={"key": plan, "handle": "api", "force": True})
    assert forced.status_code == 200 and forced.json()["assignment"] == "held"
    await client.post(f"{A}/release", json={"key": plan, "handle": "api"})
    await client.post(f"{A}/claim", json={"key": "work/schema", "handle": "db"})
    await client.post(f"{A}/resolve", json={"key": "work/schema", "handle": "db"})
    assert (await client.post(f"{A}/claim", json={"key": plan, "handle": "api"})).status_code == 200


async def test_the_gate_is_hub_wide_or_per_room_and_off_by_default(client, admin_conn, plan):
    assert (await client.get(f"/api/rooms/{ROOM}/board/gate")).json()["dependency_gate"] is False
    await client.put("/api/board/gate", json={"enabled": True})
    assert (await client.post(f"{A}/claim", json={"key": plan, "handle": "api"})).status_code == 409
    await client.put(f"/api/rooms/{ROOM}/board/gate", json={"enabled": False})
    assert (await client.post(f"{A}/claim", json={"key": plan, "handle": "api"})).status_code == 200
    r = await client.put(f"/api/rooms/{ROOM}/board/gate", json={"enabled": None})
    assert r.json() == {"room": ROOM, "dependency_gate": True, "room_setting": None, "hub_setting": True}
    status, _detail, _ = await refusal(admin_conn, "SELECT 1 FROM mycelium.claim_task($1, $2, 'other')", ROOM, plan)
    assert status == 409  # held by api, who claimed while the room's gate was off


async def test_the_gate_refusal_comes_from_plain_sql_too(admin_conn, plan):
    await admin_conn.execute("SELECT mycelium.set_dependency_gate(true, $1, 'ops')", ROOM)
    status, detail, message = await refusal(
        admin_conn, "SELECT 1 FROM mycelium.claim_task($1, $2, 'api')", ROOM, plan)
    assert (status, detail["error"], detail["waiting_on"]) == (409, "waiting", ["work/schema"])
    assert message == "'work/api' waits on work/schema"
    assert await admin_conn.fetchval("SELECT owner FROM mycelium.claim_task($1, $2, 'api', 30, true)", ROOM, plan) \
        == "api"


async def test_resolving_raises_one_unblocked_notice_per_dependent_that_now_waits_on_nothing(admin_conn, plan):
    for title in ("deploy", "other", "old"):
        await task(admin_conn, title)
    await fields(admin_conn, "work/deploy", {"depends-on": ["work/schema", "work/other"]})
    await fields(admin_conn, "work/old", {"depends-on": "work/schema", "status": "resolved"})
    await admin_conn.execute("SELECT 1 FROM mycelium.resolve_task($1, 'work/schema', 'db')", ROOM)
    unblocked = await notices(admin_conn, ROOM, "unblocked")
    assert [(n["key"], n["by"]) for n in unblocked] == [("work/api", "db")]
    tail = [n["subkind"] for n in await notices(admin_conn, ROOM)][-2:]
    assert tail == ["resolved", "unblocked"]
    await admin_conn.execute("SELECT 1 FROM mycelium.dismiss_row($1, 'work/other', 'ops')", ROOM)
    assert [n["key"] for n in await notices(admin_conn, ROOM, "unblocked")] == ["work/api", "work/deploy"]


async def test_settling_two_prerequisites_in_one_statement_unblocks_once(admin_conn, plan):
    await task(admin_conn, "other")
    await fields(admin_conn, plan, {"depends-on": ["work/schema", "work/other"]})
    await admin_conn.execute(
        "UPDATE mycelium.memories SET meta = meta || '{\"status\": \"resolved\"}'"
        " WHERE room = $1 AND key IN ('work/schema', 'work/other')", ROOM)
    assert [n["key"] for n in await notices(admin_conn, ROOM, "unblocked")] == [plan]


async def test_resolving_two_prerequisite_leases_in_one_statement_unblocks_once(admin_conn, plan):
    await task(admin_conn, "other")
    await fields(admin_conn, plan, {"depends-on": ["work/schema", "work/other"]})
    for key in ("work/schema", "work/other"):
        await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'db')", ROOM, key)
    await admin_conn.execute(
        "UPDATE mycelium.assignments SET state = 'resolved', claimed_at = NULL, ttl_minutes = NULL"
        " WHERE room = $1 AND key IN ('work/schema', 'work/other')", ROOM)
    assert [n["key"] for n in await notices(admin_conn, ROOM, "unblocked")] == [plan]


async def test_two_statements_of_one_transaction_unblock_once_after_the_last_prerequisite(admin_conn, plan):
    await task(admin_conn, "other")
    await fields(admin_conn, plan, {"depends-on": ["work/schema", "work/other"]})
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT 1 FROM mycelium.resolve_task($1, 'work/other', 'db')", ROOM)
        assert await notices(admin_conn, ROOM, "unblocked") == []
        await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, 'work/schema', 'db')", ROOM)
        assert await notices(admin_conn, ROOM, "unblocked") == []
        await admin_conn.execute("SELECT 1 FROM mycelium.resolve_task($1, 'work/schema', 'db')", ROOM)
    assert [n["key"] for n in await notices(admin_conn, ROOM, "unblocked")] == [plan]


async def test_a_rolled_back_resolve_leaves_no_unblocked_notice(admin_conn, plan):
    tr = admin_conn.transaction()
    await tr.start()
    await admin_conn.execute("SELECT 1 FROM mycelium.resolve_task($1, 'work/schema', 'db')", ROOM)
    assert len(await notices(admin_conn, ROOM, "unblocked")) == 1
    await tr.rollback()
    assert await notices(admin_conn, ROOM, "unblocked") == []
    assert await notices(admin_conn, ROOM, "resolved") != []  # migrate's, from the fixture
    assert [n["key"] for n in await notices(admin_conn, ROOM, "resolved")] == ["work/migrate"]


async def settle_while_resolving(db_dsn: str, first: str, second: str) -> None:
    """Run ``first`` in an open transaction, start ``second`` on another connection, check that it
    waits for the first (the row lock), then commit the first and let the second finish."""
    import asyncio

    a = await asyncpg.connect(db_dsn)
    b = await asyncpg.connect(db_dsn)
    try:
        tr = a.transaction()
        await tr.start()
        await a.execute(first, ROOM)
        later_one = asyncio.create_task(b.execute(second, ROOM))
        await asyncio.sleep(0.2)
        assert not later_one.done()  # waits for the first writer's lock on the row
        await tr.commit()
        await later_one
    finally:
        await a.close()
        await b.close()


RESOLVE_SCHEMA = "SELECT 1 FROM mycelium.resolve_task($1, 'work/schema', 'db')"
SETTLE_SCHEMA = "SELECT 1 FROM mycelium.write_fields($1, 'work/schema', 'ops', '{\"status\": \"resolved\"}')"
PLAIN_RESOLVE_SCHEMA = ("UPDATE mycelium.assignments SET state = 'resolved', claimed_at = NULL, ttl_minutes = NULL"
                        " WHERE room = $1 AND key = 'work/schema'")


@pytest.mark.parametrize("order", ["resolve first", "field write first"])
async def test_a_resolve_and_a_field_write_settling_the_row_together_unblock_once(db_dsn, admin_conn, plan, order):
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, 'work/schema', 'db')", ROOM)
    first, second = (RESOLVE_SCHEMA, SETTLE_SCHEMA) if order == "resolve first" else (SETTLE_SCHEMA, RESOLVE_SCHEMA)
    await settle_while_resolving(db_dsn, first, second)
    assert [n["key"] for n in await notices(admin_conn, ROOM, "unblocked")] == [plan]


async def test_a_plain_update_resolving_a_lease_waits_for_a_field_write_settling_its_row(db_dsn, admin_conn, plan):
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, 'work/schema', 'db')", ROOM)
    await settle_while_resolving(db_dsn, SETTLE_SCHEMA, PLAIN_RESOLVE_SCHEMA)
    assert [n["key"] for n in await notices(admin_conn, ROOM, "unblocked")] == [plan]


async def test_a_dependency_that_would_close_a_cycle_is_refused(client, admin_conn, plan):
    status, detail, _message = await refusal(
        admin_conn, "SELECT 1 FROM mycelium.write_fields($1, 'work/schema', 'x', '{\"depends-on\": \"work/api\"}')",
        ROOM)
    assert (status, detail["error"], detail["cycle"]) == (422, "dependency_cycle",
                                                           ["work/schema", "work/api", "work/schema"])
    r = await client.post(f"/api/rooms/{ROOM}/fields",
                          json={"key": "work/schema", "handle": "x", "fields": {"depends-on": ["work/api"]}})
    assert (r.status_code, r.json()["error"]) == (422, "dependency_cycle")
    r = await client.post(f"/api/rooms/{ROOM}/memory", json={"items": [
        {"key": "work/self", "value": "x", "created_by": "x", "meta": {"depends-on": "work/self"}, "embed": False}]})
    assert (r.status_code, r.json()["error"]) == (422, "dependency_cycle")
    assert (await client.get(f"/api/rooms/{ROOM}/memory/work/self")).status_code == 404
    # a longer loop through three rows, written through psql
    await task(admin_conn, "c")
    await fields(admin_conn, "work/c", {"depends-on": "work/api"})
    status, detail, _ = await refusal(
        admin_conn, "UPDATE mycelium.memories SET meta = meta || '{\"depends-on\": \"work/c\"}'"
                    " WHERE room = $1 AND key = 'work/schema'", ROOM)
    assert detail["cycle"] == ["work/schema", "work/c", "work/api", "work/schema"]
    # a note in the loop is a reference, not a prerequisite: no cycle between board rows
    await admin_conn.execute(
        "SELECT 1 FROM mycelium.write_memory($1, 'context/n', '\"n\"', 'x', NULL, '{\"depends-on\": \"work/api\"}')",
        ROOM)
    await fields(admin_conn, "work/schema", {"depends-on": "context/n"})


async def test_two_writers_cannot_each_add_half_of_a_cycle(db_dsn, admin_conn, room):
    await task(admin_conn, "x")
    await task(admin_conn, "y")
    a = await asyncpg.connect(db_dsn)
    b = await asyncpg.connect(db_dsn)
    try:
        ta, tb = a.transaction(), b.transaction()
        await ta.start()
        await tb.start()
        await a.execute("SELECT 1 FROM mycelium.write_fields($1, 'work/x', 'a', '{\"depends-on\": \"work/y\"}')", ROOM)
        import asyncio

        second = asyncio.create_task(b.execute(
            "SELECT 1 FROM mycelium.write_fields($1, 'work/y', 'b', '{\"depends-on\": [\"work/x\"]}')", ROOM))
        await asyncio.sleep(0.2)
        assert not second.done()  # waits for the first writer's edges
        await ta.commit()
        with pytest.raises(asyncpg.PostgresError) as info:
            await second
        assert info.value.sqlstate == "MY422"
        await tb.rollback()
    finally:
        await a.close()
        await b.close()


async def test_the_lease_watch_wakes_when_a_dependency_resolves(client, admin_conn, plan, db_dsn):
    seen = (await client.get(f"{A}/await", params={"key": plan})).json()
    assert seen["waiting_on"] == ["work/schema"]
    resolver = later(db_dsn, 0.3, "SELECT 1 FROM mycelium.resolve_task($1, 'work/schema', 'db')", ROOM)
    woke = (await client.get(f"{A}/await", params={"key": plan, "since": seen["since"], "timeout": 30})).json()
    resolver.join()
    assert woke["changed"] is True and woke["waiting_on"] == []


async def test_a_dependency_graph_whose_paths_multiply_is_checked_in_time_of_its_edges(admin_conn, room):
    """Forty rows, each depending on the two before it: Fibonacci(40) paths but 77 edges. A search
    that walks every path runs for hours here; one that visits each edge once is done at once."""
    await admin_conn.execute("SET statement_timeout = '20s'")
    keys: list[str] = []
    for i in range(40):
        await task(admin_conn, f"step{i}")
        keys.append(f"work/step{i}")
        if keys[:-1]:
            await fields(admin_conn, keys[-1], {"depends-on": keys[-3:-1]})
    assert await waiting(admin_conn, keys[-1]) == keys[-3:-1]
    status, detail, _ = await refusal(
        admin_conn, "SELECT 1 FROM mycelium.write_fields($1, 'work/step0', 'x', '{\"depends-on\": \"work/step39\"}')",
        ROOM)
    cycle = detail["cycle"]
    assert (status, detail["error"], cycle[0], cycle[1], cycle[-1]) == (422, "dependency_cycle", "work/step0",
                                                                        "work/step39", "work/step0")
    edges = {(k, d) for i, k in enumerate(keys) for d in keys[max(0, i - 2):i]}
    assert all((a, b) in edges for a, b in itertools.pairwise(cycle[1:]))  # every step of it is a real edge
    await admin_conn.execute("RESET statement_timeout")
