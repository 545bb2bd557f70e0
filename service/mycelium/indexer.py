"""The vector catch-up worker: memories written without a vector (through psql, or while the
embedder was away) get one. Safe on any number of replicas: a vector is stored only for the version
it was computed from, so two replicas embedding the same row at once waste work but never harm."""

from __future__ import annotations

import asyncio
import logging

from mycelium.db.queries import q
from mycelium.hub import Hub

log = logging.getLogger("mycelium.indexer")

BATCH = 32
IDLE_SECONDS = 2.0


async def catch_up_once(hub: Hub, batch: int = BATCH) -> int:
    """Embed up to ``batch`` memories that have no vector; returns how many got one."""
    if hub.embedder is None:
        return 0
    rows = await hub.db.fetch(q("memories_missing_vectors"), batch)
    if not rows:
        return 0
    vectors = await hub.embedder.aembed([r["text"] for r in rows])
    stored = 0
    for row, vector in zip(rows, vectors, strict=True):
        if await hub.db.fetchval(q("set_embedding"), row["room"], row["key"], row["version"], vector):
            stored += 1
    return stored


async def catch_up_vectors(hub: Hub) -> None:
    while True:
        try:
            done = await catch_up_once(hub)
        except Exception:
            log.exception("vector catch-up failed")
            done = 0
        if done == 0:
            await asyncio.sleep(IDLE_SECONDS)
