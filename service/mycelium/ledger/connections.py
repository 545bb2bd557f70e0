"""The ledger store's connections on one event loop: idle ones in a list, a semaphore for the bound.

A ledgered call is two round trips (claim, complete), each on whichever connection is free. asyncpg's
Pool spends about as much client CPU acquiring and releasing a connection (a task per release, and a
reset query unless told otherwise) as the query itself costs; this set does neither. A connection goes
back to the list only in a clean state: after the server refused a statement it is idle again (every
verb is its own transaction); after a refusal that ends the session (the backend was terminated, the
server is shutting down) or anything else (a broken socket, a timeout, a cancellation in the middle of
a query) it is closed, and the next call opens a fresh one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

# SQLSTATE classes that end the session rather than the statement: connection exceptions, operator
# intervention (the backend was terminated, the server is shutting down) and internal errors.
_SESSION_ENDING = ("08", "57", "XX")


def _ends_session(exc: asyncpg.PostgresError) -> bool:
    return str(getattr(exc, "sqlstate", "") or "").startswith(_SESSION_ENDING)


class ConnectionSet:
    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]], max_size: int) -> None:
        self._connect = connect
        self._idle: list[asyncpg.Connection] = []
        self._slots = asyncio.Semaphore(max_size)
        self._closed = False

    async def fill(self, count: int) -> None:
        """Open connections ahead of the first calls (at most ``count`` idle ones)."""
        while len(self._idle) < count and not self._closed:
            self._idle.append(await self._connect())

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self._slots:
            conn = self._take()
            if conn is None:
                conn = await self._connect()
            try:
                row = await conn.fetchrow(query, *args)
            except asyncpg.PostgresError as exc:
                if _ends_session(exc):
                    conn.terminate()
                else:
                    self._put_back(conn)
                raise
            except BaseException:
                conn.terminate()
                raise
            self._put_back(conn)
            return row

    def _take(self) -> asyncpg.Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
        return None

    def _put_back(self, conn: asyncpg.Connection) -> None:
        if self._closed or conn.is_closed() or conn.is_in_transaction():
            conn.terminate()
        else:
            self._idle.append(conn)

    async def close(self) -> None:
        """Close the idle connections now; the ones in use close when their call ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                await conn.close(timeout=5)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                conn.terminate()
