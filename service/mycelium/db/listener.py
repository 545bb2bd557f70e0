"""One LISTEN connection per process, fanned out in-process.

NOTIFY is only a wake hint: whoever wakes re-reads the tables. So the fan-out never carries state,
and after the connection drops (and is re-established) every waiter is woken once, because a hint
may have been lost in the gap; re-reading makes that harmless.

Waiters do not hold connections: a thousand long-polls cost one connection, not a thousand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable

import asyncpg

log = logging.getLogger("mycelium.listener")

Callback = Callable[[str, str], None]


class Listener:
    def __init__(self, dsn: str, channels: tuple[str, ...] = ()) -> None:
        self._dsn = dsn
        self._channels: set[str] = set(channels)
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._events: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._callbacks: dict[str, list[Callback]] = defaultdict(list)
        self._connected = asyncio.Event()
        self.reconnects = 0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mycelium-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout=10)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        await self._close()

    @property
    def connection_pid(self) -> int | None:
        """The backend pid of the listening connection (for operators and tests)."""
        return self._conn.get_server_pid() if self._conn is not None and not self._conn.is_closed() else None

    async def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)
            self._conn = None
        self._connected.clear()

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                lost = asyncio.Event()
                conn = await asyncpg.connect(self._dsn)
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                for channel in sorted(self._channels):
                    await conn.add_listener(channel, self._on_notify)
                self._conn = conn
                self._connected.set()
                if self.reconnects:
                    self._wake_everyone()
                delay = 0.1
                while not lost.is_set():
                    # a dead socket is not always reported: probe it now and then
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=5.0)
                    if not lost.is_set():
                        try:
                            await asyncio.wait_for(conn.execute("SELECT 1"), timeout=5.0)
                        except Exception:
                            lost.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection refused, server restarting, ...
                log.warning("listener connection failed: %s; retrying in %.1fs", exc, delay)
            await self._close()
            self.reconnects += 1
            self._wake_everyone()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    # -- subscribing -------------------------------------------------------------------------------

    async def listen(self, channel: str) -> None:
        """Make sure this process listens on ``channel``."""
        if channel in self._channels:
            return
        self._channels.add(channel)
        if self._conn is not None and not self._conn.is_closed():
            with contextlib.suppress(Exception):
                await self._conn.add_listener(channel, self._on_notify)

    def on(self, channel: str, callback: Callback) -> Callable[[], None]:
        """Call ``callback(channel, payload)`` for each hint; returns the unsubscribe function."""
        self._callbacks[channel].append(callback)
        return lambda: self._callbacks[channel].remove(callback)

    async def wait(self, channel: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a hint on ``channel``; True if one came."""
        await self.listen(channel)
        event = asyncio.Event()
        self._events[channel].add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout=timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._events[channel].discard(event)

    def event(self, channel: str) -> asyncio.Event:
        """A standing event set on every hint for ``channel`` (the caller clears it)."""
        event = asyncio.Event()
        self._events[channel].add(event)
        return event

    def discard(self, channel: str, event: asyncio.Event) -> None:
        self._events[channel].discard(event)

    def _on_notify(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        for event in list(self._events.get(channel, ())):
            event.set()
        for callback in list(self._callbacks.get(channel, ())):
            try:
                callback(channel, payload)
            except Exception:
                log.exception("listener callback failed on %s", channel)

    def _wake_everyone(self) -> None:
        for events in self._events.values():
            for event in list(events):
                event.set()
        for channel, callbacks in self._callbacks.items():
            for callback in list(callbacks):
                with contextlib.suppress(Exception):
                    callback(channel, "")
