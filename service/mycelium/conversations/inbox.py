"""``await``: wait for the next message addressed to a handle, without holding a connection.

The delivery decision is the database's (``mycelium.take_next``: a durable per-handle cursor, one
transaction per pick). This module only decides *when* to ask again: right away (unless the
handle is quiet: its last look found nothing more and no hint has named it since), then whenever a
wake hint names the handle in the room, and at least every :data:`RECHECK_SECONDS` as a safety
net. Waiting costs an :class:`asyncio.Event`, never a database connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mycelium.conversations.wakes import Waiters, wait_for, waiters_of
from mycelium.core.handles import normalize_handle
from mycelium.hub import Hub
from mycelium.verbs import Actor, Verbs, verbs_of

#: The longest one await may wait (upstream's cap); ``timeout=0`` means this.
MAX_WAIT_SECONDS = 3600.0
#: Ask the database again at least this often, hint or not.
RECHECK_SECONDS = 30.0


async def await_next(
    hub: Hub, room: str, handle: str, *, episode: str | None = None, timeout: float = 0.0,
    gone: Callable[[], Awaitable[None]] | None = None, verbs: Verbs | None = None,
) -> Any | None:
    """The next message for ``handle`` in ``room`` (or thread ``episode``), or ``None`` on timeout.

    ``gone``, when given, completes when the caller no longer wants the answer (the HTTP client
    hung up): the wait stops without taking anything, so the message stays pending for the next
    await instead of being delivered to nobody. ``verbs`` carries a gated request's principal.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (timeout if timeout > 0 else MAX_WAIT_SECONDS)
    waiters = await waiters_of(hub)
    verbs = verbs or verbs_of(hub)
    me = normalize_handle(handle)
    event = waiters.for_handle(room, me)  # registered before the quiet test: no hint falls between
    quiet = waiters.quiet_until(room, me) if episode is None else None
    # a quiet handle whose presence lasts until the first look this wait would make anyway
    look = quiet is None or quiet < loop.time() + min(deadline - loop.time(), RECHECK_SECONDS)
    hung_up = False
    watcher = None
    if gone is not None:
        # the caller leaving wakes the wait like a hint does, and ends it without a look
        def leave(_done: object) -> None:
            nonlocal hung_up
            hung_up = True
            event.set()

        watcher = asyncio.ensure_future(gone())
        watcher.add_done_callback(leave)
    try:
        while True:
            remaining = max(0.0, deadline - loop.time())
            if look:
                event.clear()
                row = await _take(verbs, waiters, room, handle, me, episode, remaining)
                if row is not None:
                    return row
            look = True
            if remaining <= 0:
                return None
            await wait_for(event, min(remaining, RECHECK_SECONDS))
            if hung_up:
                return None
    finally:
        waiters.drop_handle(room, me, event)
        if watcher is not None:
            watcher.cancel()


async def _take(verbs: Verbs, waiters: Waiters, room: str, handle: str, me: str, episode: str | None,
                remaining: float) -> Any | None:
    """One look at the inbox (``take_next``, as the handle), keeping its quiet mark up to date."""
    actor = Actor.declared(handle)
    if episode is not None:
        return await verbs.call(actor, "take_next", room=room, handle=handle, episode=episode,
                                hold_seconds=remaining)
    waiters.looking(room, me)
    try:
        row = await verbs.call(actor, "take_next", room=room, handle=handle, episode=None,
                               hold_seconds=remaining)
    except BaseException:
        waiters.forget(room, me)
        raise
    if row is None:
        waiters.forget(room, me)
    else:
        waiters.looked(room, me, row["inbox_state"])
    return row
