"""The compile job, in plain SQL: enqueued by the database in the transaction that closes a run
converged with an agreement (and only then), one per run; filed once, by the worker holding it, as the
run's engine, every row through the board's create_task."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tests.distil.conftest import (
    converge,
    converged_task,
    filed_notices,
    filed_rows,
    job_of,
    make_task,
    open_run,
    setup_room,
)

LINES = [{"text": "Invoice at 20", "assignee": "julia"}, {"text": "Ship within 2 days", "assignee": "nova"}]


async def test_a_converged_run_with_an_agreement_enqueues_one_job_in_its_own_transaction(admin_conn, db_dsn):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Price the order")
    run = await open_run(admin_conn, "atlas", key, episode)
    other = await asyncpg.connect(db_dsn)
    try:
        tx = admin_conn.transaction()
        await tx.start()
        await converge(admin_conn, "atlas", run, {"price": 20, "deadline": "2 days"})
        # inside the closing transaction the job is there; outside it, not yet
        assert (await job_of(admin_conn, run))["state"] == "pending"
        assert await job_of(other, run) is None
        await tx.rollback()
        assert await job_of(admin_conn, run) is None  # no agreement committed, no job
        await converge(admin_conn, "atlas", run, {"price": 20, "deadline": "2 days"})
        assert (await job_of(other, run))["state"] == "pending"
        # closing it again, or changing its agreement, makes no second job
        await converge(admin_conn, "atlas", run, {"price": 25})
        await admin_conn.execute("UPDATE mycelium.engine_runs SET assignments = assignments WHERE id = $1", run)
        assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.compile_jobs") == 1
    finally:
        await other.close()


@pytest.mark.parametrize(("state", "assignments"), [
    ("rejected", {"price": 20}),
    ("resolved", {"price": 20}),
    ("failed", {"price": 20}),
    ("converged", None),
    ("converged", {}),
])
async def test_no_job_without_a_converged_agreement(admin_conn, state, assignments):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "No deal")
    run = await open_run(admin_conn, "atlas", key, episode)
    await converge(admin_conn, "atlas", run, assignments, state)
    assert await job_of(admin_conn, run) is None
    # a run inserted already converged enqueues too, and only with an agreement
    inserted = await admin_conn.fetchval(
        "INSERT INTO mycelium.engine_runs (room, engine, kind, episode, task_key, summon_id, protocol, flow, state, "
        "assignments) VALUES ('atlas', 'aligner', 'aligner', $1, $2, 99, 'negotiate', '{}', $3, $4) RETURNING id",
        episode + "-x", key, state, assignments)
    assert await job_of(admin_conn, inserted) is None
    straight = await admin_conn.fetchval(
        "INSERT INTO mycelium.engine_runs (room, engine, kind, episode, task_key, summon_id, protocol, flow, state, "
        "assignments) VALUES ('atlas', 'aligner', 'aligner', $1, $2, 98, 'negotiate', '{}', 'converged', "
        "'{\"a\": 1}') RETURNING id", episode + "-y", key)
    assert (await job_of(admin_conn, straight))["state"] == "pending"


async def claim(conn: asyncpg.Connection, worker: str, lease: float = 30.0) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM mycelium.claim_compile_jobs($1, 10, $2)", worker, lease)


async def file(conn: asyncpg.Connection, run: int, worker: str, lines=LINES, source: str = "model",
               engine: str = "aligner") -> asyncpg.Record:
    async with conn.transaction():
        await conn.execute("SELECT mycelium.acting(NULL, $1, 'engine')", engine)
        return await conn.fetchrow(
            "SELECT * FROM mycelium.file_compiled_tasks('atlas', $1, $2, $3, $4, NULL)", run, worker, lines, source)


async def test_two_connections_filing_one_job_at_once_file_it_once(admin_conn, db_dsn):
    await setup_room(admin_conn)
    key, _, run = await converged_task(admin_conn, "Price the order", {"price": 20, "deadline": 2})
    task_before = await admin_conn.fetchrow("SELECT version, meta FROM mycelium.memories WHERE key = $1", key)
    (job,) = await claim(admin_conn, "w1")
    assert job["attempts"] == 1 and await claim(admin_conn, "w2") == []  # held: skipped
    conns = [await asyncpg.connect(db_dsn) for _ in range(2)]
    from mycelium.db.pool import setup_connection

    for c in conns:
        await setup_connection(c)
    try:
        results = await asyncio.gather(*(file(c, run, "w1") for c in conns), return_exceptions=True)
    finally:
        for c in conns:
            await c.close()
    done = [r for r in results if isinstance(r, asyncpg.Record)]
    refused = [r for r in results if isinstance(r, asyncpg.PostgresError)]
    assert len(done) == 1 and len(refused) == 1, results
    assert refused[0].sqlstate == "MY409" and "compile_not_held" in str(refused[0].detail)
    rows = await filed_rows(admin_conn)
    assert [r["key"] for r in rows] == ["work/invoice-at-20", "work/ship-within-2-days"]
    assert [(r["meta"]["part-of"], r["meta"]["assignee"]) for r in rows] == [(key, "julia"), (key, "nova")]
    assert all("owner" not in r["meta"] and r["meta"]["status"] == "open" for r in rows)
    notices = await filed_notices(admin_conn)
    assert [(n["payload"]["key"], n["payload"]["assignee"]) for n in notices] == [
        ("work/invoice-at-20", "julia"), ("work/ship-within-2-days", "nova")]
    # filing it again (done) or as another worker files nothing
    for worker in ("w1", "w2"):
        with pytest.raises(asyncpg.PostgresError) as again:
            await file(admin_conn, run, worker)
        assert again.value.sqlstate == "MY409"
    assert len(await filed_rows(admin_conn)) == 2
    # the parent task's status and lease are as they were; the new rows hold no lease either
    assert await admin_conn.fetchrow("SELECT version, meta FROM mycelium.memories WHERE key = $1", key) == task_before
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.assignments") == 0
    assert await admin_conn.fetch(
        "SELECT line, key FROM mycelium.compiled_tasks ORDER BY line") == [
        (1, "work/invoice-at-20"), (2, "work/ship-within-2-days")]


async def test_only_the_run_s_engine_files_and_a_line_needs_text(admin_conn):
    await setup_room(admin_conn)
    await admin_conn.execute("SELECT * FROM mycelium.create_engine('atlas', 'other', 'aligner', '', 'julia')")
    _, _, run = await converged_task(admin_conn, "Price the order", {"price": 20})
    await claim(admin_conn, "w1")
    for lines, engine, status in (
        (LINES, "other", "MY403"),
        ([], "aligner", "MY422"),
        ([{"text": "  "}], "aligner", "MY422"),
        ([{"text": "Pay", "assignee": "not a handle!"}], "aligner", "MY422"),
    ):
        with pytest.raises(asyncpg.PostgresError) as refused:
            await file(admin_conn, run, "w1", lines, engine=engine)
        assert refused.value.sqlstate == status
    assert await filed_rows(admin_conn) == [] and (await job_of(admin_conn, run))["state"] == "pending"
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.compiled_tasks") == 0


async def test_a_job_whose_worker_stopped_is_taken_again_five_times_at_most(admin_conn):
    await setup_room(admin_conn)
    _, _, run = await converged_task(admin_conn, "Price the order", {"price": 20})
    for attempt in range(1, 6):
        (job,) = await claim(admin_conn, f"w{attempt}", lease=0.01)
        assert job["attempts"] == attempt
        await asyncio.sleep(0.02)
    assert await claim(admin_conn, "w6") == []
    # the last taker may still file it (nobody took it over)
    assert (await file(admin_conn, run, "w5"))["state"] == "done"


async def test_a_compile_of_a_task_that_is_gone_files_loose_rows(admin_conn):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Price the order")
    run = await open_run(admin_conn, "atlas", key, episode)
    await admin_conn.execute("SELECT * FROM mycelium.delete_memory('atlas', $1, 'julia')", key)
    await converge(admin_conn, "atlas", run, {"price": 20})
    await claim(admin_conn, "w1")
    await file(admin_conn, run, "w1", [{"text": "price=20"}], "raw")
    (row,) = await filed_rows(admin_conn)
    assert row["key"] == "work/price-20" and "part-of" not in row["meta"] and "assignee" not in row["meta"]
    assert await admin_conn.fetchval("SELECT parent FROM mycelium.compiled_tasks") is None
    said = await admin_conn.fetchval(  # in the room's channel: the thread went with its row
        "SELECT content FROM mycelium.messages WHERE sender = 'aligner' AND episode = mycelium.live_episode('atlas')")
    assert "is gone: the rows are loose" in said and "work/price-20" in said
