"""Wake hints fanned out inside one hub process.

The database announces every message twice over the process's one LISTEN connection
(``hub.wakes``): ``mycelium_messages`` says a room's timeline moved (``'<room> <position>'``), and
``mycelium_wakes`` names the handles a message is a turn for (``'<position>\\t<room>\\t<h1>,<h2>'``, or
``*`` when the list would not fit). Here those hints become :class:`asyncio.Event` sets: an ``await``
waits on its (room, handle) and a stream on its room, so a message wakes only the waiters it
concerns, and a thousand waiters cost no connection at all.

A hint carries no state; whoever wakes re-reads the tables. After the listener loses and regains
its connection every waiter is woken, because a hint may have been lost in the gap.

The waiters also remember which handles are *quiet*: their last look at the inbox (started at a
moment since which no hint has named them) took a message and found nothing more waiting, and
their presence lease runs until a known time. An ``await`` of a quiet handle may start by waiting
instead of looking: anything committed for it since that look has sent a hint that made it not
quiet, or will wake the wait (a hint that is lost, with the replica that should have sent it,
costs a wait of up to the await's periodic re-check, never the message).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import defaultdict

from mycelium.db.listener import Listener
from mycelium.hub import Hub

MESSAGES_CHANNEL = "mycelium_messages"
WAKES_CHANNEL = "mycelium_wakes"
EVERYONE = "*"
_QUIET_MAX = 100_000  # forget them all past this many (they are only a shortcut)


class Waiters:
    """The waiters of one process, keyed by what wakes them."""

    def __init__(self, listener: Listener) -> None:
        # weak: the registry below is keyed by the listener, and a value must not keep its key alive
        self._listener = weakref.ref(listener)
        self._handles: dict[tuple[str, str], set[asyncio.Event]] = defaultdict(set)
        self._rooms: dict[str, set[asyncio.Event]] = defaultdict(set)
        listener.on(WAKES_CHANNEL, self._on_wake)
        listener.on(MESSAGES_CHANNEL, self._on_message)
        # The listener re-runs callbacks after a reconnect only for channels it holds events for:
        # keep one standing event on each, so a lost connection still wakes everyone here.
        self._standing = [listener.event(WAKES_CHANNEL), listener.event(MESSAGES_CHANNEL)]
        self._quiet: dict[tuple[str, str], float | None] = {}  # -> quiet until (loop time)
        self._ready = False

    async def ready(self) -> None:
        listener = self._listener()
        if not self._ready and listener is not None:
            await listener.listen(WAKES_CHANNEL)
            await listener.listen(MESSAGES_CHANNEL)
            self._ready = True

    # -- registering ------------------------------------------------------------------------------

    def for_handle(self, room: str, handle: str) -> asyncio.Event:
        """An event set whenever a message in ``room`` may be a turn for ``handle`` (normalised)."""
        event = asyncio.Event()
        self._handles[(room, handle)].add(event)
        return event

    def for_room(self, room: str) -> asyncio.Event:
        """An event set whenever ``room``'s timeline moves."""
        event = asyncio.Event()
        self._rooms[room].add(event)
        return event

    def drop_handle(self, room: str, handle: str, event: asyncio.Event) -> None:
        found = self._handles.get((room, handle))
        if found is not None:
            found.discard(event)
            if not found:
                del self._handles[(room, handle)]

    def drop_room(self, room: str, event: asyncio.Event) -> None:
        found = self._rooms.get(room)
        if found is not None:
            found.discard(event)
            if not found:
                del self._rooms[room]

    # -- quiet handles ----------------------------------------------------------------------------

    def looking(self, room: str, handle: str) -> None:
        """A look at ``handle``'s inbox starts; a hint naming it from now on makes it not quiet."""
        if len(self._quiet) >= _QUIET_MAX:
            self._quiet.clear()
        self._quiet[(room, handle)] = None

    def looked(self, room: str, handle: str, state: str | None) -> None:
        """The look took a message; ``state`` is ``take_next``'s '<more pending> <presence seconds>'."""
        key = (room, handle)
        if key not in self._quiet:
            return  # a hint named the handle meanwhile
        more, _, left = (state or "").partition(" ")
        try:
            seconds = float(left)
        except ValueError:
            seconds = 0.0
        if more == "false" and seconds > 1.0:
            self._quiet[key] = asyncio.get_running_loop().time() + seconds - 1.0
        else:
            del self._quiet[key]

    def forget(self, room: str, handle: str) -> None:
        """The look failed, or found nothing: the next await looks first."""
        self._quiet.pop((room, handle), None)

    def quiet_until(self, room: str, handle: str) -> float | None:
        """Until when (loop time) ``handle`` is quiet, or None if it is not."""
        return self._quiet.get((room, handle))

    @property
    def waiting(self) -> int:
        """How many waiters are registered (for operators and tests)."""
        return sum(len(s) for s in self._handles.values()) + sum(len(s) for s in self._rooms.values())

    # -- hints ------------------------------------------------------------------------------------

    def _on_wake(self, _channel: str, payload: str) -> None:
        if not payload:  # the listener reconnected: anything may have happened
            self._quiet.clear()
            for events in self._handles.values():
                _set_all(events)
            return
        parts = payload.split("\t", 2)
        if len(parts) != 3:
            self._quiet.clear()
            return
        _, room, who = parts
        if who == EVERYONE:
            self._quiet = {key: until for key, until in self._quiet.items() if key[0] != room}
            for (r, _h), events in self._handles.items():
                if r == room:
                    _set_all(events)
            return
        for handle in who.split(","):
            self._quiet.pop((room, handle), None)
            events = self._handles.get((room, handle))
            if events:
                _set_all(events)

    def _on_message(self, _channel: str, payload: str) -> None:
        if not payload:
            for events in self._rooms.values():
                _set_all(events)
            return
        room = payload.rsplit(" ", 1)[0]
        events = self._rooms.get(room)
        if events:
            _set_all(events)


def _set_all(events: set[asyncio.Event]) -> None:
    for event in list(events):
        event.set()


_BY_LISTENER: weakref.WeakKeyDictionary[Listener, Waiters] = weakref.WeakKeyDictionary()


async def waiters_of(hub: Hub) -> Waiters:
    """The waiters of ``hub``'s process (one set per listener, made on first use)."""
    listener = hub.wakes
    waiters = _BY_LISTENER.get(listener)
    if waiters is None:
        waiters = _BY_LISTENER[listener] = Waiters(listener)
    await waiters.ready()
    return waiters


async def wait_for(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; True if it was set."""
    if event.is_set():
        return True
    if timeout <= 0:
        return False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):  # no task of its own, unlike asyncio.wait_for
            await event.wait()
    return event.is_set()
