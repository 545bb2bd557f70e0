"""Personas: a member played by a model through the one seam. A failing model is reported in the
thread and in the episode, never invented; the persona's @ are neutralised; its memory is the
database's, so it survives the worker."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from mycelium.db.queries import query
from mycelium.engines.models import ModelError, NoModel, ScriptedModel, model_from_env
from tests.engines.conftest import coordinate, eventually, make_task, setup_room

SCRIPT = """
rules:
  - when: "boom"
    fail: "the model endpoint answered HTTP 503"
  - when: "· draft ·"
    handle: sage
    fail: "the model timed out after 60 s"
  - when: "hello"
    reply: "Hello @julia and @~nova! [[mycelium: stance=accept confidence=0.7]]"
"""


async def persona_room(conn: asyncpg.Connection) -> None:
    await setup_room(conn)
    await conn.execute(
        "SELECT * FROM mycelium.create_engine('atlas', 'sage', 'persona', 'a careful reviewer', 'julia')"
    )
    await conn.execute(
        "SELECT * FROM mycelium.write_memory('atlas', 'agents/sage/notes', '\"You are Sage. Be brief.\"', 'julia')"
    )


async def summons(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT s.*, m.content AS answer, m.payload AS answer_payload FROM mycelium.engine_summons s "
        "LEFT JOIN mycelium.messages m ON m.id = s.answer_id WHERE s.engine = 'sage' ORDER BY s.id"
    )


async def test_a_failing_model_is_reported_in_the_thread_not_invented(
    admin_conn, engines_hub, tmp_path: Path
):
    await persona_room(admin_conn)
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script))
    await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'julia', '@sage boom?')")

    async def answered():
        rows = await summons(admin_conn)
        return rows if rows and rows[0]["state"] == "done" else None

    (s,) = await eventually(answered)
    assert s["outcome"] == "failed" and s["error"] == "the model endpoint answered HTTP 503"
    assert s["answer"] == "@\u200bsage could not answer: the model endpoint answered HTTP 503"
    assert s["answer_payload"]["model_failed"] is True and "stance" not in s["answer_payload"]
    # nothing of a failed turn is remembered as if it had been said
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.persona_turns") == 0


async def test_a_persona_whose_model_fails_counts_as_silent_in_a_flow(
    admin_conn, engines_hub, agents, tmp_path
):
    await persona_room(admin_conn)
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    key, episode = await make_task(admin_conn, "atlas", "Persona drafts")
    await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script), MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="30")
    await coordinate(admin_conn, "atlas", key, "review @sage @julia: write the notes")
    agents(
        "julia",
        lambda text: "No draft to review. [[mycelium: stance=reject]]" if "· review ·" in text else None,
    )

    async def drafted():
        rows = await admin_conn.fetch(
            "SELECT * FROM mycelium.engine_trace WHERE room = 'atlas' ORDER BY turn"
        )
        return rows if rows else None

    (first, *_) = await eventually(drafted)
    assert first["step"] == "draft" and first["entry"]["stances"] == {"sage": "silent"}
    assert first["entry"]["failed"] == ["sage"]
    # the persona's failure is in the thread, and the reviewer was asked with nothing invented for it
    failure = await admin_conn.fetchrow(
        "SELECT content, payload FROM mycelium.messages WHERE episode = $1 AND sender = 'sage'", episode
    )
    assert "could not answer: the model timed out after 60 s" in failure["content"]
    assert failure["payload"]["model_failed"] is True


async def test_a_persona_answers_in_character_with_its_markers_lifted_and_remembers_across_workers(
    admin_conn, engines_hub, tmp_path
):
    await persona_room(admin_conn)
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    first = await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script))
    await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'julia', 'hello @sage')")

    async def answered(n: int):
        rows = await summons(admin_conn)
        return rows if len(rows) == n and all(r["state"] == "done" for r in rows) else None

    (s,) = await eventually(lambda: answered(1))
    assert s["outcome"] == "answered"
    assert s["answer"] == "Hello @\u200bjulia and @\u200b~nova!"
    assert s["answer_payload"]["action"] == "accept" and s["answer_payload"]["confidence"] == 0.7
    # the neutralised @ wakes and summons nobody
    woke = await admin_conn.fetchval("SELECT wakes FROM mycelium.messages WHERE id = $1", s["answer_id"])
    assert woke == []
    await first.stop()
    await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script))
    await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'nova', 'hello again @sage')")
    await eventually(lambda: answered(2))
    turns = await admin_conn.fetch("SELECT role, content FROM mycelium.persona_turns ORDER BY seq")
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant"]
    assert turns[0]["content"] == "julia: hello @sage" and turns[2]["content"] == "nova: hello again @sage"
    # what the next turn is given: the notes as the system prompt, then the turns in order
    q = query("persona_context")
    context = await admin_conn.fetchrow(q.sql, "atlas", "sage", 40)
    assert context["notes"] == "You are Sage. Be brief."
    assert [t["content"] for t in context["turns"]] == [t["content"] for t in turns]


async def test_the_model_seam_refuses_to_invent(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(SCRIPT)
    model = ScriptedModel.from_file(script)
    assert (await model.complete("", [{"role": "user", "content": "hello"}])).startswith("Hello")
    for text, error in (("boom", "HTTP 503"), ("unmatched", "no rule")):
        try:
            await model.complete("", [{"role": "user", "content": text}])
        except ModelError as exc:
            assert error in str(exc)
        else:
            raise AssertionError("a scripted model answered what its script does not say")
    assert isinstance(model_from_env({}), NoModel)
    try:
        await NoModel().complete("", [])
    except ModelError as exc:
        assert "MYCELIUM_LLM_URL" in str(exc)
    endpoint = model_from_env(
        {"MYCELIUM_LLM_URL": "http://127.0.0.1:9", "MYCELIUM_LLM_MODEL": "m", "MYCELIUM_LLM_TIMEOUT": "2"}
    )
    try:
        await endpoint.complete("sys", [{"role": "user", "content": "hi"}])
    except ModelError as exc:
        assert "could not be reached" in str(exc)
    else:
        raise AssertionError("an unreachable endpoint answered")


async def test_a_persona_never_writes_where_the_floor_does_not_admit_it(admin_conn, engines_hub, tmp_path):
    await persona_room(admin_conn)
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    key, episode = await make_task(admin_conn, "atlas", "Floored")
    await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script))
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: x")

    async def nova_has_the_floor():
        f = await admin_conn.fetchrow("SELECT speakers FROM mycelium.floors WHERE episode = $1", episode)
        return f is not None and list(f["speakers"]) == ["nova"]
    await eventually(nova_has_the_floor)
    await admin_conn.execute("SELECT * FROM mycelium.reply('atlas', 'nova', 'hello @sage, thoughts?', NULL, $1)",
                             episode)
    (s,) = await eventually(lambda: answered_summons(admin_conn))
    assert s["outcome"] == "not_admitted" and s["answer_id"] is None
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE sender = 'sage'") == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.persona_turns") == 0


async def answered_summons(conn: asyncpg.Connection) -> list[asyncpg.Record] | None:
    rows = await summons(conn)
    return rows if rows and all(r["state"] == "done" for r in rows) else None


async def test_behind_the_token_gate_a_persona_answers_in_a_private_room(admin_conn, engine_workers, tmp_path: Path):
    """The engines loop acts as the hub itself: with the gate closed, a private room's summons,
    notes and turns are as visible to it as a public room's (a session that declares no principal
    would see none of them)."""
    await admin_conn.execute("SELECT mycelium.create_room('vault', NULL, NULL, false, 'julia', '{nova}', 'julia')")
    await admin_conn.execute(
        "SELECT * FROM mycelium.create_engine('vault', 'sage', 'persona', 'a careful reviewer', 'julia')")
    await admin_conn.execute(
        "SELECT * FROM mycelium.write_memory('vault', 'agents/sage/notes', '\"You are Sage.\"', 'julia')")
    await admin_conn.execute("SELECT * FROM mycelium.write_setting('auth.gate', 'true', '', 'ops')")
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    engine_workers(MYCELIUM_MODEL_SCRIPT=str(script)).wait_ready()
    await admin_conn.execute("SELECT * FROM mycelium.post_message('vault', 'julia', '@sage hello there')")

    async def answered():
        row = await admin_conn.fetchrow(
            "SELECT s.state, s.outcome, m.content FROM mycelium.engine_summons s "
            "LEFT JOIN mycelium.messages m ON m.id = s.answer_id WHERE s.room = 'vault'")
        return row if row and row["state"] == "done" else None

    done = await eventually(answered)
    assert done["outcome"] == "answered" and done["content"].startswith("Hello"), dict(done)


@pytest.mark.slow
async def test_a_persona_whose_model_takes_its_time_holds_up_no_run(admin_conn, engines_hub, agents, tmp_path):
    """Summons are answered in tasks of their own: while the one worker waits on a slow model for a
    persona's turn, a flow it runs in another thread goes on to its close."""
    await persona_room(admin_conn)
    script = tmp_path / "script.yaml"
    script.write_text('rules:\n  - when: "ponder"\n    handle: sage\n    delay: 12\n    reply: "Pondered."\n')
    await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script), MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="30")
    await admin_conn.execute("SELECT * FROM mycelium.post_message('atlas', 'julia', '@sage ponder this')")

    async def pondering():
        rows = await summons(admin_conn)
        return rows if rows and rows[0]["taken_by"] is not None else None

    await eventually(pondering)
    key, episode = await make_task(admin_conn, "atlas", "Quick review")
    agents("nova", lambda text: "A draft." if "· draft ·" in text else None)
    agents("julia", lambda text: "Fine. [[mycelium: stance=accept]]" if "· review ·" in text else None)
    await coordinate(admin_conn, "atlas", key, "review @nova @julia: the notes")

    async def closed():
        r = await admin_conn.fetchrow("SELECT state FROM mycelium.engine_runs WHERE episode = $1", episode)
        return r if r is not None and r["state"] != "open" else None

    assert (await eventually(closed, timeout=30))["state"] == "resolved"
    (s,) = await summons(admin_conn)
    assert s["state"] == "pending"  # the persona's model is still at it

    async def answered():
        rows = await summons(admin_conn)
        return rows if rows and rows[0]["state"] == "done" else None

    (s,) = await eventually(answered, timeout=40)
    assert s["outcome"] == "answered" and s["answer"] == "Pondered."
