"""sql/slim.sql tried with plain SQL: one publisher per room, the published position recorded only
by the session that publishes and never ahead of a commit, and who is on a channel."""

from __future__ import annotations

import asyncpg
import pytest


async def refused(conn: asyncpg.Connection, sql: str, *args: object) -> asyncpg.PostgresError:
    with pytest.raises(asyncpg.PostgresError) as caught:
        await conn.execute(sql, *args)
    return caught.value


@pytest.fixture
async def second_conn(db_dsn: str):
    from mycelium.db.pool import setup_connection

    conn = await asyncpg.connect(db_dsn)
    await setup_connection(conn)
    try:
        yield conn
    finally:
        await conn.close()


async def take(conn: asyncpg.Connection, room: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM mycelium.slim_take_channel($1, 'test')", room)


async def test_one_session_publishes_a_room_and_only_it_records_what_was_published(admin_conn, second_conn):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("INSERT INTO mycelium.messages (room, sender, content) "
                             "SELECT 'atlas', 'bob', 'm' || g FROM generate_series(1, 3) g")
    assert (await take(admin_conn, "atlas"))["published"] == 0
    assert await take(second_conn, "atlas") is None  # the lock is held: no second publisher
    assert await take(admin_conn, "atlas") is not None  # the holder asking again keeps it
    err = await refused(second_conn, "SELECT mycelium.slim_mark_published('atlas', 2)")
    assert err.sqlstate == "MY409" and "does not publish room 'atlas'" in str(err)
    err = await refused(admin_conn, "SELECT mycelium.slim_mark_published('atlas', 4)")
    assert err.sqlstate == "MY409" and "no message at position 4" in str(err)  # never ahead of a commit
    assert await admin_conn.fetchval("SELECT mycelium.slim_mark_published('atlas', 2)") == 2
    assert await admin_conn.fetchval("SELECT mycelium.slim_mark_published('atlas', 1)") == 2  # never back
    assert await second_conn.fetchval("SELECT mycelium.slim_publishing('atlas')") is False


async def test_a_publisher_whose_connection_dies_leaves_the_room_to_the_next_at_its_recorded_position(
        db_dsn, admin_conn, second_conn):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("INSERT INTO mycelium.messages (room, sender, content) "
                             "SELECT 'atlas', 'bob', 'm' || g FROM generate_series(1, 5) g")
    first = await asyncpg.connect(db_dsn)
    assert await take(first, "atlas") is not None
    await first.fetchval("SELECT mycelium.slim_mark_published('atlas', 3)")
    assert await take(second_conn, "atlas") is None
    first.terminate()  # as a kill -9 leaves it: no unlock, the server sees the socket close
    for _ in range(100):
        row = await take(second_conn, "atlas")
        if row is not None:
            break
        await admin_conn.execute("SELECT pg_sleep(0.02)")
    assert row is not None and row["published"] == 3


async def test_the_channel_admits_whom_the_room_admits_and_forgets_a_member_the_room_drops(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('vault', p_is_public => false, p_owner => 'lead', "
                             "p_members => ARRAY['api'])")
    err = await refused(admin_conn, "SELECT * FROM mycelium.slim_join('vault', 'eve')")
    assert err.sqlstate == "MY403" and "room 'vault' is private and @eve is not one of its members" in str(err)
    err = await refused(admin_conn, "SELECT * FROM mycelium.slim_join('vault', 'system')")
    assert err.sqlstate == "MY403"  # a reserved handle is nobody's to join as
    err = await refused(admin_conn, "SELECT * FROM mycelium.slim_join('nowhere', 'api')")
    assert err.sqlstate == "MY404"
    await admin_conn.execute("SELECT * FROM mycelium.slim_join('vault', '@API')")
    await admin_conn.execute("SELECT * FROM mycelium.slim_join('vault', 'lead')")
    roster = lambda: admin_conn.fetch("SELECT handle FROM mycelium.slim_roster('vault')")  # noqa: E731
    assert [r["handle"] for r in await roster()] == ["api", "lead"]
    await admin_conn.execute("UPDATE mycelium.rooms SET members = '{}' WHERE name = 'vault'")
    assert [r["handle"] for r in await roster()] == ["lead"]
    assert await admin_conn.fetchval("SELECT mycelium.slim_leave('vault', 'lead')") is True
    assert await roster() == []
