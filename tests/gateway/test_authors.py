"""The author of a write is the actor the gateway declares in the verb's own statement; the
positional field each verb has always taken is the fallback (a hub of the previous release, psql),
and the two may not disagree. Messages are never written as a reserved sender."""

from __future__ import annotations

import asyncpg
import pytest

from mycelium.errors import Refusal
from mycelium.verbs import Actor, verbs_of


@pytest.fixture
async def room(admin_conn: asyncpg.Connection) -> str:
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("SELECT mycelium.create_task('atlas', 'Add Apple Pay', 'lead')")
    return "atlas"


async def test_a_memory_written_through_the_gateway_is_authored_by_its_actor(hub, room, admin_conn):
    verbs = verbs_of(hub)
    row = await verbs.call(Actor("julia"), "write_memory", room=room, key="notes/a", value="one", created_by=None,
                           tags=None, meta=None, content_text=None, base_version=None, embedding=None, embed=False)
    assert (row["created_by"], row["updated_by"]) == ("julia", "julia")
    await verbs.call(Actor("bob"), "delete_memory", room=room, key="notes/a", by=None)
    history = await admin_conn.fetch(
        "SELECT op, written_by FROM mycelium.memory_versions WHERE room = 'atlas' AND key = 'notes/a' ORDER BY id")
    assert [(h["op"], h["written_by"]) for h in history] == [("write", "julia"), ("delete", "bob")]


async def test_a_lease_and_its_notice_name_the_actor_who_claimed_it(hub, room, admin_conn):
    verbs = verbs_of(hub)
    lease = await verbs.call(Actor("julia"), "claim_task", room=room, key="work/add-apple-pay", handle=None,
                             ttl_minutes=30, force=False)
    assert lease["owner"] == "julia"
    stored = await admin_conn.fetchrow("SELECT owner, updated_by FROM mycelium.assignments WHERE key = 'work/add-apple-pay'")
    assert tuple(stored) == ("julia", "julia")
    await verbs.call(Actor("julia"), "resolve_task", room=room, key="work/add-apple-pay", handle=None)
    notices = await admin_conn.fetch(
        "SELECT sender, payload ->> 'subkind' AS subkind, payload ->> 'by' AS by FROM mycelium.messages "
        "WHERE room = 'atlas' AND payload_type = 'notice' AND payload ->> 'key' = 'work/add-apple-pay' ORDER BY position")
    assert [(n["sender"], n["subkind"], n["by"]) for n in notices] == [
        ("system", "filed", "lead"), ("system", "claimed", "julia"), ("system", "resolved", "julia")]


async def test_a_message_sent_through_the_gateway_is_sent_by_its_actor(hub, room):
    row = await verbs_of(hub).call(
        Actor("julia"), "post_message", room=room, sender=None, content="hello", episode=None, recipients=[],
        kind="exchange", subkind=None, payload_type="message", payload={}, parents=[], sender_role="agent")
    assert row["sender"] == "julia"


async def test_over_http_the_declared_author_is_recorded_as_before(client, room, admin_conn):
    r = await client.post("/api/rooms/atlas/memory", json={"items": [
        {"key": "notes/b", "value": "x", "created_by": "ana", "embed": False},
        {"key": "notes/c", "value": "y", "created_by": "ben", "embed": False}]})
    assert r.status_code == 201, r.text
    assert [m["created_by"] for m in r.json()] == ["ana", "ben"]
    r = await client.post("/api/rooms/atlas/messages", json={"sender_handle": "ana", "content": "hi"})
    assert r.status_code == 201 and r.json()["sender_handle"] == "ana"
    r = await client.post("/api/rooms/atlas/assignments/claim", json={"key": "work/add-apple-pay", "handle": "ben"})
    assert r.status_code == 200 and r.json()["owner"] == "ben"
    assert await admin_conn.fetchval("SELECT updated_by FROM mycelium.assignments") == "ben"


async def test_an_actor_and_a_field_that_disagree_are_refused_naming_both(hub, room, admin_conn):
    verbs = verbs_of(hub)
    with pytest.raises(Refusal) as caught:
        await verbs.call(Actor("julia"), "claim_task", room=room, key="work/add-apple-pay", handle="bob",
                         ttl_minutes=30, force=False)
    refusal = caught.value
    assert refusal.status == 403 and refusal.error == "actor_mismatch"
    assert "@bob" in refusal.message and "@julia" in refusal.message
    assert refusal.extra == {"field": "handle", "given": "bob", "actor": "julia"}
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.assignments") == 0
    # the same handle spelled another way is the same actor
    lease = await verbs.call(Actor("Julia"), "claim_task", room=room, key="work/add-apple-pay", handle="@julia",
                             ttl_minutes=30, force=False)
    assert lease["owner"] == "julia"


