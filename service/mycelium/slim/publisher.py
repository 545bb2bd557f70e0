"""The ``slim`` loop: this process moderates and publishes the channels of the rooms whose lock it
holds, and keeps trying to take those nobody holds.

Every process running the loops runs it. The room locks are session advisory locks on the loop's
own connection (sql/slim.sql), so they go when the process dies, ``kill -9`` included: the next
look of another process, at most :data:`TAKE_SECONDS` later, takes the room and resumes after the
position the dead one recorded last.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any

from mycelium.conversations.wakes import wait_for, waiters_of
from mycelium.slim.channel import RoomChannel
from mycelium.slim.runtime import SlimUnavailable, connect
from mycelium.verbs import HUB_PRINCIPAL, HUB_PROCESS, verbs_of
from mycelium.workers.loop import Loop, LoopContext

if TYPE_CHECKING:
    from mycelium.auth.tokens import TokenVerifier
    from mycelium.hub import Hub

SLIM_CHANNEL = "mycelium_slim"
#: The publisher each started hub of this process runs (by id of the hub), for ``/health``.
_running: dict[int, Publisher] = {}
#: How often a process looks for rooms whose channel nobody publishes.
TAKE_SECONDS = 1.0


class Publisher:
    def __init__(self, ctx: LoopContext) -> None:
        assert ctx.conn is not None
        self.ctx = ctx
        self.hub = ctx.hub
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.channels: dict[str, RoomChannel] = {}
        self._conn_lock = asyncio.Lock()  # the lock connection runs one statement at a time
        self._service: Any = None
        self._conn_id = 0
        self._verifier: TokenVerifier | None = None

    async def _on_lock_conn(self, verb: str, **params: Any) -> Any:
        async with self._conn_lock:
            return await self.ctx.verbs.call(HUB_PROCESS, verb, **params)

    async def _verifier_of(self) -> TokenVerifier | None:
        settings = self.hub.settings
        if settings.slim_identity != "jwt":
            return None
        from mycelium.auth.gate import start_gate, token_verifier

        verifier = token_verifier(settings)
        if verifier is None:
            raise SlimUnavailable("MYCELIUM_SLIM_IDENTITY=jwt needs the token gate (MYCELIUM_AUTH=on)")
        await start_gate(self.hub, verifier)
        return verifier

    async def run(self) -> None:
        settings = self.hub.settings
        self._verifier = await self._verifier_of()
        self._service, self._conn_id = await connect(settings.slim_endpoint, "mycelium-hub")
        listener = self.hub.wakes
        await listener.listen(SLIM_CHANNEL)
        hinted = listener.event(SLIM_CHANNEL)
        stop_hint = listener.on(SLIM_CHANNEL, self._on_hint)
        waiters = await waiters_of(self.hub)
        _running[id(self.hub)] = self
        try:
            while True:
                hinted.clear()
                await self._look(waiters)
                self.ctx.succeeded()
                await wait_for(hinted, TAKE_SECONDS)
        finally:
            _running.pop(id(self.hub), None)
            stop_hint()
            listener.discard(SLIM_CHANNEL, hinted)
            for channel in list(self.channels.values()):
                await channel.close()
            self.channels.clear()

    def _on_hint(self, _channel: str, room: str) -> None:
        channel = self.channels.get(room)
        if channel is not None:
            channel.roster_changed()

    async def _look(self, waiters: Any) -> None:
        for channel in list(self.channels.values()):
            for task in channel.tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        rooms = {r["name"] for r in await verbs_of(self.hub, HUB_PRINCIPAL).call(HUB_PROCESS, "slim_rooms")}
        for room in sorted(set(self.channels) - rooms):  # deleted: its lock is no use now
            await self.channels.pop(room).close()
            await self._on_lock_conn("slim_release_channel", room=room)
        taken = await self._on_lock_conn("slim_take_channels", publisher=self.name,
                                         held=sorted(self.channels))
        for row in taken:
            room = row["room"]

            async def mark(position: int, room: str = room) -> int:
                return await self._on_lock_conn("slim_mark_published", room=room, position=position)

            channel = RoomChannel(self.hub, self._service, self._conn_id, room, row["published"], mark,
                                  self._verifier)
            await channel.open()
            channel.start(waiters)
            self.channels[room] = channel


async def _body(ctx: LoopContext) -> None:
    await Publisher(ctx).run()


SLIM = Loop("slim", _body, interval=TAKE_SECONDS * 2, connection=True)



async def report(hub: Hub) -> dict[str, Any]:
    """The rooms' SLIM channels as this process sees them (``/health``)."""
    from mycelium.slim.node import served
    from mycelium.slim.runtime import available, reachable
    from mycelium.slim.wire import dev_secret

    settings = hub.settings
    if settings.slim == "off":
        return {"state": "off"}
    missing = available()
    if missing is not None:
        return {"state": "unavailable", "reason": missing}
    publisher = _running.get(id(hub))
    channels = sorted(publisher.channels) if publisher is not None else []
    return {"state": "on", "endpoint": settings.slim_endpoint,
            "node": "this process" if served() is not None else "elsewhere",
            "reachable": await asyncio.to_thread(reachable, settings.slim_endpoint, 0.3),
            "identity": settings.slim_identity,
            "secret": "development" if settings.slim_secret == dev_secret() else "set",
            "publishing": publisher is not None, "channels": channels}
