"""Worker turns on a hub's engines loop: worktrees that never touch each other, the room's turn
limit, the write-only worker (tools off: the hub's model answers, nothing runs), and a command that
fails: recorded, retried by the summons' rules, closed as failed with its reason in the thread."""

from __future__ import annotations

import json

import asyncpg
import pytest

from tests.engines.conftest import eventually
from tests.swarms.conftest import scripted_command


async def room_with(conn: asyncpg.Connection, *workers: str) -> None:
    await conn.execute("SELECT mycelium.create_room('atlas')")
    for w in workers:
        await conn.execute("SELECT mycelium.create_engine('atlas', $1, 'worker', '', 'julia')", w)


async def file_for(conn: asyncpg.Connection, title: str, handle: str) -> str:
    return await conn.fetchval("SELECT key FROM mycelium.create_task('atlas', $1, 'julia', NULL, $2)", title, handle)


async def closed(conn: asyncpg.Connection, count: int, timeout: float = 30) -> list[asyncpg.Record]:
    async def all_done():
        rows = await conn.fetch("SELECT * FROM mycelium.engine_summons WHERE kind = 'worker' ORDER BY id")
        return rows if len(rows) >= count and all(r["state"] == "done" for r in rows) else None
    return await eventually(all_done, timeout=timeout)


async def git(tree, *args: str) -> str:
    import subprocess
    return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout


async def test_two_workers_at_once_write_the_same_file_each_in_its_own_worktree(admin_conn, engines_hub, tmp_path):
    await room_with(admin_conn, "bob", "cy")
    script = {"*": [{"wake": "filed", "sleep": 0.5, "write": {"shared.md": "{handle} was here\n"},
                     "say": "Wrote shared.md. [[done]]"}]}
    hub = await engines_hub(MYCELIUM_WORKER_COMMAND=scripted_command(tmp_path, script))
    await file_for(admin_conn, "Bob's part", "bob")
    await file_for(admin_conn, "Cy's part", "cy")
    await closed(admin_conn, 2)
    base = hub.settings.resolved_data_dir() / "workspaces" / "atlas"
    for handle in ("bob", "cy"):
        tree = base / "worktrees" / handle
        assert (tree / "shared.md").read_text() == f"{handle} was here\n"
        assert (await git(tree, "branch", "--show-current")).strip() == f"swarm/{handle}"
        assert await git(base / "repo", "show", f"swarm/{handle}:shared.md") == f"{handle} was here\n"
        log = await git(base / "repo", "log", "--format=%an %s", f"swarm/{handle}")
        assert log.splitlines()[0].startswith(f"{handle} ")
    assert await git(base / "repo", "ls-tree", "--name-only", "main") == ""  # main is untouched


async def test_past_its_turns_in_a_room_a_worker_declines_saying_why(admin_conn, engines_hub, tmp_path):
    await room_with(admin_conn, "bob")
    await admin_conn.execute("SELECT mycelium.write_setting('workers.max_turns_per_room', '1', 'atlas', 'ops')")
    script = {"bob": [{"say": "Here I am."}]}
    await engines_hub(MYCELIUM_WORKER_COMMAND=scripted_command(tmp_path, script))
    await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', '@bob one')")
    await closed(admin_conn, 1)
    await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', '@bob two')")
    first, second = await closed(admin_conn, 2)
    assert (first["outcome"], second["outcome"]) == ("answered", "refused")
    said = await admin_conn.fetch("SELECT content FROM mycelium.messages WHERE sender = 'bob' ORDER BY position")
    assert [m["content"] for m in said] == [
        "Here I am.",
        "@bob has taken its 1 turns in this room (workers.max_turns_per_room); it answers no more here."]


async def test_with_tools_off_a_worker_is_write_only_the_model_answers_and_nothing_runs(
    admin_conn, engines_hub, tmp_path
):
    await room_with(admin_conn, "bob")
    await admin_conn.execute("SELECT mycelium.write_setting('workers.tools', 'false', 'atlas', 'ops')")
    model = tmp_path / "model.json"
    model.write_text(json.dumps([{"when": "was filed for you", "reply": "Planned it. [[done]]"}]))
    ran = tmp_path / "ran"
    command = f"sh -c 'touch {ran}'"
    hub = await engines_hub(MYCELIUM_WORKER_COMMAND=command, MYCELIUM_MODEL_SCRIPT=str(model))
    key = await file_for(admin_conn, "Plan the API", "bob")
    (s,) = await closed(admin_conn, 1)
    assert s["outcome"] == "answered"
    reply = await admin_conn.fetchrow("SELECT content, payload FROM mycelium.messages WHERE id = $1", s["answer_id"])
    assert reply["content"] == "Planned it. [[done]]" and reply["payload"]["model"] == "scripted:model.json"
    state = await admin_conn.fetchval("SELECT state FROM mycelium.assignments WHERE room = 'atlas' AND key = $1", key)
    assert state == "resolved"
    assert not ran.exists() and not (hub.settings.resolved_data_dir() / "workspaces").exists()


@pytest.mark.slow
async def test_a_failing_command_is_retried_by_the_rules_then_closed_as_failed_in_the_thread(
    admin_conn, engines_hub, tmp_path
):
    await room_with(admin_conn, "bob")
    script = {"bob": [{"exit": 5, "stderr": "the disk is full"}]}
    await engines_hub(MYCELIUM_WORKER_COMMAND=scripted_command(tmp_path, script))
    key = await file_for(admin_conn, "Build the API", "bob")
    (s,) = await closed(admin_conn, 1, timeout=60)
    assert (s["outcome"], s["attempts"]) == ("failed", 5)
    assert s["error"].endswith("exit code 5: the disk is full")
    said = await admin_conn.fetchrow("SELECT content, episode FROM mycelium.messages WHERE id = $1", s["answer_id"])
    assert said["content"].startswith("✗ bob could not answer this after 5 attempt(s) (TurnFailed: ")
    episode = await admin_conn.fetchval("SELECT episode FROM mycelium.memories WHERE room = 'atlas' AND key = $1", key)
    assert said["episode"] == episode
    # nothing was made up: the row is held (claimed for the turn), not resolved
    state = await admin_conn.fetchval("SELECT state FROM mycelium.assignments WHERE room = 'atlas' AND key = $1", key)
    assert state == "held"
