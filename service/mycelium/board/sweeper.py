"""The lease sweeper: raises ``expired`` once for each lease that runs out.

Every replica runs it; the SQL function it calls takes a transaction advisory lock, so one sweep
runs at a time across replicas, and it records each announcement (keyed by the lease's claim id) in
the same transaction as the notice, so a restart neither repeats nor loses one. The sweeper only
decides *when* to look: it sleeps until the next lease is due, at most ``IDLE_MAX`` seconds (a new
claim runs at least a minute, so nothing it misses in between is due sooner).
"""

from __future__ import annotations

import asyncio
import logging

from mycelium.db.queries import q
from mycelium.hub import Hub

log = logging.getLogger("mycelium.board")

BATCH = 500
IDLE_MAX = 5.0


async def sweep_once(hub: Hub, batch: int = BATCH) -> list[tuple[str, str]]:
    """One sweep; the (room, key) of every lease it announced (none if another replica sweeps)."""
    rows = await hub.db.fetch(q("sweep_expired_leases"), batch)
    return [(r["room"], r["key"]) for r in rows]


async def sweep_leases(hub: Hub) -> None:
    while True:
        try:
            announced = await sweep_once(hub)
            if len(announced) == BATCH:
                continue
            due = await hub.db.fetchval(q("next_lease_expiry"))
        except Exception:
            log.exception("lease sweep failed")
            due = IDLE_MAX
        await asyncio.sleep(IDLE_MAX if due is None else min(max(due, 0.05), IDLE_MAX))


async def apply_board_settings(hub: Hub) -> None:
    """Write the environment's dependency gate (if it sets one) as the hub-wide setting, once."""
    gate = hub.settings.board_dependency_gate
    if gate is not None:
        await hub.db.fetchval(q("set_dependency_gate"), gate, "", "env")
