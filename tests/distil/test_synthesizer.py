"""The synthesizer on a real `mycelium worker` process with a scripted model: it distils the room's
prose (every thread) into context/synthesis, its cursor and text in one write; the next summon reads
only what came after, never its own posts nor the summons; nothing new, nothing written; a failing
model writes nothing and leaves the cursor; `--all` reads everything again."""

from __future__ import annotations

import asyncpg
import pytest

from tests.distil.conftest import eventually, make_task, script
from tests.engines.conftest import engine_workers  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow

M = r"\[\d+\] "
RULES = [
    {"when": r"\] synth:", "fail": "it read its own post"},
    {"when": "@synth|--all", "fail": "it read a summon"},
    {"when": rf"so far:\n\(none yet\)\n\nNew messages, oldest first:\n{M}julia: alpha\n{M}nova: alpha2\n"
             rf"{M}julia: beta\n{M}julia: gamma\n\nWrite", "reply": "Everything: alpha, beta, gamma."},
    {"when": "gamma", "fail": "the model endpoint answered HTTP 503"},
    {"when": rf"so far:\n\(none yet\)\n\nNew messages, oldest first:\n{M}julia: alpha\n{M}nova: alpha2\n\nWrite",
     "reply": "We ship on friday."},
    {"when": rf"so far:\nWe ship on friday.\n\nNew messages, oldest first:\n{M}julia: beta\n\nWrite",
     "reply": "We ship on friday; nova reviews."},
]


async def post(conn, text: str, by: str = "julia", episode: str | None = None) -> int:
    return await conn.fetchval("SELECT position FROM mycelium.post_message('atlas', $1, $2, $3)", by, text, episode)


async def summon(conn, text: str = "") -> dict:
    """Summon the synthesizer from the room and wait for its answer: the summon and what it said."""
    msg = await conn.fetchrow("SELECT * FROM mycelium.invoke_engine('atlas', 'synth', $1, NULL, 'julia')", text)

    async def answered():
        return await conn.fetchrow(
            "SELECT s.state, s.outcome, s.error, m.content AS answer, m.payload AS payload "
            "FROM mycelium.engine_summons s LEFT JOIN mycelium.messages m ON m.id = s.answer_id "
            "WHERE s.message_id = $1 AND s.state = 'done'", msg["id"])

    return dict(await eventually(answered))


async def synthesis(conn) -> dict | None:
    row = await conn.fetchrow(
        "SELECT version, value ->> 'text' AS text, meta FROM mycelium.memories WHERE key = 'context/synthesis'")
    return dict(row) if row else None


