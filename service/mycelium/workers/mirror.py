"""The mirror follower: one process at a time (it holds the mirror's files) applies committed
changes to the markdown files under its data folder, as they commit (see mycelium.mirror.follower
for how a batch is applied and the position kept).

Files that cannot be written do not fail the loop (the other rooms and changes go on): the loop's
``warning`` in ``/health`` counts them and names the latest, and the process reports itself degraded,
until each is written after all."""

from __future__ import annotations

import asyncio
import contextlib

from mycelium.mirror.follower import Unwritable, apply_pending
from mycelium.workers.loop import Loop, LoopContext

CHANNEL = "mycelium_changes"
#: The follower looks at least this often even without a wake.
WAKE_SECONDS = 1.0


async def follow_changes(ctx: LoopContext) -> None:
    hub = ctx.hub
    root = hub.settings.resolved_data_dir()
    wake = hub.wakes.event(CHANNEL)
    await hub.wakes.listen(CHANNEL)
    unwritable = Unwritable()
    try:
        while True:
            wake.clear()
            await apply_pending(ctx.verbs, root, unwritable=unwritable)
            ctx.succeeded()
            ctx.status.warn(unwritable.summary())  # None once every file is written after all
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=WAKE_SECONDS)
    finally:
        hub.wakes.discard(CHANNEL, wake)


#: the lock older hubs took for the mirror, so a hub of the previous release and a worker of this
#: one never follow at once during a rolling upgrade
MIRROR = Loop("mirror", follow_changes, interval=WAKE_SECONDS, lead="mycelium.markdown-mirror")
