"""sql/worker_engine.sql and sql/swarms.sql tried with plain SQL: what summons a worker, a parent
completed once however its last parts race, a turn applied once and only as the rules say, and
swarms refused before anything is written."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tests.runners.test_runners_sql import connect, refused


@pytest.fixture
async def room(admin_conn: asyncpg.Connection) -> asyncpg.Connection:
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    for handle, kind in (("ann", "worker"), ("bob", "worker"), ("cy", "worker"), ("pia", "persona"),
                         ("conductor", "conductor")):
        await admin_conn.execute("SELECT mycelium.create_engine('atlas', $1, $2, '', 'julia')", handle, kind)
    return admin_conn


async def task(conn: asyncpg.Connection, title: str, assignee: str | None = None, parent: str | None = None,
               by: str = "julia") -> str:
    return await conn.fetchval("SELECT key FROM mycelium.create_task('atlas', $1, $2, NULL, $3, $4)",
                               title, by, assignee, parent)


async def summons(conn: asyncpg.Connection, how: str | None = None) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM mycelium.engine_summons WHERE $1::text IS NULL OR how = $1 ORDER BY id",
                            how)


async def claim(conn: asyncpg.Connection, worker: str = "w1") -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM mycelium.claim_engine_summons($1, 50, 30, ARRAY['worker'])", worker)


async def turn(conn: asyncpg.Connection, s: asyncpg.Record, content: str, tasks: list | None = None,
               done: bool = False, mentions: list[str] | None = None, worker: str = "w1") -> dict:
    got = await conn.fetchval(
        "SELECT mycelium.worker_turn(mycelium.acting('atlas', $1, 'engine'), $2, $3, $4, $5::jsonb, $6, $7)",
        s["engine"], s["id"], worker, content, tasks or [], done, mentions or [])
    return got


async def resolve(conn: asyncpg.Connection, key: str, by: str = "julia") -> None:
    await conn.execute("SELECT * FROM mycelium.resolve_task('atlas', $1, $2)", key, by)


async def test_a_row_filed_for_a_worker_summons_it_with_the_row_and_nobody_else(room):
    key = await task(room, "Build the API", assignee="bob")
    await task(room, "Review it", assignee="carol")  # a person: no summon
    await task(room, "Voice it", assignee="pia")  # a persona is not woken by the board
    await task(room, "Nobody's")
    (s,) = await summons(room)
    episode = await room.fetchval("SELECT episode FROM mycelium.memories WHERE room = 'atlas' AND key = $1", key)
    assert (s["engine"], s["how"], s["row_key"], s["episode"], s["sender"], s["content"]) == (
        "bob", "filed", key, episode, "julia", "Build the API")


async def test_the_last_parts_resolved_at_once_complete_their_parent_exactly_once(room, db_dsn):
    for round_ in range(4):
        parent = await task(room, f"Ship it {round_}", assignee="ann")
        await room.execute("DELETE FROM mycelium.engine_summons")
        parts = [await task(room, f"Part {round_}.{i}", parent=parent) for i in range(3)]
        await resolve(room, parts[0])
        assert await summons(room, "completed") == []
        a, b = await connect(db_dsn), await connect(db_dsn)
        try:
            ta, tb = a.transaction(), b.transaction()
            await ta.start()
            await tb.start()
            await resolve(a, parts[1])
            racing = asyncio.ensure_future(resolve(b, parts[2]))  # waits for a's lock on the parent
            await asyncio.sleep(0.2)
            assert not racing.done()
            await ta.commit()
            await racing
            await tb.commit()
        finally:
            await a.close()
            await b.close()
        (done,) = await summons(room, "completed")
        assert (done["engine"], done["row_key"], done["kind"]) == ("ann", parent, "worker")
        # a part resolved again, or reopened and resolved, never completes it twice
        await resolve(room, parts[2])
        assert len(await summons(room, "completed")) == 1


async def test_parts_settled_through_their_status_complete_their_parent_once(room):
    parent = await task(room, "Ship it", assignee="ann")
    parts = [await task(room, f"Part {i}", parent=parent) for i in range(3)]
    await room.execute("SELECT 1 FROM mycelium.dismiss_row('atlas', $1, 'julia')", parts[0])
    await room.execute("SELECT 1 FROM mycelium.promote_row('atlas', $1, 'julia', NULL)", parts[1])
    assert await summons(room, "completed") == []
    await room.execute("SELECT 1 FROM mycelium.write_fields('atlas', $1, 'bob', '{\"status\": \"resolved\"}')", parts[2])
    (done,) = await summons(room, "completed")
    assert (done["engine"], done["row_key"], done["sender"]) == ("ann", parent, "bob")
    said = [(n["key"], n["status"], n["by"]) for n in map(dict, await room.fetch(
        "SELECT payload ->> 'key' AS key, payload ->> 'status' AS status, payload ->> 'by' AS by"
        " FROM mycelium.messages WHERE room = 'atlas' AND payload ->> 'subkind' = 'resolved' ORDER BY position"))]
    assert said == [(parts[0], "dismissed", "julia"), (parts[1], "resolved", "julia"), (parts[2], "resolved", "bob")]
    # settled again (a lease's resolve on a dismissed row), or its status written twice: no second summon
    await resolve(room, parts[0])
    await room.execute("SELECT 1 FROM mycelium.write_fields('atlas', $1, 'bob', '{\"status\": \"dismissed\"}')", parts[2])
    assert len(await summons(room, "completed")) == 1


async def test_a_parent_with_no_worker_to_combine_it_is_left_to_a_person(room):
    parent = await task(room, "Ship it", assignee="carol")
    part = await task(room, "The part", parent=parent)
    await resolve(room, part)
    assert await summons(room, "completed") == []


async def test_a_turn_files_its_parts_resolves_its_row_and_is_applied_once(room):
    key = await task(room, "Build the API", assignee="bob")
    (s,) = await claim(room)
    await room.execute("SELECT * FROM mycelium.claim_task(mycelium.acting('atlas', 'bob', 'engine'), $1, 'bob')", key)
    got = await turn(room, s, "Split and done.\n[[new: Schema -> @cy]]\n[[done]]",
                     tasks=[{"title": "Schema", "assignee": "cy"}], done=True)
    assert got["resolved"] == key and [f["key"] for f in got["filed"]] == ["work/schema"]
    child = await room.fetchrow("SELECT meta, created_by FROM mycelium.memories WHERE room = 'atlas' AND key = 'work/schema'")
    assert (child["meta"]["part-of"], child["meta"]["assignee"], child["created_by"]) == (key, "cy", "bob")
    reply = await room.fetchrow("SELECT sender, parents, episode, payload FROM mycelium.messages WHERE id = $1::uuid",
                                got["message"])
    assert reply["sender"] == "bob" and reply["parents"] == [s["message_id"]] and reply["episode"] == s["episode"]
    assert reply["payload"]["worker"] == {"wake": "filed", "row": key, "handed_back": False}
    # the same turn applied again (a worker that did not see its first commit) is refused whole
    err = await refused(room, "SELECT mycelium.worker_turn(mycelium.acting('atlas', 'bob', 'engine'), $1, 'w1', "
                        "'again', '[{\"title\": \"Schema 2\", \"assignee\": \"cy\"}]', true)", s["id"])
    assert err.sqlstate == "MY409" and "summon_not_held" in str(err.detail)
    assert await room.fetchval("SELECT count(*) FROM mycelium.memories WHERE room = 'atlas' AND key LIKE 'work/schema%'") == 1


async def test_done_on_a_settled_row_changes_nothing(room):
    key = await task(room, "Build the API")
    await resolve(room, key)
    before = await room.fetchrow("SELECT * FROM mycelium.assignments WHERE room = 'atlas' AND key = $1", key)
    notices = await room.fetchval("SELECT count(*) FROM mycelium.messages WHERE payload_type = 'notice'")
    episode = await room.fetchval("SELECT episode FROM mycelium.memories WHERE room = 'atlas' AND key = $1", key)
    await room.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', '@bob is this done?', $1)", episode)
    (s,) = await claim(room)
    got = await turn(room, s, "It is. [[done]]", done=True)
    assert got["resolved"] is None
    after = await room.fetchrow("SELECT * FROM mycelium.assignments WHERE room = 'atlas' AND key = $1", key)
    assert dict(after) == dict(before)
    assert await room.fetchval("SELECT count(*) FROM mycelium.messages WHERE payload_type = 'notice'") == notices


async def test_a_reply_on_someone_elses_row_that_neither_resolves_nor_names_anyone_goes_back_to_the_holder(room):
    key = await task(room, "Build the API")
    await room.execute("SELECT * FROM mycelium.claim_task('atlas', $1, 'carol')", key)
    episode = await room.fetchval("SELECT episode FROM mycelium.memories WHERE room = 'atlas' AND key = $1", key)
    for _ in range(2):
        await room.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', '@bob a look at this?', $1)", episode)
    first, second = await claim(room)
    back = await turn(room, first, "Looks fine to me.")
    assert (back["recipients"], back["handed_back"]) == (["carol"], True)
    named = await turn(room, second, "@cy knows the schema better.", mentions=["cy", "bob"])
    assert (named["recipients"], named["handed_back"]) == (["cy"], False)
    # naming a worker is a turn for it: cy is summoned, addressed
    (cy,) = [s for s in await summons(room) if s["engine"] == "cy"]
    assert (cy["how"], cy["sender"]) == ("addressed", "bob")


async def test_a_turn_a_conductor_asked_for_applies_no_board_action(room):
    key = await task(room, "Ship it")
    episode = await room.fetchval("SELECT episode FROM mycelium.memories WHERE room = 'atlas' AND key = $1", key)
    await room.execute("SELECT id FROM mycelium.post_message(mycelium.acting('atlas', 'conductor', 'engine'), 'conductor', "
                       "'swarm · split · turn 4 · ann', $1, ARRAY['ann'])", episode)
    (s,) = await claim(room)
    assert (s["engine"], s["how"]) == ("ann", "addressed")
    got = await turn(room, s, "[[new: A part -> @bob]] [[done]]", tasks=[{"title": "A part", "assignee": "bob"}],
                     done=True, mentions=["bob"])
    assert (got["filed"], got["resolved"], got["recipients"]) == ([], None, [])


@pytest.mark.parametrize(("goal", "team", "code", "words"), [
    ("", ["ann"], "missing_goal", "needs a goal"),
    ("Ship it", [], "missing_team", "at least one member"),
    ("Ship it", ["ann", "bob", "Ann"], "bad_team", "@ann is named twice"),
    ("Ship it", ["ann", "system"], "bad_team", "@system is the hub itself"),
    ("Ship it", ["conductor"], "bad_team", "@conductor conducts"),
    ("Ship it", ["ann", "pia"], "not_a_worker", "@pia is a persona"),
])
async def test_a_bad_swarm_is_refused_before_anything_is_written(room, goal, team, code, words):
    before = await room.fetchval("SELECT count(*) FROM mycelium.memories")
    err = await refused(room, "SELECT mycelium.start_swarm('atlas', $1, $2, 'julia')", goal, team)
    assert code in str(err.detail) and words in str(err), str(err)
    assert await room.fetchval("SELECT count(*) FROM mycelium.memories") == before
    assert await room.fetchval("SELECT count(*) FROM mycelium.swarms") == 0


async def test_a_swarm_makes_workers_uses_runners_and_summons_the_conductor_with_its_cast(room):
    await room.execute("SELECT * FROM mycelium.add_runner('atlas', 'dora', ARRAY['true'], p_by => 'ops')")
    got = await room.fetchval(
        "SELECT mycelium.start_swarm('atlas', 'Ship passkey login', ARRAY['ann', 'dora', 'eve'], 'julia')")
    assert got["members"] == [{"handle": "ann", "as": "engine"}, {"handle": "dora", "as": "runner"},
                              {"handle": "eve", "as": "worker"}]
    assert await room.fetchval("SELECT kind FROM mycelium.engines WHERE room = 'atlas' AND handle = 'eve'") == "worker"
    assert await room.fetchval("SELECT count(*) FROM mycelium.engines WHERE handle = 'dora'") == 0
    # the directive summons the conductor alone: the workers it names are its cast, asked in turn
    assert [(s["engine"], s["how"]) for s in await summons(room)] == [("conductor", "mention")]
    (listed,) = await room.fetch("SELECT * FROM mycelium.room_swarms('atlas')")
    assert (listed["key"], listed["lead"], listed["status"], listed["parts"]) == (got["key"], "ann", "open", 0)
    err = await refused(room, "SELECT * FROM mycelium.room_swarms('atlas', 'work/nothing')")
    assert "swarm_not_found" in str(err.detail)
