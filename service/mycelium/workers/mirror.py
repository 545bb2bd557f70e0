"""The mirror follower: one process at a time (it holds the mirror's files) applies committed
changes to the markdown files under its data folder, as they commit (see mycelium.mirror.follower
for how a batch is applied and the position kept).

Files that cannot be written do not fail the loop (the other rooms and changes go on): the loop's
``last_error`` in ``/health`` counts them and names the latest, until each is written after all."""

from __future__ import annotations

import asyncio
import contextlib

from mycelium.mirror.follower import Unwritable, apply_pending
from mycelium.workers.loop import Loop, LoopContext, now

CHANNEL = "mycelium_changes"
#: The follower looks at least this often even without a wake.
WAKE_SECONDS = 1.0


async def follow_changes(ctx: LoopContext) -> None:
    hub = ctx.hub
    root = hub.settings.resolved_data_dir()
    wake = hub.wakes.event(CHANNEL)
    await hub.wakes.listen(CHANNEL)
    unwritable = Unwritable()
    reported: str | None = None
    try:
        while True:
            wake.clear()
            applied = await apply_pending(ctx.connection, root, unwritable=unwritable)
            ctx.succeeded()
            summary = unwritable.summary()
            # a file newly unwritable, or fewer of them (without hiding a failure of the loop itself)
            if summary != reported and (applied.failed or ctx.status.last_error == reported):
                ctx.status.last_error = summary  # None once every file is written after all
                if summary is not None:
                    ctx.status.last_error_at = now()
                reported = summary
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=WAKE_SECONDS)
    finally:
        hub.wakes.discard(CHANNEL, wake)


#: the lock older hubs took for the mirror, so a hub of the previous release and a worker of this
#: one never follow at once during a rolling upgrade
MIRROR = Loop("mirror", follow_changes, interval=WAKE_SECONDS, lead="mycelium.markdown-mirror")
