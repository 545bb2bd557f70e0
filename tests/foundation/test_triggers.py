"""Triggers fire in the order their names state (sql/base.sql: tNN_<what>, by band).

PostgreSQL fires the triggers of one table, event, timing and level in name order; the number in
front of each name is that place, and its band says which phase it belongs to. The catalogue is
read as PostgreSQL reads it, so a trigger renamed out of its band, or two that swap places, fail
here before they change what a write does."""

from __future__ import annotations

import re

import asyncpg
import pytest

NAME = re.compile(r"t(\d\d)_[a-z][a-z0-9_]*")

# (timing, level) -> the numbers that phase may use
BANDS = {
    ("BEFORE", "STATEMENT"): range(1, 10),
    ("BEFORE", "ROW"): range(10, 70),
    ("AFTER", "ROW"): range(70, 90),
    ("AFTER", "STATEMENT"): range(90, 100),
}
GATE = "t50_guard_room_write"

TRIGGERS = """
  SELECT c.relname AS tbl, t.tgname AS name,
         CASE WHEN t.tgtype & 2 = 2 THEN 'BEFORE' WHEN t.tgtype & 64 = 64 THEN 'INSTEAD' ELSE 'AFTER' END
           AS timing,
         CASE WHEN t.tgtype & 1 = 1 THEN 'ROW' ELSE 'STATEMENT' END AS level,
         array_remove(ARRAY[CASE WHEN t.tgtype & 4 = 4 THEN 'INSERT' END,
                            CASE WHEN t.tgtype & 16 = 16 THEN 'UPDATE' END,
                            CASE WHEN t.tgtype & 8 = 8 THEN 'DELETE' END,
                            CASE WHEN t.tgtype & 32 = 32 THEN 'TRUNCATE' END], NULL) AS events,
         t.tgfoid::regproc::text AS function
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  WHERE c.relnamespace = 'mycelium'::regnamespace AND NOT t.tgisinternal
"""

# The order that matters, as the SQL files describe it: on an INSERT into messages the token gate,
# then the thread gate (floor and roster: it must see the episode as the writer gave it, and refuse
# before a position is taken), the engines' reserved handles, then the position and the episode;
# after the row, its audit, its ping and wake hints, its follow-up, its summons, the runners' wakes
# and its handles' events.
MESSAGES_INSERT = [
    "t50_guard_room_write", "t55_messages_admit", "t60_messages_admit_engine", "t65_messages_before_insert",
    "t70_audit_forced_release", "t75_messages_after_insert", "t80_messages_follow_up",
    "t85_messages_summon_engines", "t86_messages_wake_runners", "t87_messages_handle_events",
]
MEMORIES_UPDATE = [
    "t10_board_rows_no_lease_fields", "t50_guard_room_write", "t60_memories_before_update",
    "t65_memories_protocol_valid", "t75_memories_after_write", "t85_memories_derive_links_on_update",
    "t95_board_rows_moved",
]


async def firing_order(conn: asyncpg.Connection, table: str, event: str) -> list[str]:
    """The triggers an ``event`` on ``table`` fires, in the order PostgreSQL fires them."""
    phase = {("BEFORE", "STATEMENT"): 0, ("BEFORE", "ROW"): 1, ("AFTER", "ROW"): 2, ("AFTER", "STATEMENT"): 3}
    rows = [r for r in await conn.fetch(TRIGGERS) if r["tbl"] == table and event in r["events"]]
    # name order is byte order (the catalogue's "C" collation for name)
    return [r["name"] for r in sorted(rows, key=lambda r: (phase[r["timing"], r["level"]],
                                                           r["name"].encode()))]


async def test_every_trigger_is_numbered_in_its_band(admin_conn):
    rows = await admin_conn.fetch(TRIGGERS)
    assert len(rows) > 50
    wrong = []
    for r in rows:
        m = NAME.fullmatch(r["name"])
        if m is None or int(m.group(1)) not in BANDS.get((r["timing"], r["level"]), ()):
            wrong.append(f"{r['tbl']}.{r['name']} ({r['timing']} {r['level']})")
        elif int(m.group(1)) == 50 and r["name"] != GATE:
            wrong.append(f"{r['tbl']}.{r['name']} (t50 is the token gate's)")
    assert wrong == []


async def test_no_two_triggers_of_a_table_share_a_place(admin_conn):
    places: dict[tuple[str, str], list[str]] = {}
    for r in await admin_conn.fetch(TRIGGERS):
        places.setdefault((r["tbl"], r["name"][:3]), []).append(r["name"])
    assert {k: v for k, v in places.items() if len(v) > 1} == {}


async def test_the_token_gate_guards_every_room_table_as_t50(admin_conn):
    rows = await admin_conn.fetch(TRIGGERS)
    guarded = {r["tbl"] for r in rows if r["name"] == GATE}
    scoped = {r["table_name"] for r in await admin_conn.fetch("SELECT table_name FROM mycelium.room_scoped_tables()")}
    assert guarded == scoped
    assert {r["function"] for r in rows if r["name"] == GATE} == {"mycelium.guard_room_write"}


@pytest.mark.parametrize(("table", "event", "expected"), [
    ("messages", "INSERT", MESSAGES_INSERT),
    ("memories", "UPDATE", MEMORIES_UPDATE),
])
async def test_a_write_fires_its_triggers_in_the_documented_order(admin_conn, table, event, expected):
    assert await firing_order(admin_conn, table, event) == expected


async def test_the_thread_gate_sees_the_episode_as_written_and_refuses_before_a_position(admin_conn):
    """t55 runs before t65 fills in the episode and takes the position: a write the floor refuses
    leaves the room's counter where it was, and a write with no episode is a channel write."""
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    episode = await admin_conn.fetchval(
        "SELECT episode FROM mycelium.write_memory('atlas', 'work/x', to_jsonb('# X'::text), 'julia')")
    await admin_conn.execute("SELECT mycelium.hold_floor('atlas', $1, 'lead')", episode)
    head = await admin_conn.fetchval("SELECT last FROM mycelium.message_positions WHERE room = 'atlas'")
    with pytest.raises(asyncpg.PostgresError) as refused:
        await admin_conn.execute(
            "INSERT INTO mycelium.messages (room, episode, sender, content) VALUES ('atlas', $1, 'sec', 'hi')",
            episode)
    assert refused.value.sqlstate == "MY409"
    assert await admin_conn.fetchval(
        "SELECT last FROM mycelium.message_positions WHERE room = 'atlas'") == head
    channel = await admin_conn.fetchrow(
        "INSERT INTO mycelium.messages (room, episode, sender, content) VALUES ('atlas', '', 'sec', 'hi') "
        "RETURNING position, episode")
    assert channel["position"] == head + 1
    assert channel["episode"] == await admin_conn.fetchval("SELECT mycelium.live_episode('atlas')")
