"""Rooms as SLIM channels against a real SLIM node on loopback: a node in the test's process, and a
hub served by uvicorn in the test's event loop with the ``slim`` loop running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn

from mycelium.cli.up import HTTP_PROTOCOL
from tests.support.processes import free_port

pytest.importorskip("slim_bindings", reason="the hub's SLIM channels need slim-bindings")


@pytest.fixture
def slim_node() -> Iterator[Any]:
    """A SLIM node in this process on a port of its own."""
    from mycelium.slim.node import Node

    node = Node(f"127.0.0.1:{free_port()}")
    node.start()
    try:
        yield node
    finally:
        node.stop()


@dataclass
class SlimHub:
    url: str
    hub: Any
    endpoint: str

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30.0, trust_env=False)

    def member(self, room: str, handle: str, **options: Any) -> Any:
        import mycelium.slim

        options.setdefault("join_seconds", 10.0)
        return mycelium.slim.join(room, handle, api_url=self.url, **options)

    async def channel(self, room: str) -> dict[str, Any]:
        async with self.http() as http:
            r = await http.get(f"/api/rooms/{room}/slim")
            assert r.status_code == 200, r.text
            return r.json()


@contextlib.asynccontextmanager
async def serve_slim(dsn: str, settings_for, endpoint: str, **overrides: Any) -> AsyncIterator[SlimHub]:
    from mycelium.hub import Hub
    from mycelium.slim.publisher import SLIM
    from tests.support.apps import app_for

    settings = settings_for(dsn, embedder="none", slim="on", slim_endpoint=endpoint, slim_serve=False,
                            **overrides)
    hub = Hub(settings, loops=[SLIM])
    with app_for(hub) as app:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               lifespan="on", access_log=False, http=HTTP_PROTOCOL))
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        try:
            yield SlimHub(f"http://127.0.0.1:{port}", hub, endpoint)
        finally:
            server.should_exit = True
            await task


@pytest.fixture
async def slim_hub(db_dsn: str, settings_for, slim_node) -> AsyncIterator[SlimHub]:
    async with serve_slim(db_dsn, settings_for, slim_node.endpoint) as served:
        yield served


async def published(served: SlimHub, room: str, position: int, seconds: float = 10.0) -> None:
    """Wait until the room's channel has published up to ``position``."""
    deadline = asyncio.get_running_loop().time() + seconds
    while (await served.channel(room))["published"] < position:
        assert asyncio.get_running_loop().time() < deadline, f"{room} did not publish up to {position}"
        await asyncio.sleep(0.05)
