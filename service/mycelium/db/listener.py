"""One LISTEN connection per process, fanned out in-process.

NOTIFY is only a wake hint: whoever wakes re-reads the tables. So the fan-out never carries state,
and after the connection drops (and is re-established) every waiter is woken once, because a hint
may have been lost in the gap; re-reading makes that harmless.

Waiters do not hold connections: a thousand long-polls cost one connection, not a thousand.

The same connection also *sends* the hints of this process's own writes. A transaction that issues
NOTIFY commits under a cluster-wide lock that PostgreSQL holds past its WAL flush, so notifying
writers commit one after another instead of sharing a flush. The hub's verbs therefore ask the
database to keep their hints (``mycelium.defer_wakes``) and read them back with the result; once
the write has committed, :meth:`Listener.hint` wakes this process's waiters at once and queues the
hints for other processes, sent in batches as one autocommit statement (at most one per
:data:`_SPACING` while writes keep coming). A hint that arrives back from that statement is not
fanned out twice. Losing one (a crash between commit and send) delays a waiter on another replica
until its periodic re-check; it never loses a message, since every waiter re-reads the tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable

import asyncpg

log = logging.getLogger("mycelium.listener")

_NOTIFY_ALL = "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS h (c, p)"
_BATCH = 500
#: At most one batch of hints per this many seconds while hints keep coming (other processes' waiters
#: wait up to this much longer; this process's own are woken at once).
_SPACING = 0.002

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
        self._lock = asyncio.Lock()  # one operation at a time on the connection
        self._outbox: dict[tuple[str, str], None] = {}  # hints to send, in order, each once
        self._pending = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self.reconnects = 0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mycelium-listener")
        self._sender = asyncio.create_task(self._send_hints(), name="mycelium-hint-sender")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout=10)

    async def stop(self) -> None:
        if self._sender is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._flush(), timeout=2)
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sender
            self._sender = None
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
                self._pending.set()  # hints queued while disconnected
                if self.reconnects:
                    self._wake_everyone()
                delay = 0.1
                while not lost.is_set():
                    # a dead socket is not always reported: probe it now and then
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=5.0)
                    if not lost.is_set():
                        try:
                            async with self._lock:
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
                async with self._lock:
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

    # -- sending ----------------------------------------------------------------------------------

    def hint(self, hints: str | None) -> None:
        """Fan out the wake hints of a write this process has committed (one per line, channel and
        payload separated by a tab, as ``mycelium.wake_hint`` keeps them): to this process's waiters
        at once, to other processes with the next batch."""
        if not hints:
            return
        for line in hints.split("\n"):
            channel, sep, payload = line.partition("\t")
            if sep:
                self._deliver(channel, payload)
                self._outbox[(channel, payload)] = None
        self._pending.set()

    async def _send_hints(self) -> None:
        loop = asyncio.get_running_loop()
        last = -_SPACING
        while True:
            await self._pending.wait()
            # Hints that follow a send closely wait for the next slot: a busy process sends one
            # batch per _SPACING rather than one per write (each batch is a round trip for this
            # process and the server); a hint after a quiet spell goes at once.
            gap = last + _SPACING - loop.time()
            if gap > 0:
                await asyncio.sleep(gap)
            self._pending.clear()
            last = loop.time()
            try:
                await self._flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # kept: sent again once the connection is back
                log.warning("could not send wake hints: %s", exc)

    async def _flush(self) -> None:
        """Send every queued hint in one statement (autocommit), unless disconnected."""
        while self._outbox:
            conn = self._conn
            if conn is None or conn.is_closed():
                return
            batch = list(self._outbox)[:_BATCH]
            async with self._lock:
                await conn.execute(_NOTIFY_ALL, [c for c, _ in batch], [p for _, p in batch])
            for key in batch:
                self._outbox.pop(key, None)

    # -- receiving --------------------------------------------------------------------------------

    def _on_notify(self, _conn: object, pid: int, channel: str, payload: str) -> None:
        if pid == self.connection_pid:
            return  # our own hint, fanned out here when it was queued
        self._deliver(channel, payload)

    def _deliver(self, channel: str, payload: str) -> None:
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
