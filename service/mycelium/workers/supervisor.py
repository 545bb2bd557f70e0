"""The supervisor: runs a process's background loops, leads where a loop needs one leader, and
beats each loop's state into ``mycelium.worker_loops``.

Leadership is a session advisory lock taken on the loop's own connection, which also does the
loop's work: the lock goes when that connection goes, so a leader that dies (``kill -9`` included:
its kernel closes the socket and the server ends the session) hands over without anyone deciding
it, and a leader whose connection broke finds out on its next query. Processes waiting for the
lead try the lock every :data:`LEADER_RETRY_SECONDS`, so the lead passes within
:data:`LEASE_SECONDS` of the leader's death. A loop that fails gives up its lead (its connection is
closed) before it backs off, so a process that cannot do the work (its mirror folder unwritable,
say) hands it to one that can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import asyncpg

from mycelium.db.pool import HubConnection, setup_connection
from mycelium.verbs import HUB_PROCESS, verbs_of, verbs_on
from mycelium.workers.loop import Loop, LoopContext, LoopStatus, backoff_seconds, now

if TYPE_CHECKING:
    from mycelium.hub import Hub

log = logging.getLogger("mycelium.workers")

Kind = Literal["worker", "hub"]

#: Processes waiting for a loop's lead try its lock this often.
LEADER_RETRY_SECONDS = 1.0
#: The lease period: the longest a loop that needs a leader goes without one after its leader's
#: process dies (a retry, plus the server noticing the closed connection, with room to spare).
LEASE_SECONDS = 3.0
#: Each process writes its loops' rows this often (and at once when a loop changes state).
HEARTBEAT_SECONDS = 2.0
#: A process counts as alive while its last heartbeat is younger than this.
ALIVE_SECONDS = 5 * HEARTBEAT_SECONDS
#: Rows of processes that stopped beating this long ago are forgotten (checked about once a minute).
FORGET_SECONDS = 600.0
#: How long a handle's events are kept (GET /api/events resumes within this).
EVENTS_KEPT_SECONDS = 7 * 24 * 3600
#: how long a stop waits for a cancelled loop before cancelling it again
CANCEL_AGAIN_SECONDS = 2.0

#: The server drops the connection of a host that vanished (no reset: power, network) after about
#: idle + interval x count seconds, which ends its session and frees its lead.
_KEEPALIVE = {"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3"}


class Supervisor:
    def __init__(self, hub: Hub, loops: Sequence[Loop], kind: Kind) -> None:
        names = [loop.name for loop in loops]
        if len(set(names)) != len(names):
            raise ValueError(f"loop names repeat: {names}")
        self.hub = hub
        self.loops = list(loops)
        self.kind: Kind = kind
        self.worker_id = uuid.uuid4()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at: datetime = now()
        self.heartbeat_at: datetime | None = None
        self.heartbeat_error: str | None = None
        self._changed = asyncio.Event()
        self.statuses = {
            loop.name: LoopStatus(loop.name, loop.interval, on_change=self._changed.set) for loop in loops
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._beating: asyncio.Task[None] | None = None

    # -- life --------------------------------------------------------------------------------------

    async def start(self) -> None:
        for loop in self.loops:
            self._tasks.append(asyncio.create_task(self._run(loop), name=f"loop-{loop.name}"))
        self._beating = asyncio.create_task(self._beat_forever(), name="loop-heartbeat")

    async def stop(self) -> None:
        """Stop every loop, then mark this process's rows stopped."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            # cancelled again until it ends: Python 3.11's asyncio.wait_for can swallow a cancellation
            # that lands as its wait completes, and the loop would then go on for ever
            while not task.done():
                await asyncio.wait({task}, timeout=CANCEL_AGAIN_SECONDS)
                if not task.done():
                    log.info("a loop went on after it was cancelled: cancelling it again")
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._beating
            self._beating = None
        for status in self.statuses.values():
            status.stopped()
        try:
            await verbs_of(self.hub).call(HUB_PROCESS, "stop_worker", worker_id=self.worker_id)
        except Exception as exc:  # the database is gone: the rows go stale instead
            log.warning("could not mark worker %s stopped: %s", self.worker_id, exc)

    # -- one loop ----------------------------------------------------------------------------------

    async def _run(self, loop: Loop) -> None:
        status = self.statuses[loop.name]
        while True:
            conn: asyncpg.Connection | None = None
            try:
                if loop.lead or loop.connection:
                    conn = await self._connect(loop.name)
                if loop.lead:
                    assert conn is not None
                    while not await verbs_on(conn).call(HUB_PROCESS, "try_lead", lock=loop.lead):
                        status.waiting()
                        await asyncio.sleep(LEADER_RETRY_SECONDS)
                    log.info("%s: this process leads (worker %s)", loop.name, self.worker_id)
                status.started(bool(loop.lead), conn.get_server_pid() if conn is not None else None)
                await loop.body(LoopContext(self.hub, status, conn))
                if loop.once:
                    status.finished()
                    return
                raise RuntimeError(f"loop {loop.name} returned")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                status.failed(exc)
                delay = backoff_seconds(status.failures)
                log.warning("%s failed (%s in a row), retrying in %.1f s: %s",
                            loop.name, status.failures, delay, status.last_error,
                            exc_info=status.failures == 1)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(_close(conn))
            await asyncio.sleep(delay)

    async def _connect(self, loop: str) -> asyncpg.Connection:
        settings = {"application_name": self.application_name(loop), **_KEEPALIVE}
        conn = await asyncpg.connect(self.hub.dsn, server_settings=settings, connection_class=HubConnection)
        try:
            await setup_connection(conn, self.hub.settings.app_role)
        except BaseException:
            await _close(conn)
            raise
        return conn

    def application_name(self, loop: str) -> str:
        """How the loop's connection shows in pg_stat_activity."""
        return f"mycelium {self.kind} {self.worker_id} {loop}"

    # -- heartbeats --------------------------------------------------------------------------------

    def report(self) -> list[dict[str, Any]]:
        return [s.report() for s in self.statuses.values()]

    async def beat(self) -> None:
        await verbs_of(self.hub).call(HUB_PROCESS, "beat_worker", worker_id=self.worker_id, kind=self.kind,
                                      host=self.host, pid=self.pid, started_at=self.started_at,
                                      loops=[{**r, "clock": now().isoformat()} for r in self.report()])
        self.heartbeat_at = now()

    async def _beat_forever(self) -> None:
        beats = 0
        while True:
            self._changed.clear()
            try:
                await self.beat()
                if beats % max(1, round(60 / HEARTBEAT_SECONDS)) == 0:
                    await verbs_of(self.hub).call(HUB_PROCESS, "forget_stale_workers", seconds=FORGET_SECONDS)
                    # (a handle's events older than a week: GET /api/events resumes within that)
                    await verbs_of(self.hub).call(HUB_PROCESS, "prune_handle_events",
                                                  seconds=EVENTS_KEPT_SECONDS)
                self.heartbeat_error = None
            except Exception as exc:
                self.heartbeat_error = f"{type(exc).__name__}: {exc}"
                log.warning("heartbeat failed: %s", self.heartbeat_error)
            beats += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=HEARTBEAT_SECONDS)


async def _close(conn: asyncpg.Connection) -> None:
    try:
        await asyncio.wait_for(conn.close(), timeout=2)
    except Exception:
        conn.terminate()
