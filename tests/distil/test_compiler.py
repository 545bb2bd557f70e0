"""The task compiler on real `mycelium worker` processes with a scripted model: an agreement becomes
work/ rows part-of the task with their assignees and filed notices, the raw agreement when the model
cannot compile it (and the thread says so); two workers share many jobs and file each once; a worker
killed mid-job, or one that lost its lease to another, files nothing twice."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest

from tests.distil.conftest import (
    compiled,
    converge,
    converged_task,
    eventually,
    filed_notices,
    filed_rows,
    job_of,
    make_task,
    open_run,
    script,
    setup_room,
)

pytestmark = pytest.mark.slow

TASK_LINES = "- [ ] Invoice the customer at 20 @julia\n- [ ] Ship it within 2 days @Nova\n- [ ] Tell @mallory\nDone."
RULES = [
    {"when": "price = 99", "fail": "the model endpoint answered HTTP 503"},
    {"when": "price = 55", "reply": "I would rather not."},
    {"when": "Agreed terms:\n- deadline = 2\n- price = 20\nParticipants[^\n]*@julia, @nova", "reply": TASK_LINES},
]


async def test_an_agreement_becomes_rows_part_of_the_task_with_assignees_and_filed_notices(
    admin_conn, compile_workers, client, tmp_path
):
    await setup_room(admin_conn)
    key, episode, run = await converged_task(admin_conn, "Price the order", {"price": 20, "deadline": 2})
    task_before = await admin_conn.fetchrow("SELECT version, meta FROM mycelium.memories WHERE key = $1", key)
    compile_workers(MYCELIUM_MODEL_SCRIPT=script(tmp_path, RULES)).wait_ready()
    job = await compiled(admin_conn, run)
    assert (job["source"], job["note"], job["attempts"]) == ("model", "untagged: @mallory (not participants)", 1)

    rows = await filed_rows(admin_conn)
    assert [(r["key"], r["meta"].get("assignee"), r["meta"]["part-of"]) for r in rows] == [
        ("work/invoice-the-customer-at-20", "julia", key),
        ("work/ship-it-within-2-days", "nova", key),
        ("work/tell", None, key),  # an invented handle is never an assignee
    ]
    assert all(r["meta"]["status"] == "open" and "owner" not in r["meta"] for r in rows)
    notices = await filed_notices(admin_conn)
    assert [(n["payload"]["key"], n["payload"]["assignee"]) for n in notices] == [
        (r["key"], r["meta"].get("assignee")) for r in rows]
    # the task itself is untouched: no status, no lease written
    assert await admin_conn.fetchrow("SELECT version, meta FROM mycelium.memories WHERE key = $1", key) == task_before
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.assignments") == 0

    said = await admin_conn.fetchrow(
        "SELECT content, payload FROM mycelium.messages WHERE sender = 'aligner' AND episode = $1", episode)
    assert said["content"].startswith(f"Filed 3 tasks from the agreement, part of {key}: "
                                      "work/invoice-the-customer-at-20 for julia")
    assert said["payload"]["compiled"]["tasks"] == [r["key"] for r in rows]

    short_id = await admin_conn.fetchval("SELECT short_id FROM mycelium.engine_runs WHERE id = $1", run)
    record = await admin_conn.fetchrow(
        "SELECT value ->> 'text' AS text, meta FROM mycelium.memories WHERE key = $1", f"log/episodes/{short_id}")
    assert ("- work: `work/invoice-the-customer-at-20`, `work/ship-it-within-2-days`, `work/tell`\n- within: "
            in record["text"])
    assert record["meta"]["work"] == [r["key"] for r in rows]
    (summary,) = (await client.get("/api/rooms/atlas/episodes")).json()["episodes"]
    assert summary["tasks"] == [r["key"] for r in rows]
    detail = (await client.get(f"/api/rooms/atlas/episodes/{short_id}")).json()
    assert detail["tasks"] == summary["tasks"]


async def test_a_model_that_cannot_compile_leaves_the_raw_agreement_as_the_rows(
    admin_conn, compile_workers, tmp_path
):
    await setup_room(admin_conn)
    failing = await converged_task(admin_conn, "Failing model", {"price": 99, "colour": "teal"})
    wordy = await converged_task(admin_conn, "Wordy model", {"price": 55}, summon=2)
    compile_workers(MYCELIUM_MODEL_SCRIPT=script(tmp_path, RULES)).wait_ready()
    for (_key, episode, run), note in ((failing, "scripted:model.json: the model endpoint answered HTTP 503"),
                                      (wordy, "scripted:model.json answered with no task line")):
        job = await compiled(admin_conn, run)
        assert (job["source"], job["note"]) == ("raw", note)
        said = await admin_conn.fetchval(
            "SELECT content FROM mycelium.messages WHERE sender = 'aligner' AND episode = $1", episode)
        assert f"The model did not compile the agreement ({note}), so each agreed term is a row" in said
    by_parent = Counter()
    for r in await filed_rows(admin_conn):
        by_parent[r["meta"]["part-of"]] += 1
        assert "assignee" not in r["meta"]  # nobody is made up for a raw term
    assert by_parent == {failing[0]: 2, wordy[0]: 1}
    assert [r["text"] for r in await admin_conn.fetch(
        "SELECT text FROM mycelium.compiled_tasks ORDER BY run_id, line")] == ["colour=teal", "price=99", "price=55"]


async def test_with_no_model_at_all_the_raw_agreement_is_filed_and_the_thread_says_why(
    admin_conn, compile_workers
):
    await setup_room(admin_conn)
    key, episode, run = await converged_task(admin_conn, "No model", {"price": 20, "deadline": "2 days"})
    compile_workers().wait_ready()
    job = await compiled(admin_conn, run)
    assert job["source"] == "raw" and "no model is configured" in job["note"]
    assert [(r["key"], r["meta"]["part-of"]) for r in await filed_rows(admin_conn)] == [
        ("work/deadline-2-days", key), ("work/price-20", key)]
    said = await admin_conn.fetchval(
        "SELECT content FROM mycelium.messages WHERE sender = 'aligner' AND episode = $1", episode)
    assert "The model did not compile the agreement (none: no model is configured" in said


async def test_two_workers_share_thirty_agreements_and_file_each_once(admin_conn, compile_workers, tmp_path):
    await setup_room(admin_conn)
    rules = [{"when": "Agreed terms", "delay": 0.1, "reply": "- [ ] Invoice @julia\n- [ ] Ship @nova"}]
    model = script(tmp_path, rules)
    workers = [compile_workers(MYCELIUM_MODEL_SCRIPT=model) for _ in range(2)]
    for w in workers:
        w.wait_ready()
    runs = []
    for i in range(30):
        key, episode = await make_task(admin_conn, "atlas", f"Order {i}")
        runs.append((key, await open_run(admin_conn, "atlas", key, episode, summon=i + 1)))
    async with admin_conn.transaction():  # the agreements land together
        for _, run in runs:
            await converge(admin_conn, "atlas", run, {"price": 20})

    async def all_done():
        return await admin_conn.fetchval("SELECT count(*) FROM mycelium.compile_jobs WHERE state = 'done'") == 30

    await eventually(all_done, timeout=120, step=0.2)
    rows = await filed_rows(admin_conn)
    assert len(rows) == 60 and len({r["key"] for r in rows}) == 60
    per_task = Counter(r["meta"]["part-of"] for r in rows)
    assert per_task == {key: 2 for key, _ in runs}
    assert Counter(r["meta"]["assignee"] for r in rows) == {"julia": 30, "nova": 30}
    assert len(await filed_notices(admin_conn)) == 60
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.compiled_tasks") == 60
    jobs = await admin_conn.fetch("SELECT taken_by, attempts FROM mycelium.compile_jobs")
    assert {j["attempts"] for j in jobs} == {1}
    by_pid = Counter(j["taken_by"].split(":")[1] for j in jobs)
    assert set(by_pid) == {str(w.proc.pid) for w in workers}, by_pid


async def held_by(admin_conn, run: int, pid: int):
    async def check():
        j = await job_of(admin_conn, run)
        return j if j is not None and j["taken_by"] and j["taken_by"].split(":")[1] == str(pid) else None

    return await eventually(check)


async def test_a_worker_killed_mid_job_is_replaced_and_nothing_is_filed_twice(
    admin_conn, compile_workers, tmp_path
):
    await setup_room(admin_conn)
    slow = script(tmp_path, [{"when": "Agreed terms", "delay": 60, "reply": "- [ ] Too late @julia"}], "slow.json")
    fast = script(tmp_path, [{"when": "Agreed terms", "reply": "- [ ] Invoice @julia\n- [ ] Ship @nova"}])
    first = compile_workers(MYCELIUM_MODEL_SCRIPT=slow, MYCELIUM_COMPILE_LEASE_SECONDS="2")
    first.wait_ready()
    key, _, run = await converged_task(admin_conn, "Survive a crash", {"price": 20})
    await held_by(admin_conn, run, first.proc.pid)
    first.kill()  # SIGKILL in the middle of the model's answer: the lease stays until it runs out
    assert await filed_rows(admin_conn) == []
    second = compile_workers(MYCELIUM_MODEL_SCRIPT=fast, MYCELIUM_COMPILE_LEASE_SECONDS="2")
    second.wait_ready()
    job = await compiled(admin_conn, run)
    assert job["attempts"] == 2 and job["taken_by"].split(":")[1] == str(second.proc.pid)
    assert [(r["key"], r["meta"]["part-of"]) for r in await filed_rows(admin_conn)] == [
        ("work/invoice", key), ("work/ship", key)]


async def test_a_worker_that_lost_its_lease_to_another_files_nothing(admin_conn, compile_workers, tmp_path):
    await setup_room(admin_conn)
    slow = script(tmp_path, [{"when": "Agreed terms", "delay": 5, "reply": "- [ ] Slow @julia"}], "slow.json")
    fast = script(tmp_path, [{"when": "Agreed terms", "reply": "- [ ] Fast @julia"}])
    first = compile_workers(MYCELIUM_MODEL_SCRIPT=slow, MYCELIUM_COMPILE_LEASE_SECONDS="1")
    first.wait_ready()
    _, _, run = await converged_task(admin_conn, "Two takers", {"price": 20})
    await held_by(admin_conn, run, first.proc.pid)
    second = compile_workers(MYCELIUM_MODEL_SCRIPT=fast, MYCELIUM_COMPILE_LEASE_SECONDS="1")
    second.wait_ready()
    job = await compiled(admin_conn, run)
    assert job["attempts"] == 2 and job["taken_by"].split(":")[1] == str(second.proc.pid)

    async def refused():  # the first one's answer came, and its filing was refused
        log = first.log.read_text()
        return re.search(rf"the compile job of run {run} is done, held by [^ ]+:{second.proc.pid}:", log) or None

    await eventually(refused, timeout=20)
    await asyncio.sleep(0.5)
    assert [r["key"] for r in await filed_rows(admin_conn)] == ["work/fast"]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.compiled_tasks") == 1


async def test_behind_the_token_gate_the_agreements_of_private_rooms_are_compiled_too(
    admin_conn, compile_workers, tmp_path
):
    """The workers read as the app role; with the gate closed a private room's rows are hidden from a
    session that declares no principal. The compile loop acts as the hub itself and sees them."""
    await admin_conn.execute("SELECT mycelium.create_room('vault', NULL, NULL, false, 'julia', '{nova}', 'julia')")
    await setup_room(admin_conn, "lobby")
    await admin_conn.execute(
        "SELECT * FROM mycelium.create_engine('vault', 'aligner', 'aligner', 'negotiates', 'julia')")
    await admin_conn.execute("SELECT * FROM mycelium.write_setting('auth.gate', 'true', '', 'ops')")
    key, _, run = await converged_task(admin_conn, "Secret pricing", {"price": 20}, room="vault")
    compile_workers(MYCELIUM_MODEL_SCRIPT=script(tmp_path, RULES)).wait_ready()
    job = await compiled(admin_conn, run, room="vault")
    assert job["source"] == "raw"  # (no rule for this agreement: the raw terms)
    assert [(r["key"], r["meta"]["part-of"]) for r in await filed_rows(admin_conn, "vault")] == [
        ("work/price-20", key)]
