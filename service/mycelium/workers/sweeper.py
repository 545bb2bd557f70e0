"""The lease sweeper, which raises ``expired`` once for each lease that runs out, and the board
settings the environment asks for.

The sweeper has one leader across the deployment (its lock, on its own connection). The SQL
function it calls also takes a transaction advisory lock, so a sweep run by hand (or by a hub of an
older release) never races it, and it records each announcement (keyed by the lease's claim id) in
the same transaction as the notice, so a restart neither repeats nor loses one. The sweeper only
decides *when* to look: it sleeps until the next lease is due, at most ``IDLE_MAX`` seconds (a new
claim runs at least a minute, so nothing it misses in between is due sooner).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from mycelium.verbs import HUB_PRINCIPAL, HUB_PROCESS, Verbs, verbs_of
from mycelium.workers.loop import Loop, LoopContext

if TYPE_CHECKING:
    from mycelium.hub import Hub

BATCH = 500
IDLE_MAX = 5.0


async def sweep_once(verbs: Verbs, batch: int = BATCH) -> list[tuple[str, str]]:
    """One sweep; the (room, key) of every lease it announced (none if another sweep holds the lock)."""
    rows = await verbs.call(HUB_PROCESS, "sweep_expired_leases", batch=batch)
    return [(r["room"], r["key"]) for r in rows]


async def sweep_leases(ctx: LoopContext) -> None:
    verbs = ctx.verbs
    while True:
        announced = await sweep_once(verbs)
        ctx.succeeded()
        if len(announced) == BATCH:
            continue
        due = await verbs.call(HUB_PROCESS, "next_lease_expiry")
        await asyncio.sleep(IDLE_MAX if due is None else min(max(due, 0.05), IDLE_MAX))


async def apply_board_settings(hub: Hub) -> None:
    """Write the environment's dependency gate (if it sets one) as the hub-wide setting."""
    gate = hub.settings.board_dependency_gate
    if gate is not None:
        await verbs_of(hub, HUB_PRINCIPAL).call(HUB_PROCESS, "write_dependency_gate", enabled=gate, room="",
                                                handle="env")


async def apply_settings(ctx: LoopContext) -> None:
    await apply_board_settings(ctx.hub)
    ctx.succeeded()


SWEEPER = Loop("sweeper", sweep_leases, interval=IDLE_MAX, lead="mycelium.lease-sweeper")
#: Once per process, no leader: the write is idempotent (every process that sets the variable asks
#: for the same hub-wide value, and the setting keeps no history).
SETTINGS = Loop("settings", apply_settings, interval=IDLE_MAX, once=True)
