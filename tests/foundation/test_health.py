"""/health says what this replica runs on, what its background loops do, and who else runs loops."""

from __future__ import annotations

import asyncio

from litestar.testing import AsyncTestClient

from mycelium.api.app import create_app
from mycelium.db.migrate import head_revision
from mycelium.hub import Hub
from mycelium.workers.loop import Loop, LoopContext


async def test_health_reports_versions_migration_embedder_and_store(client, admin_conn):
    body = (await client.get("/health")).json()
    assert body["status"] == "ok" and body["problems"] == []
    assert int(body["postgres"].split(".")[0]) >= 15
    assert body["pgvector"].startswith("0.")
    assert body["migration"] == head_revision() == body["migration_head"]
    assert body["embedder"] == {"name": "minilm-l6-v2-int8", "dimensions": 384}
    assert body["store_id"] == str(await admin_conn.fetchval("SELECT id FROM mycelium.store"))
    fingerprint = await admin_conn.fetchval("SELECT mycelium.schema_fingerprint()")
    assert body["schema_fingerprint"] == fingerprint and len(fingerprint) == 64
    # a change to the schema changes it
    await admin_conn.execute("CREATE INDEX rooms_by_title ON mycelium.rooms (title)")
    assert (await client.get("/health")).json()["schema_fingerprint"] != fingerprint
    # this process runs no loops, and nobody else does either
    assert (body["loops"], body["worker"], body["workers"], body["leaders"]) == ([], None, [], {})


async def test_unknown_routes_answer_json_404(client):
    r = await client.get("/api/nothing-here")
    assert r.status_code == 404 and r.json()["error"] == "not_found"


async def test_a_failing_or_stuck_loop_makes_the_process_degraded_and_shows_in_the_deployment(db_dsn, settings_for):
    async def broken(ctx: LoopContext) -> None:
        raise PermissionError("mirror folder is read-only")

    async def hangs(ctx: LoopContext) -> None:
        ctx.succeeded()
        await asyncio.Event().wait()

    async def fine(ctx: LoopContext) -> None:
        while True:
            ctx.succeeded()
            await asyncio.sleep(0.05)

    loops = [Loop("broken", broken, interval=1.0), Loop("hangs", hangs, interval=0.1),
             Loop("fine", fine, interval=1.0, lead="test.health")]
    hub = Hub(settings_for(db_dsn, embedder="none"), loops=loops)
    async with AsyncTestClient(app=create_app(hub.settings, hub=hub)) as client:
        await asyncio.sleep(0.8)  # > 5 intervals of the hanging loop
        r = await client.get("/health")
        assert r.status_code == 200  # still serving: the status says what is wrong
        body = r.json()
        assert body["status"] == "degraded"
        broken_problem, stuck_problem = body["problems"]
        assert broken_problem.startswith("broken is failing (")
        assert broken_problem.endswith(" in a row): PermissionError: mirror folder is read-only")
        assert stuck_problem == "hangs is stuck: no success in 0.5 s"
        loops_now = {lp["loop"]: lp for lp in body["loops"]}
        assert loops_now["broken"]["state"] == "failing" and loops_now["broken"]["last_success_at"] is None
        assert loops_now["hangs"]["state"] == "running" and loops_now["hangs"]["stuck"] is True
        assert loops_now["fine"]["state"] == "running" and loops_now["fine"]["leader"] is True
        assert loops_now["fine"]["last_success_at"] is not None and not loops_now["fine"]["stuck"]
        me = body["worker"]
        assert me["kind"] == "hub" and me["heartbeat_error"] is None
        (listed,) = body["workers"]
        assert listed["worker_id"] == me["worker_id"] and listed["alive"] and listed["pid"] == me["pid"]
        assert {lp["loop"]: lp["state"] for lp in listed["loops"]} == {"broken": "failing", "hangs": "running",
                                                                        "fine": "running"}
        assert body["leaders"] == {"fine": me["worker_id"]}
