"""The lease watch: wait until a work/ row's lease reads differently from what the caller saw.

A lease moves three ways: someone writes it (claim, release, resolve, renew), a dependency it waits
on settles (a write to another row), or it drains (its time runs out, and nothing is written). The
first two arrive as wake hints on the process's one listener (``mycelium_board`` for lease writes,
``mycelium_changes`` for memory writes, payload = room); the third is the clock, so the watcher
also wakes when the lease it sees is due. Every wake re-reads the row; the hint carries no state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass
from typing import Any

from mycelium.hub import Hub
from mycelium.verbs import NOBODY, Verbs, verbs_of

CHANNELS = ("mycelium_board", "mycelium_changes")
MAX_WAIT_S = 60.0


def signature(read: Any) -> str:
    """What a watcher compares: derived state, holder, claim time, versions and waiting_on."""
    parts = [
        str(read["assignment"]), str(read["owner"] or ""), str(read["claimed_at"] or ""),
        str(read["version"]), str(read["lease_version"]), ",".join(read["waiting_on"] or []),
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass
class Watched:
    read: Any
    since: str
    changed: bool


async def watch_lease(hub: Hub, room: str, key: str, since: str | None, timeout: float,
                      verbs: Verbs | None = None) -> Watched:
    """Return at once without ``since`` or when it is stale; else when the lease changes, or at the
    deadline (``changed`` false)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(timeout, 0.0), MAX_WAIT_S)
    wake = asyncio.Event()

    def hint(_channel: str, payload: str) -> None:
        if payload in ("", room):
            wake.set()

    for channel in CHANNELS:
        await hub.wakes.listen(channel)
    unsubscribe = [hub.wakes.on(channel, hint) for channel in CHANNELS]
    verbs = verbs or verbs_of(hub)
    try:
        while True:
            wake.clear()
            read = await verbs.call(NOBODY, "read_assignment", room=room, key=key)
            token = signature(read)
            if since is None or token != since:
                return Watched(read, token, since is not None)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return Watched(read, token, False)
            if read["assignment"] == "held" and read["seconds_left"] is not None:
                remaining = min(remaining, max(read["seconds_left"], 0.0) + 0.01)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=remaining)
    finally:
        for off in unsubscribe:
            off()
