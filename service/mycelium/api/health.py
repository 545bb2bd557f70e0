"""``GET /health``: what this replica runs on."""

from __future__ import annotations

from typing import Any

from litestar import get

from mycelium import __version__
from mycelium.api.deps import HubDep
from mycelium.db.migrate import head_revision


@get("/health")
async def health(hub: HubDep) -> dict[str, Any]:
    async with hub.db.acquire() as conn:
        row = await conn.fetchrow(
            """
            SELECT current_setting('server_version') AS postgres,
                   (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector,
                   (SELECT id::text FROM mycelium.store) AS store_id,
                   (SELECT version_num FROM alembic_version LIMIT 1) AS migration
            """
        )
    embedder = hub.embedder
    return {
        "status": "ok",
        "version": __version__,
        "postgres": row["postgres"],
        "pgvector": row["pgvector"],
        "migration": row["migration"],
        "migration_head": head_revision(),
        "embedder": {"name": embedder.name, "dimensions": embedder.dimensions} if embedder else None,
        "store_id": row["store_id"],
        "database": "embedded" if hub.embedded is not None else "external",
    }
