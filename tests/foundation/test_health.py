"""/health says what this replica runs on."""

from __future__ import annotations

from mycelium.db.migrate import head_revision


async def test_health_reports_versions_migration_embedder_and_store(client, admin_conn):
    body = (await client.get("/health")).json()
    assert body["status"] == "ok"
    assert int(body["postgres"].split(".")[0]) >= 15
    assert body["pgvector"].startswith("0.")
    assert body["migration"] == head_revision() == body["migration_head"]
    assert body["embedder"] == {"name": "minilm-l6-v2-int8", "dimensions": 384}
    assert body["store_id"] == str(await admin_conn.fetchval("SELECT id FROM mycelium.store"))


async def test_unknown_routes_answer_json_404(client):
    r = await client.get("/api/nothing-here")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
