"""One hub process: where its database is, its pool, its embedder and its background workers.

A hub replica keeps no state another replica would need; everything here is either a connection, a
model loaded in memory, or a worker that coordinates with other replicas through the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from mycelium.db.embedded import EmbeddedPostgres
from mycelium.db.listener import Listener
from mycelium.db.migrate import upgrade_async
from mycelium.db.pool import create_pool
from mycelium.embed import Embedder, make_embedder
from mycelium.settings import Settings

log = logging.getLogger("mycelium.hub")

Worker = Callable[["Hub"], Awaitable[None]]


@dataclass
class Hub:
    settings: Settings
    dsn: str = ""
    pool: asyncpg.Pool | None = None
    embedder: Embedder | None = None
    embedded: EmbeddedPostgres | None = None
    listener: Listener | None = None
    workers: list[Worker] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

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
            self.dsn = await asyncio.to_thread(self.embedded.attach)
        if self.settings.migrate_on_start:
            await upgrade_async(self.dsn)
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
        for worker in self.workers:
            self._tasks.append(asyncio.create_task(self._supervise(worker), name=worker.__name__))

    async def _supervise(self, worker: Worker) -> None:
        """Run a background worker for the life of the hub; restart it after a failure."""
        while True:
            try:
                await worker(self)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("worker %s failed; restarting in 1 s", worker.__name__)
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.listener is not None:
            await self.listener.stop()
            self.listener = None
        if self.embedder is not None:
            with contextlib.suppress(Exception):
                await self.embedder.aclose()
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.detach)
            self.embedded = None
