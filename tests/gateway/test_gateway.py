"""The verb gateway: named parameters, the actor declared in the verb's own statement, one error
shape, wake hints sent once the write has committed."""

from __future__ import annotations

import asyncio

import pytest

from mycelium.db.queries import compile_query
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor, Verbs, verbs_of


def test_named_parameters_become_positional_in_the_order_they_first_appear():
    q = compile_query("x", "-- returns: row\n-- :not_me in a comment\n"
                      "SELECT :b::text, ':nor_me', \"a:b\", :a, :b FROM t WHERE c = :a")
    assert q.params == ("b", "a") and q.returns == "row"
    assert q.sql.endswith("SELECT $1::text, ':nor_me', \"a:b\", $2, $1 FROM t WHERE c = $2")


def test_a_query_cannot_mix_named_and_numbered_parameters():
    with pytest.raises(RuntimeError, match="mixes"):
        compile_query("x", "SELECT :a, $2")


async def test_a_call_names_every_parameter_of_its_verb_and_no_other(hub):
    verbs = verbs_of(hub)
    with pytest.raises(TypeError, match="needs parameter 'title'"):
        await verbs.call(NOBODY, "create_room", name="x", description=None, is_public=True, owner=None,
                         members=[], created_by=None)
    with pytest.raises(TypeError, match="no parameter 'colour'"):
        await verbs.call(NOBODY, "get_room", room="x", colour="red")
    with pytest.raises(TypeError, match="no parameter 'actor'"):
        await verbs.call(NOBODY, "get_room", room="x", actor="julia")


async def create(verbs, actor: Actor, name: str, created_by: str | None = None):
    return await verbs.call(actor, "create_room", name=name, title=None, description=None, is_public=True,
                            owner=None, members=[], created_by=created_by)


async def test_a_write_records_the_actor_it_was_called_as(hub):
    row = await create(verbs_of(hub), Actor("julia"), "atlas")
    assert row["created_by"] == "julia"


async def test_a_refusal_comes_out_as_the_one_error_shape(hub):
    verbs = verbs_of(hub)
    await create(verbs, NOBODY, "atlas")
    with pytest.raises(Refusal) as caught:
        await create(verbs, NOBODY, "atlas")
    assert caught.value.status == 409 and caught.value.body() == {
        "name": "atlas", "error": "room_exists", "message": "Room 'atlas' already exists"}


async def test_a_write_hints_its_waiters_once_it_has_committed(hub, admin_conn):
    verbs = verbs_of(hub)
    await create(verbs, NOBODY, "atlas")
    seen: list[str] = []
    await hub.wakes.listen("mycelium_changes")
    off = hub.wakes.on("mycelium_changes", lambda _channel, payload: seen.append(payload))
    try:
        await verbs.call(NOBODY, "delete_room", room="atlas")
        # delivered to this process's waiters by the call itself, before any NOTIFY comes back
        assert seen == ["atlas"]
        assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.rooms WHERE name = 'atlas'") == 0
    finally:
        off()


async def test_a_transaction_sends_its_hints_after_the_commit_and_none_after_a_refusal(hub):
    verbs = verbs_of(hub)
    for name in ("a1", "a2", "a3"):
        await create(verbs, NOBODY, name)
    seen: list[str] = []
    await hub.wakes.listen("mycelium_changes")
    off = hub.wakes.on("mycelium_changes", lambda _channel, payload: seen.append(payload))
    try:
        async with verbs.transaction() as tx:
            await tx.call(NOBODY, "delete_room", room="a1")
            await tx.call(NOBODY, "delete_room", room="a2")
            assert seen == []
        assert seen == ["a1", "a2"]
        with pytest.raises(Refusal):
            async with verbs.transaction() as tx:
                await tx.call(NOBODY, "delete_room", room="a3")
                await tx.call(NOBODY, "delete_room", room="nowhere")
        await asyncio.sleep(0.05)
        assert seen == ["a1", "a2"]
        assert await verbs.call(NOBODY, "get_room", room="a3") is not None
    finally:
        off()


async def test_composed_sql_runs_only_in_a_read_only_transaction(hub):
    verbs = verbs_of(hub)
    async with verbs.transaction(readonly=True) as tx:
        assert [r["n"] for r in await tx.select("SELECT 1 AS n")] == [1]
    with pytest.raises(RuntimeError, match="read-only"):
        async with verbs.transaction() as tx:
            await tx.select("SELECT 1")


async def test_an_actor_of_no_known_kind_is_refused_before_the_verb_runs(hub):
    with pytest.raises(Refusal) as caught:
        await create(verbs_of(hub), Actor("julia", "wizard"), "atlas")  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.error) == (422, "invalid_actor_kind")
    assert await verbs_of(hub).call(NOBODY, "get_room", room="atlas") is None


async def test_a_call_is_one_statement_with_its_actor_declared_inside_it(db_dsn):
    from mycelium.db.pool import create_pool

    pool = await create_pool(db_dsn, role="mycelium_app", min_size=1, max_size=1)
    try:
        sent: list[str] = []
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
        verbs = Verbs(pool, hint=lambda _hints: None)
        await create(verbs, Actor("julia"), "atlas")
        await verbs.call(Actor("julia"), "write_memory", room="atlas", key="work/a", value="# A", created_by="julia",
                         tags=None, meta=None, content_text=None, base_version=None, embedding=None, embed=False)
        await verbs.call(Actor("julia"), "claim_task", room="atlas", key="work/a", handle="julia", ttl_minutes=30,
                         force=False)
        assert len(sent) == 3 and all("mycelium.acting(" in sql for sql in sent)
    finally:
        await pool.close()


@pytest.mark.parametrize(("path", "body"), [
    ("/api/rooms/nowhere/memory", {"room": "nowhere", "error": "room_not_found",
                                   "message": "Room 'nowhere' not found"}),
    ("/api/rooms/nowhere/tasks", {"room": "nowhere", "error": "room_not_found",
                                  "message": "Room 'nowhere' not found"}),
    ("/api/rooms/nowhere/messages", {"room": "nowhere", "error": "room_not_found",
                                     "message": "Room 'nowhere' not found"}),
    ("/api/rooms/atlas/memory/notes/none", {"room": "atlas", "key": "notes/none", "error": "memory_not_found",
                                            "message": "no memory 'notes/none' in room 'atlas'"}),
    ("/api/rooms/atlas/history/notes/none", {
        "room": "atlas", "key": "notes/none", "error": "memory_not_found",
        "message": "no memory 'notes/none' in room 'atlas' has ever existed"}),
    ("/api/rooms/atlas/tasks/work/none", {"room": "atlas", "ref": "work/none", "error": "row_not_found",
                                          "message": "no board row 'work/none' in room 'atlas' (by key or thread id)"}),
    ("/api/rooms/atlas/skills/none", {"room": "atlas", "name": "none", "error": "skill_not_found",
                                      "message": "no skill 'none' in room 'atlas'"}),
])
async def test_a_missing_room_or_row_is_the_same_404_as_before(client, path, body):
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    r = await client.get(path)
    assert (r.status_code, r.json()) == (404, body)