async def test_the_synthesis_reads_on_from_its_cursor_never_its_own_posts_and_all_again(
    admin_conn, engine_workers, tmp_path  # noqa: F811
):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("SELECT * FROM mycelium.create_engine('atlas', 'synth', 'synthesizer', '', 'julia')")
    _, thread = await make_task(admin_conn, "atlas", "Cut over")
    engine_workers(MYCELIUM_MODEL_SCRIPT=script(tmp_path, RULES)).wait_ready()

    await post(admin_conn, "alpha")
    second = await post(admin_conn, "alpha2", by="nova", episode=thread)  # a thread's prose counts too
    first = await summon(admin_conn)
    assert first["outcome"] == "answered", first
    assert first["answer"].startswith("Synthesised 2 messages (positions ")
    s1 = await synthesis(admin_conn)
    assert s1["version"] == 1 and s1["text"] == "We ship on friday.\n"
    assert (s1["meta"]["cursor"], s1["meta"]["type"], s1["meta"]["read"]) == (second, "knowledge", 2)

    third = await post(admin_conn, "beta")
    again = await summon(admin_conn)
    assert again["outcome"] == "answered" and again["payload"]["synthesis"]["read"] == 1, again
    s2 = await synthesis(admin_conn)
    assert (s2["version"], s2["text"], s2["meta"]["cursor"]) == (2, "We ship on friday; nova reviews.\n", third)

    quiet = await summon(admin_conn)  # only its own answers and the summons came since
    assert quiet["outcome"] == "answered" and quiet["answer"].startswith("Nothing new to synthesise since position")
    assert (await synthesis(admin_conn))["version"] == 2

    await post(admin_conn, "gamma")
    failed = await summon(admin_conn)
    assert (failed["outcome"], failed["error"]) == ("failed", "scripted:model.json: the model endpoint answered HTTP 503")
    assert failed["payload"]["synthesis"]["model_failed"] is True
    assert "could not synthesise" in failed["answer"] and f"(position {third}) are unchanged" in failed["answer"]
    assert await synthesis(admin_conn) == s2  # nothing written, the cursor where it was

    everything = await summon(admin_conn, "--all")
    assert everything["outcome"] == "answered" and everything["answer"].endswith("v3 from the start."), everything
    s3 = await synthesis(admin_conn)
    assert s3["text"] == "Everything: alpha, beta, gamma.\n" and s3["meta"]["reread"] is True
    gamma = await admin_conn.fetchval("SELECT max(position) FROM mycelium.messages WHERE content = 'gamma'")
    assert s3["meta"]["cursor"] == gamma

    # each version holds its text and its cursor together: one write each
    versions = await admin_conn.fetch(
        "SELECT version, value ->> 'text' AS text, (meta ->> 'cursor')::bigint AS cursor, written_by "
        "FROM mycelium.memory_versions WHERE key = 'context/synthesis' ORDER BY version")
    assert [(v["version"], v["text"], v["cursor"], v["written_by"]) for v in versions] == [
        (1, s1["text"], second, "synth"), (2, s2["text"], third, "synth"), (3, s3["text"], gamma, "synth")]



async def test_only_the_summon_s_engine_reads_through_it_and_behind_the_gate_it_reads_a_private_room(
    admin_conn, db_dsn
):
    """Behind the token gate a session with no principal sees no row of a private room; the
    synthesizer holding a summon there reads the room's prose through it, and nobody else does."""
    await admin_conn.execute("SELECT mycelium.create_room('atlas', NULL, NULL, false, 'julia', '{nova}', 'julia')")
    await admin_conn.execute("SELECT * FROM mycelium.create_engine('atlas', 'synth', 'synthesizer', '', 'julia')")
    await admin_conn.execute("SELECT * FROM mycelium.write_setting('auth.gate', 'true', '', 'ops')")
    first = await post(admin_conn, "alpha")
    second = await post(admin_conn, "alpha2", by="nova")
    msg = await admin_conn.fetchval("SELECT id FROM mycelium.invoke_engine('atlas', 'synth', '', NULL, 'julia')")
    sid = await admin_conn.fetchval("SELECT id FROM mycelium.engine_summons WHERE message_id = $1", msg)
    app = await asyncpg.connect(db_dsn)
    try:
        from mycelium.db.pool import setup_connection

        await setup_connection(app, "mycelium_app")

        async def read(actor: str, kind: str, worker: str = "me"):
            async with app.transaction():
                await app.execute("SELECT mycelium.acting(NULL, $1, $2)", actor, kind)
                return await app.fetchval("SELECT mycelium.synthesis_input('atlas', $1, $2, false, 10)", sid, worker)

        assert await app.fetchval("SELECT count(*) FROM mycelium.messages WHERE room = 'atlas'") == 0
        for actor, kind, worker, status in (("synth", "engine", "me", "MY409"),  # held by nobody yet
                                            ("nova", "agent", "me", "MY403"),  # held, but not the engine
                                            ("synth", "engine", "other", "MY409")):  # another worker's
            if status == "MY403":
                await app.execute("SELECT * FROM mycelium.claim_engine_summons('me', 10, 30, '{synthesizer}')")
            with pytest.raises(asyncpg.PostgresError) as refused:
                await read(actor, kind, worker)
            assert refused.value.sqlstate == status, (actor, worker, refused.value.detail)
        got = await read("synth", "engine")
        assert (got["version"], got["after"]) == (None, 0)
        assert got["messages"] == [{"position": first, "sender": "julia", "text": "alpha"},
                                   {"position": second, "sender": "nova", "text": "alpha2"}]
    finally:
        await app.close()
