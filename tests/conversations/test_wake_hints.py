"""Wake hints the hub sends itself: its verbs keep their hints inside the transaction (no NOTIFY
there, so no commit waits on the cluster-wide notify lock) and the process sends them once the
write has committed; every other writer (psql) still gets the trigger's NOTIFY."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from mycelium.conversations.inbox import await_next
from mycelium.conversations.wakes import waiters_of
from mycelium.db.listener import Listener
from mycelium.db.queries import query
from mycelium.errors import Refusal
from mycelium.verbs import Actor
from mycelium.verbs.gateway import bind, run


async def hub_call(conn: asyncpg.Connection, verb: str, actor: Actor, **params: object) -> asyncpg.Record:
    """The verb's statement exactly as a hub with a listener runs it (hints kept), on ``conn``."""
    q = query(verb)
    row: asyncpg.Record = await run(conn, q, bind(q, actor, True, params))
    return row


def post(conn: asyncpg.Connection, content: str, recipients: list[str]):
    return hub_call(conn, "post_message", Actor("julia"), room="atlas", sender="julia", content=content,
                    episode=None, recipients=recipients, kind="exchange", subkind=None, payload_type="message",
                    payload={}, parents=[], sender_role="agent")


def claim(conn: asyncpg.Connection, handle: str):
    return hub_call(conn, "claim_task", Actor(handle), room="atlas", key="work/add-apple-pay", handle=handle,
                    ttl_minutes=30, force=False)


@pytest.fixture
async def overheard(db_dsn: str) -> AsyncIterator[list[tuple[str, str]]]:
    """Every notification on the wake channels, heard by a plain connection of its own."""
    conn = await asyncpg.connect(db_dsn)
    heard: list[tuple[str, str]] = []
    for channel in ("mycelium_messages", "mycelium_wakes", "mycelium_board", "mycelium_changes"):
        await conn.add_listener(channel, lambda _c, _p, ch, payload: heard.append((ch, payload)))
    try:
        yield heard
    finally:
        await conn.close()


async def settle(conn: asyncpg.Connection) -> None:
    """Let pending notifications reach the listening connection."""
    await conn.execute("SELECT pg_sleep(0.05)")
    await asyncio.sleep(0.05)


async def test_a_hub_verb_notifies_nobody_itself_and_returns_the_hints_of_its_commit(task, admin_conn, overheard):
    row = await post(admin_conn, "over to you @bob", ["carl"])
    await settle(admin_conn)
    assert overheard == []
    assert row["wake_hints"].split("\n") == [
        f"mycelium_messages\tatlas {row['position']}",
        f"mycelium_wakes\t{row['position']}\tatlas\tcarl,bob",
    ]
    # the setting lasted one transaction: the next plain write notifies from its trigger again
    plain = await admin_conn.fetchrow("SELECT * FROM mycelium.post_message('atlas', 'julia', 'hi @bob')")
    await settle(admin_conn)
    assert ("mycelium_wakes", f"{plain['position']}\tatlas\tbob") in overheard
    assert ("mycelium_messages", f"atlas {plain['position']}") in overheard


async def test_a_claim_through_the_hub_query_returns_its_board_and_timeline_hints(task, admin_conn, overheard):
    row = await claim(admin_conn, "julia")
    head = await admin_conn.fetchval("SELECT last FROM mycelium.message_positions WHERE room = 'atlas'")
    await settle(admin_conn)
    assert overheard == []
    assert set(row["wake_hints"].split("\n")) == {"mycelium_board\tatlas", f"mycelium_messages\tatlas {head}"}
    await admin_conn.fetchrow("SELECT * FROM mycelium.release_task('atlas', 'work/add-apple-pay', 'julia')")
    await settle(admin_conn)
    assert ("mycelium_board", "atlas") in overheard


