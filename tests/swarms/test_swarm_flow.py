"""A swarm end to end on hubs' engines loops: the conductor's flow, worker turns in worktrees, the
parent resolved once."""

from __future__ import annotations

import subprocess

import asyncpg

from tests.engines.conftest import closed_run, eventually
from tests.swarms.conftest import TEAM_SCRIPT, scripted_command, start_swarm


async def test_a_swarm_of_three_scripted_workers_resolves_its_parent_exactly_once(
    admin_conn: asyncpg.Connection, engines_hub, tmp_path
):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    hub = await engines_hub(MYCELIUM_WORKER_COMMAND=scripted_command(tmp_path, TEAM_SCRIPT),
                            MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="30")
    swarm = await start_swarm(admin_conn, "Ship passkey login", ["ann", "bob", "cy"])
    assert [m["as"] for m in swarm["members"]] == ["worker", "worker", "worker"]
    key = swarm["key"]
    run = await closed_run(admin_conn, "atlas", swarm["episode"], timeout=60)
    assert run["state"] == "resolved", run["reason"]

    async def parent_resolved():
        return await admin_conn.fetchval(
            "SELECT state = 'resolved' FROM mycelium.assignments WHERE room = 'atlas' AND key = $1", key) or None
    await eventually(parent_resolved, timeout=60)
    parts = await admin_conn.fetch(
        "SELECT m.key, m.meta ->> 'assignee' AS assignee, a.state, a.note_by FROM mycelium.memories m "
        "JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key "
        "WHERE m.room = 'atlas' AND m.meta ->> 'part-of' = $1 ORDER BY m.key", key)
    assert [(p["key"], p["assignee"], p["state"], p["note_by"]) for p in parts] == [
        ("work/build-the-passkey-api", "bob", "resolved", "bob"),
        ("work/write-the-login-page", "cy", "resolved", "cy"),
    ]
    resolved = await admin_conn.fetch(
        "SELECT payload FROM mycelium.messages WHERE room = 'atlas' AND payload_type = 'notice' "
        "AND payload ->> 'subkind' = 'resolved' AND payload ->> 'key' = $1", key)
    assert len(resolved) == 1 and resolved[0]["payload"]["by"] == "ann"
    completions = await admin_conn.fetch(
        "SELECT engine, state, outcome FROM mycelium.engine_summons WHERE room = 'atlas' AND how = 'completed'")
    assert [tuple(c) for c in completions] == [("ann", "done", "answered")]
    # each part was written on its worker's own branch, in its own worktree
    repo = hub.settings.resolved_data_dir() / "workspaces" / "atlas" / "repo"
    for handle, slug in (("bob", "build-the-passkey-api"), ("cy", "write-the-login-page")):
        files = subprocess.run(["git", "ls-tree", "--name-only", f"swarm/{handle}"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.split()
        assert files == [f"{slug}.md"]
    wt = repo.parent / "worktrees"
    assert sorted(p.name for p in wt.iterdir() if p.is_dir()) == ["ann", "bob", "cy"]
    assert not (wt / "bob" / "write-the-login-page.md").exists()
    assert not (wt / "cy" / "build-the-passkey-api.md").exists()
