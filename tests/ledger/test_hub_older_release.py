"""The SDK's hub store against a hub of release 0.1.0 (CHANGELOG.md), which predates
``result_text``: its completion route refuses the field (422, nothing written), so the store completes
with the result as a value instead, and a redispatch returns that result, the side effect run once.
A real hub process of that release, on a database that release built, over real HTTP."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from mycelium import HubLedgerStorage, ToolTransitionBinding, ledger, side_effect
from mycelium.ledger.ledger import ActionLedger
from tests.foundation.test_release_upgrade import migrate_with_release, release_env, release_tree
from tests.support.processes import HubProcess

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """Release 0.1.0's source tree: the last release without result_text."""
    return release_tree(tmp_path_factory, "0.1.0")

RESULT = {"zebra": 1, "apple": {"y": 2, "b": [3]}, "mango": 1.5}
BINDING = ToolTransitionBinding.for_tool(side_effect_class="non_idempotent_mutate")


@pytest.fixture
async def old_hub(release, pg_server, tmp_path):
    name = await pg_server.create_database(template="template1")
    dsn = pg_server.dsn(name)
    await asyncio.to_thread(migrate_with_release, release, dsn)
    hub = HubProcess(data_dir=tmp_path / "old", database_url=dsn, env=release_env(release),
                     extra=["--no-mirror"])
    try:
        hub.wait_ready()
        yield hub
    finally:
        hub.stop()


def charge_tool(led: ActionLedger, effects: list[str]):
    @ledger(action_ledger=led, transition_binding=BINDING)
    async def charge(customer: str) -> dict:
        async with side_effect():
            effects.append(customer)
        return json.loads(json.dumps(RESULT))

    return charge


async def test_an_older_hub_refuses_result_text_and_the_store_completes_with_the_value(old_hub):
    async with httpx.AsyncClient(base_url=old_hub.url, timeout=30) as client:
        # what the older hub says to this release's completion body (the reason for the fallback)
        claim = await client.post("/api/transitions/claim", json={
            "request_id": "probe", "transition_key": "probe", "tool": "probe", "owner": "w:1",
            "side_effect_class": "non_idempotent_mutate"})
        assert claim.status_code in (200, 201), claim.text
        refused = await client.post("/api/transitions/complete", json={
            "request_id": "probe", "owner": "w:1", "fence": 1, "result_text": "{}"})
        assert refused.status_code == 422, refused.text
        assert any(p.get("key") == "result_text" and "extra" in p.get("message", "").lower()
                   for p in refused.json()["problems"]), refused.text
        probe = (await client.get("/api/transitions/probe")).json()
        assert probe["terminal_outcome"] == "IN_FLIGHT"  # nothing was written

    effects: list[str] = []
    first_store, again_store = HubLedgerStorage(old_hub.url), HubLedgerStorage(old_hub.url)
    try:
        first_led = ActionLedger(first_store, agent_id="old-hub-agent", policy_version="1")
        first = await charge_tool(first_led, effects)("c1", tool_call_id="call-1")
        second = await charge_tool(first_led, effects)("c2", tool_call_id="call-2")  # the known path
        again_led = ActionLedger(again_store, agent_id="old-hub-agent", policy_version="1")
        again = await charge_tool(again_led, effects)("c1", tool_call_id="call-1")
    finally:
        await first_store.aclose()
        await again_store.aclose()
    assert effects == ["c1", "c2"]  # each side effect once; the redispatch ran nothing
    assert first == second == again == RESULT  # the same value (the older hub's jsonb orders the keys)
    async with httpx.AsyncClient(base_url=old_hub.url, timeout=30) as client:
        listed = (await client.get("/api/transitions/", params={"agent": "old-hub-agent"})).json()
    rows = listed if isinstance(listed, list) else listed["transitions"]
    assert sorted((r["terminal_outcome"], json.dumps(r["result"], sort_keys=True)) for r in rows) == [
        ("COMPLETED", json.dumps(RESULT, sort_keys=True))] * 2