async def test_a_refused_hub_verb_leaves_no_hint_behind(task, admin_conn, overheard):
    await claim(admin_conn, "julia")
    with pytest.raises(Refusal) as err:
        await claim(admin_conn, "bob")
    assert err.value.status == 409
    assert await admin_conn.fetchval("SELECT current_setting('mycelium.wake_hints', true)") in (None, "")
    assert await admin_conn.fetchval("SELECT current_setting('mycelium.defer_wake', true)") in (None, "")


async def test_hints_sent_by_one_process_wake_another_once_and_their_sender_once(db_dsn):
    a, b = Listener(db_dsn), Listener(db_dsn)
    await a.start()
    await b.start()
    heard_a: list[str] = []
    heard_b: list[str] = []
    try:
        for listener, heard in ((a, heard_a), (b, heard_b)):
            await listener.listen("mycelium_board")
            listener.on("mycelium_board", lambda _ch, payload, heard=heard: heard.append(payload))
        a.hint("mycelium_board\tatlas\nmycelium_board\tzeta")
        assert heard_a == ["atlas", "zeta"]  # at once, before anything went over the wire
        for _ in range(100):
            if len(heard_b) == 2:
                break
            await asyncio.sleep(0.02)
        assert heard_b == ["atlas", "zeta"]
        await asyncio.sleep(0.1)
        assert heard_a == ["atlas", "zeta"], "the sender's own NOTIFY must not wake it a second time"
    finally:
        await a.stop()
        await b.stop()


async def test_hints_queued_while_the_connection_is_down_are_sent_once_it_is_back(db_dsn, admin_conn):
    a, b = Listener(db_dsn), Listener(db_dsn)
    await a.start()
    await b.start()
    heard: list[str] = []
    try:
        await b.listen("mycelium_changes")
        b.on("mycelium_changes", lambda _ch, payload: heard.append(payload))
        old_pid = a.connection_pid
        await admin_conn.execute("SELECT pg_terminate_backend($1)", old_pid)
        for _ in range(100):
            if a.connection_pid is None:
                break
            await asyncio.sleep(0.02)
        a.hint("mycelium_changes\tatlas")
        for _ in range(300):
            if "atlas" in heard:
                break
            await asyncio.sleep(0.02)
        assert a.connection_pid not in (None, old_pid)
        assert heard.count("atlas") == 1
    finally:
        await a.stop()
        await b.stop()


async def test_an_await_after_a_delivery_still_gets_what_came_with_a_lost_hint_or_a_late_one(hub, task, admin_conn):
    await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', 'one', NULL, ARRAY['bob'])")
    first = await await_next(hub, "atlas", "bob", timeout=5)
    assert first["content"] == "one" and first["inbox_state"].startswith("false ")
    # a write whose hints were kept and never sent (a replica that died right after its commit):
    # nothing tells this process, yet the await must not lose the message
    await post(admin_conn, "two", ["bob"])
    second = await await_next(hub, "atlas", "bob", timeout=1)
    assert second is not None and second["content"] == "two"
    # a plain write from psql: its NOTIFY may still be on its way when the next await starts
    await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', 'three', NULL, ARRAY['bob'])")
    third = await await_next(hub, "atlas", "bob", timeout=5)
    assert third is not None and third["content"] == "three"
    assert await await_next(hub, "atlas", "bob", timeout=0.2) is None  # each exactly once


async def test_a_message_already_waiting_behind_the_one_taken_is_taken_next_at_once(hub, task, admin_conn):
    for text in ("one", "two"):
        await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', $1, NULL, ARRAY['bob'])",
                                 text)
    first = await await_next(hub, "atlas", "bob", timeout=5)
    assert first["content"] == "one" and first["inbox_state"].startswith("true ")
    waiters = await waiters_of(hub)
    assert waiters.quiet_until("atlas", "bob") is None  # so the next await looks first
    second = await await_next(hub, "atlas", "bob", timeout=5)
    assert second["content"] == "two"
