"""The bare stack under the wake path: what Litestar + uvicorn + asyncpg + PostgreSQL carry on this
machine with nothing of the hub's own (no write gate, search document, mentions or presence).

``python bench/wake_floor.py --database-url DSN --port N`` serves the routes ``bench/wake.py`` drives,
in the shape the hub answers them: ``POST /api/rooms/{room}/messages`` is one INSERT into a bare table
with a ``pg_notify`` naming the recipient in the same statement; ``GET /api/rooms/{room}/await``
looks once (one ``UPDATE`` of the handle's cursor to its next row, ``RETURNING`` it) and, finding
nothing, waits on an in-process event that the process's one LISTEN connection sets, then looks
again. The server is configured as ``mycelium up`` configures it (uvicorn on uvloop with the hub's
httptools protocol, no access log), the pool as the hub's (20 connections, no reset on release). A wake that
finds nothing costs a look, as it would in any await that keeps no state between calls.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import uvicorn
from litestar import Litestar, get, post
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.cli.up import HTTP_PROTOCOL

CHANNEL = "bench_floor"

SCHEMA = """
DROP TABLE IF EXISTS public.floor_messages, public.floor_cursors;
CREATE TABLE public.floor_messages (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, room text NOT NULL, sender text NOT NULL,
    recipient text NOT NULL, content text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX floor_messages_inbox ON public.floor_messages (room, recipient, id);
CREATE TABLE public.floor_cursors (room text, handle text, seen bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (room, handle));
"""

POST = """
WITH m AS (INSERT INTO public.floor_messages (room, sender, recipient, content) VALUES ($1, $2, $3, $4)
           RETURNING id, room, sender, recipient, content, created_at)
SELECT m.*, pg_notify('bench_floor', m.room || ' ' || m.recipient) FROM m
"""

LOOK = """
WITH next AS (SELECT m.id, m.sender, m.content, m.created_at FROM public.floor_cursors c
              JOIN public.floor_messages m ON m.room = c.room AND m.recipient = c.handle AND m.id > c.seen
              WHERE c.room = $1 AND c.handle = $2 ORDER BY m.id LIMIT 1)
UPDATE public.floor_cursors c SET seen = next.id FROM next WHERE c.room = $1 AND c.handle = $2
RETURNING next.id, next.sender, next.content, next.created_at
"""

CURSOR = "INSERT INTO public.floor_cursors (room, handle) VALUES ($1, $2) ON CONFLICT DO NOTHING"


class Post(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sender_handle: str = Field(min_length=1, max_length=200)
    recipient_handle: str = Field(min_length=1, max_length=200)
    message_type: str = "direct"
    content: str = Field(min_length=1, max_length=100_000)


class Floor:
    """The process's pool, its one LISTEN connection and the events it sets."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.waiters: dict[tuple[str, str], set[asyncio.Event]] = defaultdict(set)
        self.cursors: set[tuple[str, str]] = set()

    async def start(self) -> None:
        self.pool = await asyncpg.create_pool(self.dsn, min_size=10, max_size=20, reset=_keep_session)
        self.listener = await asyncpg.connect(self.dsn)
        await self.listener.add_listener(CHANNEL, self._heard)

    async def stop(self) -> None:
        await self.listener.close()
        await self.pool.close()

    def _heard(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        room, _, handle = payload.partition(" ")
        for event in self.waiters.get((room, handle), ()):
            event.set()


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """As the hub's pool: a released connection keeps its session (no reset round trip)."""


def floor_of(state: State) -> Floor:
    floor: Floor = state.floor
    return floor


@get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@post("/api/rooms/{room:str}/messages", status_code=201)
async def post_message(state: State, room: FromPath[str], data: JSONBody[Post]) -> dict[str, Any]:
    row = await floor_of(state).pool.fetchrow(POST, room, data.sender_handle, data.recipient_handle,
                                              data.content)
    return {"id": row["id"], "room_name": room, "sender_handle": row["sender"],
            "recipient_handle": row["recipient"], "content": row["content"], "created_at": row["created_at"]}


@get("/api/rooms/{room:str}/await")
async def await_message(state: State, room: FromPath[str], handle: FromQuery[str],
                        timeout: FromQuery[float] = 5.0) -> dict[str, Any]:
    floor = floor_of(state)
    key = (room, handle)
    if key not in floor.cursors:
        await floor.pool.execute(CURSOR, room, handle)
        floor.cursors.add(key)
    event = asyncio.Event()
    floor.waiters[key].add(event)  # registered before the look: no notification falls between
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            event.clear()
            row = await floor.pool.fetchrow(LOOK, room, handle)
            if row is not None:
                return {"room": room, "handle": handle, "message": {
                    "id": row["id"], "sender_handle": row["sender"], "content": row["content"],
                    "created_at": row["created_at"]}}
            remaining = deadline - loop.time()
            if remaining <= 0:
                return {"room": room, "handle": handle, "message": None}
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await event.wait()
    finally:
        floor.waiters[key].discard(event)


def create_app(dsn: str) -> Litestar:
    floor = Floor(dsn)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        await floor.start()
        app.state.floor = floor
        try:
            yield
        finally:
            await floor.stop()

    return Litestar(route_handlers=[health, post_message, await_message], lifespan=[lifespan], debug=False)


async def create_schema(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SCHEMA)
    finally:
        await conn.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--database-url", required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    asyncio.run(create_schema(args.database_url))
    config = uvicorn.Config(create_app(args.database_url), host="127.0.0.1", port=args.port, http=HTTP_PROTOCOL,
                            log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
