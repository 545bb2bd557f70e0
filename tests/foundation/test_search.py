"""Semantic search: a real model, pgvector, full text alongside, and vectors that follow the text."""

from __future__ import annotations

import asyncio

import pytest

from mycelium.verbs import verbs_on
from mycelium.workers.indexer import catch_up_once

TEXTS = {
    "pets/cat": "The cat sat on the mat and purred all afternoon.",
    "finance/q3": "Quarterly revenue rose by five percent on strong subscription sales.",
    "ops/deploy": "Deploy the service with a blue-green rollout behind the load balancer.",
    "food/pasta": "Boil the pasta in salted water until it is al dente.",
}


@pytest.fixture
async def filled(client):
    await client.post("/api/rooms", json={"name": "atlas"})
    items = [{"key": k, "value": v, "created_by": "ana", "tags": [k.split("/")[0]]} for k, v in TEXTS.items()]
    r = await client.post("/api/rooms/atlas/memory", json={"items": items})
    assert r.status_code == 201
    return client


async def search(client, query, **extra):
    r = await client.post("/api/rooms/atlas/memory/search", json={"query": query, **extra})
    assert r.status_code == 200, r.text
    return r.json()


async def test_the_paraphrase_ranks_above_unrelated_text(filled):
    result = await search(filled, "a kitten was lying on the rug")
    keys = [hit["memory"]["key"] for hit in result["results"]]
    assert keys[0] == "pets/cat"
    sims = {hit["memory"]["key"]: hit["similarity"] for hit in result["results"]}
    assert sims["pets/cat"] > sims["finance/q3"] + 0.3


async def test_search_honours_limit_tags_and_min_similarity(filled):
    assert len((await search(filled, "money", limit=2))["results"]) == 2
    only_ops = await search(filled, "how do we release software", tags_filter=["ops"])
    assert [h["memory"]["key"] for h in only_ops["results"]] == ["ops/deploy"]
    strict = await search(filled, "kitten on a rug", min_similarity=0.4)
    assert [h["memory"]["key"] for h in strict["results"]] == ["pets/cat"]
    assert strict["total"] == 1


async def test_full_text_finds_an_exact_rare_word(filled):
    result = await search(filled, "al dente")
    assert result["results"][0]["memory"]["key"] == "food/pasta"


async def test_bad_search_requests_are_refused(filled):
    for body in ({"query": ""}, {"query": "x", "limit": 0}, {"query": "x", "limit": 101},
                 {"query": "x", "min_similarity": 1.5}, {}):
        r = await filled.post("/api/rooms/atlas/memory/search", json=body)
        assert r.status_code == 422, body
    r = await filled.post("/api/rooms/nowhere/memory/search", json={"query": "x"})
    assert r.status_code == 404


async def test_the_room_filter_never_leaks_other_rooms(filled):
    await filled.post("/api/rooms", json={"name": "other"})
    await filled.post("/api/rooms/other/memory", json={"items": [
        {"key": "pets/dog", "value": "A kitten was lying on the rug.", "created_by": "x"}]})
    result = await search(filled, "a kitten was lying on the rug")
    assert all(hit["memory"]["room_name"] == "atlas" for hit in result["results"])


async def test_a_metadata_only_write_keeps_the_vector(filled, admin_conn):
    before = await admin_conn.fetchval("SELECT embedding::text FROM mycelium.memories WHERE key = 'pets/cat'")
    r = await filled.post("/api/rooms/atlas/memory", json={"items": [
        {"key": "pets/cat", "value": TEXTS["pets/cat"], "created_by": "bo", "meta": {"status": "reviewed"},
         "embed": False}]})
    assert r.status_code == 201 and r.json()[0]["version"] == 2
    after = await admin_conn.fetchval("SELECT embedding::text FROM mycelium.memories WHERE key = 'pets/cat'")
    assert after == before


async def test_a_vector_is_cleared_when_the_text_changes_without_one_and_the_indexer_restores_it(
        filled, admin_conn, hub):
    await admin_conn.execute(
        "SELECT * FROM mycelium.write_memory('atlas', 'pets/cat', '\"Dogs bark at the mailman every morning.\"', 'psql')")
    assert await admin_conn.fetchval(
        "SELECT embedding IS NULL FROM mycelium.memories WHERE key = 'pets/cat'")
    # a hub (another replica, here) catches up
    async with hub.db.acquire() as conn:
        assert await catch_up_once(verbs_on(conn), hub.embedder) >= 1
    assert await admin_conn.fetchval("SELECT embedding IS NOT NULL FROM mycelium.memories WHERE key = 'pets/cat'")
    result = await search(filled, "a dog barking at the postman")
    assert result["results"][0]["memory"]["key"] == "pets/cat"


async def test_a_memory_written_in_psql_becomes_searchable(filled, admin_conn, hub):
    await admin_conn.execute("""INSERT INTO mycelium.memories (room, key, value, created_by)
                                VALUES ('atlas', 'by/hand', '{"text": "Photosynthesis turns light into sugar."}', 'dba')""")
    for _ in range(3):
        async with hub.db.acquire() as conn:
            if await catch_up_once(verbs_on(conn), hub.embedder) == 0:
                break
        await asyncio.sleep(0)
    result = await search(filled, "how plants make food from sunlight")
    assert result["results"][0]["memory"]["key"] == "by/hand"


@pytest.mark.slow
async def test_a_room_filtered_hnsw_scan_is_never_under_filled(admin_conn):
    """A room whose rows are all farther from the query than another room's must still get its own
    top 10 from the HNSW index (an ordinary filtered HNSW scan returns almost nothing here)."""
    await admin_conn.execute("SELECT mycelium.create_room('near'), mycelium.create_room('far')")
    for room, sign in (("near", "1"), ("far", "(CASE WHEN d % 2 = 0 THEN 1 ELSE -1 END)")):
        await admin_conn.execute(
            f"""INSERT INTO mycelium.memories (room, key, value, created_by, embedding)
                SELECT '{room}', '{room}' || i, '{{"text": "x"}}', 'gen',
                       (SELECT array_agg({sign} * (0.5 + random()))::real[]
                        FROM generate_series(1, 384 + i * 0) d)::vector
                FROM generate_series(1, 1500) i""")
    await admin_conn.execute("ANALYZE mycelium.memories")
    query = "array_fill(1::real, ARRAY[384])::vector"
    plan = "\n".join(r[0] for r in await admin_conn.fetch(
        f"EXPLAIN SELECT key FROM mycelium.memories WHERE room = 'far' ORDER BY embedding <=> {query} LIMIT 10"))
    assert "memories_embedding" in plan
    got = await admin_conn.fetch(f"SELECT key FROM mycelium.search_memories('far', {query}, NULL, 10)")
    plain = await admin_conn.fetch(
        f"SELECT key FROM mycelium.memories WHERE room = 'far' ORDER BY embedding <=> {query} LIMIT 10")
    assert len(plain) < 10  # the same scan without iterative scans under-fills: the setting matters
    exact = await admin_conn.fetch(  # "+ 0": an ordering no index can serve, so an exact scan
        f"SELECT key FROM mycelium.memories WHERE room = 'far' ORDER BY (embedding <=> {query}) + 0 LIMIT 10")
    assert len(got) == 10
    assert len({r["key"] for r in got} & {r["key"] for r in exact}) >= 9
    settings = await admin_conn.fetchval(
        """SELECT proconfig FROM pg_proc WHERE proname = 'search_memories'
           AND pronamespace = 'mycelium'::regnamespace""")
    assert "hnsw.iterative_scan=relaxed_order" in settings
