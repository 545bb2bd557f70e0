"""The vector indexer: memories written without a vector (through psql, or while the embedder was
away) get one. Every process may run it: each batch is claimed (``mycelium.claim_missing_vectors``,
a session advisory lock per memory held while it is embedded), so two indexers never embed the same
memory, and a vector is stored only for the version it was computed from."""

from __future__ import annotations

import asyncio

from mycelium.embed import Embedder
from mycelium.verbs import HUB_PROCESS, Verbs
from mycelium.workers.loop import Loop, LoopContext

BATCH = 32
IDLE_SECONDS = 2.0


async def catch_up_once(verbs: Verbs, embedder: Embedder, batch: int = BATCH) -> int:
    """Claim up to ``batch`` memories without a vector, embed and store them, give the claims back;
    how many got a vector. ``verbs`` must be on one connection: the claims are its session locks."""
    rows = await verbs.call(HUB_PROCESS, "claim_missing_vectors", batch=batch)
    if not rows:
        return 0
    try:
        vectors = await embedder.aembed([r["content"] for r in rows])
        stored = 0
        for row, vector in zip(rows, vectors, strict=True):
            if await verbs.call(HUB_PROCESS, "set_embedding", room=row["room"], key=row["key"],
                                version=row["version"], embedding=vector):
                stored += 1
        return stored
    finally:
        # after the vectors are committed: an indexer that claims one of these next sees it stored
        await verbs.call(HUB_PROCESS, "release_vector_claims", rooms=[r["room"] for r in rows],
                         keys=[r["key"] for r in rows])


async def index_vectors(ctx: LoopContext) -> None:
    embedder = ctx.hub.embedder
    if embedder is None:
        raise RuntimeError("the indexer runs without an embedder")
    while True:
        done = await catch_up_once(ctx.verbs, embedder)
        ctx.succeeded()
        if done == 0:
            await asyncio.sleep(IDLE_SECONDS)


INDEXER = Loop("indexer", index_vectors, interval=IDLE_SECONDS, connection=True)
