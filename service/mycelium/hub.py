"""One hub process: where its database is, its pool, its embedder and its background loops.

A hub process keeps no state another process would need; everything here is either a connection, a
model loaded in memory, or a background loop that coordinates with other processes through the
database (see mycelium.workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import asyncpg

from mycelium.db.embedded import EmbeddedPostgres
from mycelium.db.listener import Listener
from mycelium.db.migrate import upgrade_on_start
from mycelium.db.pool import create_pool
from mycelium.embed import Embedder, make_embedder
from mycelium.settings import Settings
from mycelium.workers.loop import Loop
from mycelium.workers.supervisor import Kind, Supervisor

log = logging.getLogger("mycelium.hub")
#: how long a stop waits for the pool's connections to come back before closing them
POOL_CLOSE_SECONDS = 10.0


@dataclass
class Hub:
    settings: Settings
    dsn: str = ""
    pool: asyncpg.Pool | None = None
    embedder: Embedder | None = None
    embedded: EmbeddedPostgres | None = None
    listener: Listener | None = None
    loops: list[Loop] = field(default_factory=list)
    kind: Kind = "hub"
    create_cluster: bool = True
    """With no database URL, create the embedded cluster if the data folder has none (only
    ``mycelium up`` does; a worker refuses with ``NoCluster``)."""
    """``worker`` for a process without HTTP (``mycelium worker``), ``hub`` otherwise."""
    supervisor: Supervisor | None = None

    @property
    def wakes(self) -> Listener:
        if self.listener is None:
            raise RuntimeError("the hub is not started")
        return self.listener

    @property
    def db(self) -> asyncpg.Pool:
        if self.pool is None:
            raise RuntimeError("the hub is not started")
        return self.pool

    async def start(self) -> None:
        if self.settings.database_url:
            self.dsn = self.settings.database_url
        else:
            self.embedded = EmbeddedPostgres(self.settings.resolved_data_dir())
            self.dsn = await asyncio.to_thread(self.embedded.attach, create=self.create_cluster)
        if self.settings.migrate_on_start:
            await upgrade_on_start(self.dsn)
        self.pool = await create_pool(
            self.dsn, role=self.settings.app_role,
            min_size=self.settings.pool_min_size, max_size=self.settings.pool_max_size,
        )
        self.listener = Listener(self.dsn)
        await self.listener.start()
        self.embedder = self.embedder or make_embedder(
            self.settings.embedder, url=self.settings.embedding_url, model=self.settings.embedding_model,
            api_key=self.settings.embedding_api_key, dimensions=self.settings.embedding_dimensions,
        )
        if self.loops:
            self.supervisor = Supervisor(self, self.loops, self.kind)
            await self.supervisor.start()

    async def stop(self) -> None:
        if self.supervisor is not None:
            await self.supervisor.stop()
            self.supervisor = None
        if self.listener is not None:
            await self.listener.stop()
            self.listener = None
        if self.embedder is not None:
            with contextlib.suppress(Exception):
                await self.embedder.aclose()
        if self.pool is not None:
            try:  # a graceful close waits for every connection back: a stop never waits for ever
                await asyncio.wait_for(self.pool.close(), POOL_CLOSE_SECONDS)
            except TimeoutError:
                log.warning("the pool did not close within %s s (a connection was not given back): "
                            "its connections are closed now", POOL_CLOSE_SECONDS)
                self.pool.terminate()
            self.pool = None
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.detach)
            self.embedded = None
