"""The receipt signer: signs each receipt's hash with this process's key as receipts appear.

Every process may run it: ``mycelium.sign_receipts`` stores one signature per receipt (a second
signer's copy of the same receipt is dropped, its primary key) and moves each chain's signed-through
mark only up, so two signers racing over the same batch waste a little work and store each
signature once.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from mycelium.errors import refusal_from_db
from mycelium.ledger.receipts import KeyStore, register, sign_pending
from mycelium.workers.loop import Loop, LoopContext

log = logging.getLogger("mycelium.receipts")

INTERVAL = 1.0


async def sign_receipts(ctx: LoopContext) -> None:
    hub = ctx.hub
    store = KeyStore.for_data_dir(hub.settings.resolved_data_dir())
    key = await asyncio.to_thread(store.current)
    await register(hub.db, key)
    while True:
        try:
            await sign_pending(hub.db, key)
        except asyncpg.PostgresError as exc:
            refusal = refusal_from_db(exc)
            if refusal is None or refusal.error != "key_not_active":
                raise
            log.warning("receipt key %s was retired elsewhere; this process makes a new one", key.key_id)
            key = await asyncio.to_thread(store.rotate)
            await register(hub.db, key)
            continue
        ctx.succeeded()
        await asyncio.sleep(INTERVAL)


RECEIPTS = Loop("receipts", sign_receipts, interval=INTERVAL)
