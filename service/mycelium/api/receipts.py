"""Receipts over HTTP: export (for offline verification), the hub's public keys, a full audit, rotation."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from litestar import Controller, get, post
from litestar.params import FromQuery

from mycelium.api.deps import VERBS, Annotated, HubDep, Query, VerbsDep
from mycelium.ledger import receipts as signing
from mycelium.verbs import NOBODY
from mycelium.verbs.transitions import export_row, key_read, receipt_keyring, receipts_of


class ReceiptController(Controller):
    path = "/api/receipts"
    dependencies = VERBS

    @get("/")
    async def export(
        self,
        verbs: VerbsDep,
        since: FromQuery[datetime | None] = None,
        agent: FromQuery[str | None] = None,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[dict[str, Any]]:
        """Receipts in id order, exactly as hashed; each agent and lane is one chain (page with
        ``after`` = the last ``id``)."""
        rows = await verbs.call(NOBODY, "export_receipts", since=since, agent=agent, after=after, limit=limit)
        return [export_row(r) for r in rows]

    @get("/keys")
    async def keys(self, verbs: VerbsDep) -> dict[str, Any]:
        """The public keyring: every key that ever signed, with its id (hex raw Ed25519 keys)."""
        return {"keys": [key_read(r) for r in await verbs.call(NOBODY, "receipt_keys")]}

    @post("/keys/rotate", status_code=201)
    async def rotate(self, hub: HubDep, verbs: VerbsDep) -> dict[str, Any]:
        """A new signing key for this hub; every other key is retired (old signatures stay valid)."""
        await verbs.call(NOBODY, "may_rotate_receipt_key")  # before a key is made on disk
        store = signing.KeyStore.for_data_dir(hub.settings.resolved_data_dir())
        key = await asyncio.to_thread(store.rotate)
        await verbs.call(NOBODY, "rotate_receipt_key", key_id=key.key_id, public_key=key.public_bytes)
        return {
            "key_id": key.key_id,
            "public_key": key.public_bytes.hex(),
            "public_key_pem": key.public_pem(),
        }

    @get("/verify")
    async def verify(self, verbs: VerbsDep, agent: FromQuery[str | None] = None) -> dict[str, Any]:
        """The chain checked in SQL, and every signature checked against the keyring."""
        chain = [dict(r.items()) for r in await verbs.call(NOBODY, "verify_receipt_chain", agent=agent)]
        keyring = await receipt_keyring(verbs)
        checked, problems = 0, []
        async for r in receipts_of(verbs, agent):
            checked += 1
            wrong = signing.signature_problem(r, keyring)
            if wrong is not None:
                problems.append({"receipt_id": r["receipt_id"], "agent_id": r["agent_id"],
                                 "lane": r["lane"], "seq": r["seq"], "problem": wrong})
        return {
            "checked": checked,
            "chain_problems": chain,
            "signature_problems": problems,
            "ok": not chain and not problems,
        }
