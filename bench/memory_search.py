"""Memory search at scale: insert rate, search latency (room-filtered and not) and recall@10 against an
exact scan measured in the same run.

Vectors have the structure of real embeddings: a few thousand generated sentences are embedded with
the hub's model, and every memory's vector is one of them perturbed with Gaussian noise (then
normalised), so rooms hold clusters of related memories, as real notes do. Queries are other
generated sentences embedded with the model. (Uniform random 384-d vectors would make any ANN index
look broken.)

    python bench/memory_search.py                 # 100,000 memories in 10 rooms
    python bench/memory_search.py --n 20000 --queries 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path

import asyncpg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _db import bench_database
from _report import machine, stamp, table, write_section
from mycelium.db.pool import setup_connection
from mycelium.embed import make_embedder

SUBJECTS = ["the billing service", "our onboarding flow", "the search index", "the mobile app", "payroll",
            "the data pipeline", "customer support", "the release train", "the design system", "security review",
            "the warehouse robots", "quarterly planning", "the hiring loop", "the API gateway", "the cafeteria menu"]
VERBS = ["keeps failing after", "needs an owner for", "was redesigned to simplify", "slowed down because of",
         "should be documented before", "got a budget increase for", "is blocked by", "was praised for",
         "must be migrated ahead of", "raised questions about"]
OBJECTS = ["the holiday freeze", "the new pricing tiers", "a flaky dependency", "the audit in March",
           "the European launch", "last week's outage", "the accessibility fixes", "the vendor contract",
           "the caching layer", "the quarterly report", "the intern projects", "the database upgrade"]


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


async def load(conn: asyncpg.Connection, rooms: list[str], vectors: np.ndarray, texts: list[str],
               batch: int) -> float:
    n = len(texts)
    start = time.perf_counter()
    for lo in range(0, n, batch):
        rows = [(rooms[i % len(rooms)], f"notes/{i}", {"text": texts[i]}, "bench", vectors[i].tolist())
                for i in range(lo, min(n, lo + batch))]
        async with conn.transaction():
            await conn.executemany(
                "SELECT FROM mycelium.write_memory($1, $2, $3, $4, p_embedding => $5::vector)", rows)
    return n / (time.perf_counter() - start)


async def timed(conn: asyncpg.Connection, sql: str, *args: object) -> tuple[float, list[str]]:
    t = time.perf_counter()
    rows = await conn.fetch(sql, *args)
    return (time.perf_counter() - t) * 1000, [r["key"] for r in rows]


async def run(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()[0]
    rng = random.Random(42)
    nrng = np.random.default_rng(42)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    embedder = make_embedder("minilm", url=None, model="", api_key=None)
    assert embedder is not None

    t = time.perf_counter()
    bases_text = sorted({sentence(rng) for _ in range(args.bases * 3)})[: args.bases]
    bases = embedder.embed_array(bases_text)
    query_text = [sentence(rng) + " What do we know?" for _ in range(args.queries)]
    queries = embedder.embed_array(query_text)
    embed_seconds = time.perf_counter() - t

    pick = nrng.integers(0, len(bases), size=args.n)
    vectors = bases[pick] + nrng.normal(0, args.noise, size=(args.n, bases.shape[1])).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = [f"{bases_text[b]} (note {i})" for i, b in enumerate(pick)]
    rooms = [f"room-{k}" for k in range(args.rooms)]

    async with bench_database("bench_memory_search") as (dsn, _):
        conn = await asyncpg.connect(dsn)
        await setup_connection(conn)
        try:
            for room in rooms:
                await conn.execute("SELECT mycelium.create_room($1)", room)

            # 1. write path with the HNSW index maintained, on a slice
            slice_n = min(args.indexed_slice, args.n)
            rate_indexed = await load(conn, rooms, vectors[:slice_n], texts[:slice_n], args.batch)
            # 2. bulk of the load through the same verb, index dropped, then built once
            await conn.execute("DROP INDEX mycelium.memories_embedding")
            rate_bulk = await load_rest(conn, rooms, vectors, texts, slice_n, args.batch)
            await conn.execute("SET maintenance_work_mem = '1GB'")
            t = time.perf_counter()
            await conn.execute(
                "CREATE INDEX memories_embedding ON mycelium.memories USING hnsw (embedding vector_cosine_ops)")
            build_seconds = time.perf_counter() - t
            await conn.execute("VACUUM ANALYZE mycelium.memories")

            await conn.execute("SET hnsw.iterative_scan = relaxed_order")
            await conn.execute("SET hnsw.ef_search = 100")
            q_vec = "SELECT key FROM mycelium.memories WHERE room = $1 ORDER BY embedding <=> $2 LIMIT 10"
            q_all = "SELECT key FROM mycelium.memories ORDER BY embedding <=> $1 LIMIT 10"
            q_exact_room = ("SELECT key FROM mycelium.memories WHERE room = $1 "
                            "ORDER BY (embedding <=> $2) + 0 LIMIT 10")
            q_exact_all = "SELECT key FROM mycelium.memories ORDER BY (embedding <=> $1) + 0 LIMIT 10"
            q_verb = "SELECT key FROM mycelium.search_memories($1, $2, $3, 10)"

            results: dict[str, list[float]] = {k: [] for k in ("hnsw_room", "hnsw_all", "exact_room", "exact_all",
                                                             "verb_room")}
            recall_room: list[float] = []
            recall_all: list[float] = []
            for i, q in enumerate(queries):
                room = rooms[i % len(rooms)]
                vec = q.tolist()
                warm = i < 10
                ms, got = await timed(conn, q_vec, room, vec)
                ms_e, exact = await timed(conn, q_exact_room, room, vec)
                ms_a, got_a = await timed(conn, q_all, vec)
                ms_ea, exact_a = await timed(conn, q_exact_all, vec)
                ms_v, _ = await timed(conn, q_verb, room, vec, query_text[i])
                if warm:
                    continue
                results["hnsw_room"].append(ms)
                results["exact_room"].append(ms_e)
                results["hnsw_all"].append(ms_a)
                results["exact_all"].append(ms_ea)
                results["verb_room"].append(ms_v)
                recall_room.append(len(set(got) & set(exact)) / max(1, len(exact)))
                recall_all.append(len(set(got_a) & set(exact_a)) / max(1, len(exact_a)))
        finally:
            await conn.close()

    load_after = os.getloadavg()[0]
    rows = [
        ["HNSW, room filter (iterative scan, ef_search 100)", f"{pct(results['hnsw_room'], 50):.1f}",
         f"{pct(results['hnsw_room'], 95):.1f}", f"{statistics.mean(recall_room):.3f}"],
        ["exact scan, room filter (the limit)", f"{pct(results['exact_room'], 50):.1f}",
         f"{pct(results['exact_room'], 95):.1f}", "1.000"],
        ["HNSW, all rooms", f"{pct(results['hnsw_all'], 50):.1f}", f"{pct(results['hnsw_all'], 95):.1f}",
         f"{statistics.mean(recall_all):.3f}"],
        ["exact scan, all rooms (the limit)", f"{pct(results['exact_all'], 50):.1f}",
         f"{pct(results['exact_all'], 95):.1f}", "1.000"],
        ["`mycelium.search_memories` (vector + full text fused), room filter",
         f"{pct(results['verb_room'], 50):.1f}", f"{pct(results['verb_room'], 95):.1f}", "n/a (fused ranking)"],
    ]
    md = "\n".join([
        f"## Memory search — {stamp()}",
        "",
        f"`python bench/memory_search.py --n {args.n} --rooms {args.rooms} --queries {args.queries}` on {machine()}.",
        f"{args.n:,} memories in {args.rooms} rooms; vectors are {args.bases:,} real MiniLM embeddings of generated",
        f"sentences, each memory one of them plus N(0, {args.noise}) noise per dimension, normalised; "
        f"{args.queries} query sentences",
        f"embedded with the same model ({embed_seconds:.1f} s to embed bases and queries). Latency is client wall "
        "time per query over a unix socket, after 10 warm-up queries; recall@10 is against the exact scan of the "
        f"same query in the same run. 1-minute load average: {load_before:.1f} at the start, "
        f"{load_after:.1f} at the end (2 cores; above ~1 other work shares them, and latencies inflate).",
        "",
        table(["query", "p50 ms", "p95 ms", "recall@10"], rows),
        "",
        table(["write path (`mycelium.write_memory`, batches of "
               f"{args.batch} per transaction)", "memories/s"], [
            [f"with the HNSW index maintained (first {min(args.indexed_slice, args.n):,})", f"{rate_indexed:,.0f}"],
            ["index dropped during the bulk load", f"{rate_bulk:,.0f}"],
            [f"HNSW build over {args.n:,} rows (maintenance_work_mem 1GB)", f"{build_seconds:.1f} s"],
        ]),
    ])
    print(md)
    if not args.no_write:
        write_section("memory_search", md)


async def load_rest(conn: asyncpg.Connection, rooms: list[str], vectors: np.ndarray, texts: list[str],
                    start: int, batch: int) -> float:
    n = len(texts)
    if start >= n:
        return float("nan")
    t = time.perf_counter()
    for lo in range(start, n, batch):
        rows = [(rooms[i % len(rooms)], f"notes/{i}", {"text": texts[i]}, "bench", vectors[i].tolist())
                for i in range(lo, min(n, lo + batch))]
        async with conn.transaction():
            await conn.executemany(
                "SELECT FROM mycelium.write_memory($1, $2, $3, $4, p_embedding => $5::vector)", rows)
    return (n - start) / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--rooms", type=int, default=10)
    p.add_argument("--bases", type=int, default=1500)
    p.add_argument("--noise", type=float, default=0.03)
    p.add_argument("--queries", type=int, default=210)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--indexed-slice", type=int, default=5000)
    p.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
