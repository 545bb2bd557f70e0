"""Fixtures of the conversations tests: a room with a task thread, a hub served over real HTTP in
this process, and hub processes of their own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import asyncpg
import httpx
import pytest
import uvicorn

from mycelium.cli.up import HTTP_PROTOCOL
from tests.support.processes import HubProcess, free_port


@dataclass
class Thread:
    room: str
    key: str
    episode: str

    @property
    def short(self) -> str:
        return self.episode.rsplit(":", 1)[-1]


async def make_thread(conn: asyncpg.Connection, room: str, key: str, title: str) -> Thread:
    """A memory in ``room`` at ``key`` (its thread is minted by the database)."""
    episode = await conn.fetchval(
        "SELECT episode FROM mycelium.write_memory($1, $2, $3, 'julia')", room, key, f"# {title}\n\nbody")
    return Thread(room, key, episode)


@pytest.fixture
async def task(admin_conn: asyncpg.Connection) -> Thread:
    """Room ``atlas`` with the task row ``work/add-apple-pay`` and its thread."""
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    return await make_thread(admin_conn, "atlas", "work/add-apple-pay", "Add Apple Pay")


@dataclass
class Served:
    """A hub app served by uvicorn inside the test's event loop, on a real port."""

    url: str
    hub: object
    server: uvicorn.Server

    def client(self, **kwargs: object) -> httpx.AsyncClient:
        kwargs.setdefault("timeout", 30.0)
        return httpx.AsyncClient(base_url=self.url, **kwargs)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def serve(dsn: str, settings_for, **overrides: object) -> AsyncIterator[Served]:
    from mycelium.hub import Hub
    from tests.support.apps import app_for

    hub = Hub(settings_for(dsn, embedder="none", **overrides))
    with app_for(hub) as app:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               lifespan="on", access_log=False, backlog=4096,
                                               http=HTTP_PROTOCOL))  # as `mycelium up` serves
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        try:
            yield Served(f"http://127.0.0.1:{port}", hub, server)
        finally:
            server.should_exit = True
            await task


@pytest.fixture
async def served(db_dsn: str, settings_for) -> AsyncIterator[Served]:
    async with serve(db_dsn, settings_for) as s:
        yield s


@pytest.fixture
def hub_process(hub_processes) -> Callable[[], HubProcess]:
    """Start ``mycelium up`` processes on this test's database (stopped at the end)."""

    def start() -> HubProcess:
        return hub_processes(extra=["--no-mirror"], env={"MYCELIUM_MIGRATE_ON_START": "false"})

    return start
