"""The ledger store's connections on one event loop: idle ones in a list, a semaphore for the bound.

A ledgered call is two round trips (claim, complete), each on whichever connection is free. asyncpg's
Pool spends about as much client CPU acquiring and releasing a connection (a task per release, and a
reset query unless told otherwise) as the query itself costs; this set does neither. A connection goes
back to the list only in a clean state: after the server refused a statement it is idle again (every
verb is its own transaction); after a refusal that ends the session (the backend was terminated, the
server is shutting down) or anything else (a broken socket, a timeout, a cancellation in the middle of
a query) it is closed, and the next call opens a fresh one.

The statement timeout is kept here rather than by asyncpg's ``command_timeout``, which sets and cancels
a timer per statement (about a fifth of the client CPU of a claim → complete cycle): one timer, set for
the oldest statement still running, cancels a statement that outlives the timeout, its connection is
closed and the call raises TimeoutError. Closing the connection does not stop the statement on the
server at once (the backend notices the lost client when it next talks to it), so a verb that was only
slow may still commit after the caller saw the timeout: the caller learns the outcome from the ledger
on its next claim, as with any other lost answer.
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
    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        max_size: int,
        timeout: float | None = None,
    ) -> None:
        self._connect = connect
        self._idle: list[asyncpg.Connection] = []
        self._slots = asyncio.Semaphore(max_size)
        self._closed = False
        self._timeout = timeout
        # the statements running now: their deadline and the task awaiting each (start order)
        # (_expire removes a statement it cancels: a watched statement missing from here was overdue)
        self._running: dict[asyncpg.Connection, tuple[float, asyncio.Task[Any]]] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def fill(self, count: int) -> None:
        """Open connections ahead of the first calls (at most ``count`` idle ones)."""
        while len(self._idle) < count and not self._closed:
            self._idle.append(await self._connect())

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self._slots:
            conn = self._take()
            if conn is None:
                conn = await self._connect()
            task, cancelling = None, 0
            if self._timeout is not None:
                task = asyncio.current_task()
                if task is not None:
                    # the cancellations the task already carries: a timeout is ours only beyond them
                    cancelling = self._watch(conn, task, self._timeout)
            try:
                row = await conn.fetchrow(query, *args)
            except asyncpg.PostgresError as exc:
                self._running.pop(conn, None)
                if _ends_session(exc):
                    conn.terminate()
                else:
                    self._put_back(conn)
                raise
            except asyncio.CancelledError:
                overdue = task is not None and self._running.pop(conn, None) is None
                conn.terminate()
                if overdue and task is not None and task.uncancel() <= cancelling:
                    raise TimeoutError(
                        f"the statement ran longer than the store's timeout ({self._timeout:g} s)"
                    ) from None
                raise
            except BaseException:
                self._running.pop(conn, None)
                conn.terminate()
                raise
            self._running.pop(conn, None)
            self._put_back(conn)
            return row

    def _watch(self, conn: asyncpg.Connection, task: asyncio.Task[Any], timeout: float) -> int:
        """Time the statement ``task`` runs on ``conn``; return how many cancellations it already has."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._running[conn] = (deadline, task)
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        return task.cancelling()

    def _expire(self) -> None:
        """Cancel every statement past its deadline; set the timer for the next deadline, if any."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now, later = loop.time(), None
        for conn, (deadline, task) in list(self._running.items()):
            if deadline > now:
                later = deadline if later is None else min(later, deadline)
                continue
            del self._running[conn]
            task.cancel()
        if later is not None:
            self._timer = loop.call_at(later, self._expire)

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
        if self._timer is not None and not self._running:  # statements still running keep theirs
            self._timer.cancel()
            self._timer = None
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                await conn.close(timeout=5)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                conn.terminate()
