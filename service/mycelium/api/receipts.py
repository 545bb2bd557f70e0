"""Receipts over HTTP: export (for offline verification), the hub's public keys, a full audit, rotation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Controller, get, post
from litestar.params import FromQuery

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.db.queries import q
from mycelium.ledger import receipts as signing


def export_row(row: Any) -> dict[str, Any]:
    out = dict(row.items())
    out.pop("recorded_at_ts", None)
    return out


class ReceiptController(Controller):
    path = "/api/receipts"

    @get("/")
    async def export(
        self,
        hub: HubDep,
        since: FromQuery[datetime | None] = None,
        agent: FromQuery[str | None] = None,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[dict[str, Any]]:
        """Receipts in id order, exactly as hashed; each agent and lane is one chain (page with
        ``after`` = the last ``id``)."""
        rows = await hub.db.fetch(q("export_receipts"), since, agent, after, limit)
        return [export_row(r) for r in rows]

    @get("/keys")
    async def keys(self, hub: HubDep) -> dict[str, Any]:
        """The public keyring: every key that ever signed, with its id (hex raw Ed25519 keys)."""
        rows = await hub.db.fetch(q("receipt_keys"))
        return {
            "keys": [
                {
                    "key_id": r["key_id"],
                    "algorithm": r["algorithm"],
                    "public_key": bytes(r["public_key"]).hex(),
                    "created_at": r["created_at"],
                    "retired_at": r["retired_at"],
                }
                for r in rows
            ]
        }

    @post("/keys/rotate", status_code=201)
    async def rotate(self, hub: HubDep) -> dict[str, Any]:
        """A new signing key for this hub; every other key is retired (old signatures stay valid)."""
        key = await signing.rotate(hub.db, signing.KeyStore.for_data_dir(hub.settings.resolved_data_dir()))
        return {
            "key_id": key.key_id,
            "public_key": key.public_bytes.hex(),
            "public_key_pem": key.public_pem(),
        }

    @get("/verify")
    async def verify(self, hub: HubDep, agent: FromQuery[str | None] = None) -> dict[str, Any]:
        """The chain checked in SQL, and every signature checked against the keyring."""
        chain = [dict(r.items()) for r in await hub.db.fetch(q("verify_receipt_chain"), agent)]
        keyring = {r["key_id"]: bytes(r["public_key"]) for r in await hub.db.fetch(q("receipt_keys"))}
        checked, after, problems = 0, 0, []
        while True:
            rows = await hub.db.fetch(q("export_receipts"), None, agent, after, 5000)
            if not rows:
                break
            after = rows[-1]["id"]
            for r in rows:
                checked += 1
                where = {
                    "receipt_id": r["receipt_id"],
                    "agent_id": r["agent_id"],
                    "lane": r["lane"],
                    "seq": r["seq"],
                }
                if not r["signature"]:
                    problems.append({**where, "problem": "unsigned"})
                elif r["key_id"] not in keyring or not signing.check_signature(
                    keyring[r["key_id"]], r["hash"], r["signature"]
                ):
                    problems.append({**where, "problem": f"bad signature (key {r['key_id']})"})
        return {
            "checked": checked,
            "chain_problems": chain,
            "signature_problems": problems,
            "ok": not chain and not problems,
        }
