"""The Postgres store's lean claim: the ledger loop asks for the row only with answers other than run."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import timedelta

import pytest

from mycelium.ledger.postgres import PostgresLedgerStorage
from mycelium.ledger.record import ClaimRequest


async def test_a_claim_without_its_row_carries_the_same_transition_with_every_answer_but_run(db_dsn):
    store = PostgresLedgerStorage(db_dsn, min_size=1, max_size=1)
    try:
        request = ClaimRequest(
            request_id="r1", transition_key="k1", tool="charge", owner="w:1",
            side_effect_class="keyed_mutate", agent_id="a", policy_version="v1", key_param="key",
            key_ttl=60.0, incoming_key="idem-1", scope={"thread_id": "t"}, args_hash="ab",
        )  # fmt: skip
        run = await store.claim(request, with_row=False)
        assert (run.action, run.fence) == ("run", 1)
        with pytest.raises(LookupError):
            _ = run.transition
        await store.complete("r1", "w:1", 1, {"n": [1, 2.5, "ü"], "ok": True})

        again = replace(request, owner="w:2")
        lean, full = await store.claim(again, with_row=False), await store.claim(again)
        assert (lean.action, lean.gate, lean.fence) == (full.action, full.gate, full.fence) == ("return", "RETURN", 1)
        lean_row, full_row = asdict(lean.transition), asdict(full.transition)
        assert lean_row.pop("provider_key_ttl") == 60
        assert full_row.pop("provider_key_ttl") == timedelta(seconds=60)
        assert lean_row == full_row
        assert lean_row["result"] == {"n": [1, 2.5, "ü"], "ok": True} and lean_row["scope"] == {"thread_id": "t"}
    finally:
        await store.aclose()