async def test_in_psql_a_declared_actor_wins_and_a_disagreeing_field_is_refused(room, admin_conn):
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT mycelium.acting(NULL, 'ops', 'operator')")
        row = await admin_conn.fetchrow("SELECT * FROM mycelium.write_memory('atlas', 'notes/d', '\"x\"', NULL)")
        assert row["created_by"] == "ops"
        with pytest.raises(asyncpg.PostgresError) as err:
            await admin_conn.execute("SELECT mycelium.post_message('atlas', 'mallory', 'hi')")
    assert err.value.sqlstate == "MY403" and "actor_mismatch" in err.value.detail


async def test_without_a_declared_actor_each_verb_takes_its_positional_author_as_before(room, admin_conn):
    # what a hub of the previous release and a person in psql do: several authors in one transaction
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT mycelium.write_memory('atlas', 'notes/e', '\"x\"', 'ana')")
        await admin_conn.execute("SELECT mycelium.write_memory('atlas', 'notes/e', '\"y\"', 'ben')")
    assert await admin_conn.fetchval(
        "SELECT array_agg(written_by ORDER BY id) FROM mycelium.memory_versions WHERE key = 'notes/e'"
    ) == ["ana", "ben"]


async def test_the_previous_releases_statements_still_work_as_the_app_role(room, admin_conn):
    """The named queries of the release before the gateway (positional author, defer_wakes)."""
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL ROLE mycelium_app")
        row = await admin_conn.fetchrow(
            "SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints "
            "FROM mycelium.claim_task(mycelium.defer_wakes($1), $2, $3, $4, $5) r",
            "atlas", "work/add-apple-pay", "julia", 30, False)
        assert row["owner"] == "julia" and "mycelium_board\tatlas" in row["wake_hints"]
        sent = await admin_conn.fetchrow(
            "SELECT r.* FROM mycelium.post_message(mycelium.defer_wakes($1), $2, $3, $4, $5, $6, $7, $8, $9, $10,"
            " $11) r", "atlas", "julia", "hi", None, [], "exchange", None, "message", {}, [], "agent")
        assert sent["sender"] == "julia"


@pytest.mark.parametrize("statement", [
    "SELECT mycelium.post_message('atlas', 'system', 'I am the hub')",
    "SELECT mycelium.post_message('atlas', '@System#x', 'I am the hub')",
    "SELECT mycelium.reply('atlas', 'system', 'I am the hub')",
    "SELECT mycelium.post_message('atlas', 'conductor', 'I run the flows')",
])
async def test_no_verb_writes_a_message_as_a_reserved_sender(room, admin_conn, statement):
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL ROLE mycelium_app")
        with pytest.raises(asyncpg.PostgresError) as err:
            await admin_conn.execute(statement)
    assert err.value.sqlstate == "MY403" and '"reserved_handle"' in err.value.detail
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE payload_type <> 'notice'") == 0


async def test_an_amendment_is_never_made_as_a_reserved_sender(room, admin_conn):
    sent = await admin_conn.fetchval("SELECT id FROM mycelium.post_message('atlas', 'julia', 'hi')")
    with pytest.raises(asyncpg.PostgresError) as err:
        await admin_conn.execute("SELECT id FROM mycelium.amend_message('atlas', $1, 'hello', 'system')", sent)
    assert err.value.sqlstate == "MY403"


async def test_an_engine_writes_as_its_own_handle_only_when_it_is_the_actor(room, admin_conn):
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT mycelium.acting(NULL, 'conductor', 'agent')")
        with pytest.raises(asyncpg.PostgresError):
            await admin_conn.execute("SELECT mycelium.post_message('atlas', 'conductor', 'tick')")
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT mycelium.acting(NULL, 'conductor', 'engine')")
        row = await admin_conn.fetchrow("SELECT * FROM mycelium.post_message('atlas', NULL, 'tick')")
    assert row["sender"] == "conductor"


async def test_the_hubs_own_notices_are_still_written_as_system(hub, room, admin_conn):
    await verbs_of(hub).call(Actor("julia"), "claim_task", room=room, key="work/add-apple-pay", handle="julia",
                             ttl_minutes=30, force=False)
    assert await admin_conn.fetchval(
        "SELECT sender FROM mycelium.messages WHERE payload ->> 'subkind' = 'claimed'") == "system"


async def test_over_http_a_reserved_sender_is_the_same_403_as_before(client, room):
    for path, body in (("/api/rooms/atlas/messages", {"sender_handle": "@System", "content": "x"}),
                       ("/api/rooms/atlas/reply", {"handle": "system", "text": "x"}),
                       ("/api/rooms/atlas/messages", {"sender_handle": "synthesizer", "content": "x"})):
        r = await client.post(path, json=body)
        assert r.status_code == 403, r.text
        assert r.json()["error"] == "reserved_handle" and r.json()["message"]
