"""The receipt signer: signs each receipt's hash with this process's key as receipts appear.

Every process may run it: ``mycelium.sign_receipts`` stores one signature per receipt (a second
signer's copy of the same receipt is dropped, its primary key) and moves each chain's signed-through
mark only up, so two signers racing over the same batch waste a little work and store each
signature once.
"""

from __future__ import annotations

import asyncio
import logging

from mycelium.errors import Refusal
from mycelium.ledger.receipts import KeyStore, ReceiptKey
from mycelium.verbs import HUB_PROCESS, Verbs
from mycelium.workers.loop import Loop, LoopContext

log = logging.getLogger("mycelium.receipts")

INTERVAL = 1.0


async def register(verbs: Verbs, key: ReceiptKey) -> None:
    await verbs.call(HUB_PROCESS, "register_receipt_key", key_id=key.key_id, public_key=key.public_bytes)


async def sign_pending(verbs: Verbs, key: ReceiptKey, batch: int = 500) -> int:
    """Sign every receipt still waiting; returns how many were signed."""
    total = 0
    while True:
        rows = await verbs.call(HUB_PROCESS, "unsigned_receipts", batch=batch)
        if not rows:
            return total
        ids = [r["id"] for r in rows]
        signatures = [key.sign(bytes(r["hash"]).hex()) for r in rows]
        await verbs.call(HUB_PROCESS, "sign_receipts", key_id=key.key_id, ids=ids, signatures=signatures)
        total += len(rows)
        if len(rows) < batch:
            return total


async def sign_receipts(ctx: LoopContext) -> None:
    hub = ctx.hub
    store = KeyStore.for_data_dir(hub.settings.resolved_data_dir())
    verbs = ctx.verbs
    key = await asyncio.to_thread(store.current)
    await register(verbs, key)
    while True:
        try:
            await sign_pending(verbs, key)
        except Refusal as refusal:
            if refusal.error != "key_not_active":
                raise
            log.warning("receipt key %s was retired elsewhere; this process makes a new one", key.key_id)
            key = await asyncio.to_thread(store.rotate)
            await register(verbs, key)
            continue
        ctx.succeeded()
        await asyncio.sleep(INTERVAL)


RECEIPTS = Loop("receipts", sign_receipts, interval=INTERVAL)
