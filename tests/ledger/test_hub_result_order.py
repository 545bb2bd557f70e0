"""A redispatch through the hub over HTTP returns the stored result exactly as the first caller got
it: keys in their order, numbers as written (the jsonb column sorts an object's keys). A real hub
process, real HTTP, and the row read with plain SQL to show what the jsonb column alone would give."""

from __future__ import annotations

import json

import asyncpg
import httpx
import pytest

from mycelium import HubLedgerStorage, ToolTransitionBinding, ledger, side_effect
from mycelium.ledger.ledger import ActionLedger
from tests.support.processes import HubProcess

pytestmark = pytest.mark.slow

RESULT = {"zebra": 1, "apple": {"y": 2, "b": [3, {"zz": 1, "a": 0}]}, "mango": 1.5, "b": None}
BINDING = ToolTransitionBinding.for_tool(side_effect_class="non_idempotent_mutate")


@pytest.fixture
def hub_process(hub_processes) -> HubProcess:
    return hub_processes()


def charge_tool(led: ActionLedger, effects: list[str]):
    @ledger(action_ledger=led, transition_binding=BINDING)
    async def charge(customer: str) -> dict:
        async with side_effect():
            effects.append(customer)
        return json.loads(json.dumps(RESULT))

    return charge


async def test_a_redispatch_through_the_hub_returns_the_result_in_the_first_callers_key_order(
    hub_process, db_dsn
):
    effects: list[str] = []
    first_store, again_store = HubLedgerStorage(hub_process.url), HubLedgerStorage(hub_process.url)
    try:
        first_led = ActionLedger(first_store, agent_id="order-agent", policy_version="1")
        first = await charge_tool(first_led, effects)("c1", tool_call_id="call-1")
        # another worker (its own store and HTTP client) redispatches the same call
        again_led = ActionLedger(again_store, agent_id="order-agent", policy_version="1")
        again = await charge_tool(again_led, effects)("c1", tool_call_id="call-1")
    finally:
        await first_store.aclose()
        await again_store.aclose()
    assert effects == ["c1"]
    assert json.dumps(again) == json.dumps(first) == json.dumps(RESULT)

    conn = await asyncpg.connect(db_dsn)
    try:
        stored = await conn.fetchrow("SELECT result::text, result_text FROM mycelium.transitions WHERE tool = $1",
                                     "charge")
    finally:
        await conn.close()
    assert stored["result_text"] == json.dumps(RESULT, separators=(",", ":"))
    assert list(json.loads(stored["result"])) != list(RESULT)  # the jsonb column alone sorts the keys


async def test_the_routes_keep_the_order_a_client_sent_and_refuse_bad_result_text(hub_process):
    claim = {"transition_key": "k", "tool": "pay", "owner": "w:1", "side_effect_class": "non_idempotent_mutate"}
    async with httpx.AsyncClient(base_url=hub_process.url) as http:
        for rid, body in (("plain", {"result": RESULT}), ("text", {"result_text": json.dumps(RESULT)})):
            got = (await http.post("/api/transitions/claim", json={**claim, "request_id": rid,
                                                                   "transition_key": "k" + rid})).json()
            fenced = {"request_id": rid, "owner": "w:1", "fence": got["transition"]["fence"]}
            done = await http.post("/api/transitions/complete", json={**fenced, **body})
            assert done.status_code == 200, done.text
            assert json.dumps(done.json()["result"]) == json.dumps(RESULT)
            again = (await http.post("/api/transitions/claim", json={**claim, "request_id": rid, "owner": "w:2",
                                                                     "transition_key": "k" + rid})).json()
            assert again["action"] == "return"
            assert json.dumps(again["transition"]["result"]) == json.dumps(RESULT)
            shown = (await http.get(f"/api/transitions/{rid}")).json()
            assert json.dumps(shown["result"]) == json.dumps(RESULT)
            listed = (await http.get("/api/transitions", params={"tool": "pay"})).json()
            assert all(json.dumps(t["result"]) == json.dumps(RESULT) for t in listed)

        got = (await http.post("/api/transitions/claim", json={**claim, "request_id": "bad",
                                                               "transition_key": "kbad"})).json()
        fenced = {"request_id": "bad", "owner": "w:1", "fence": got["transition"]["fence"]}
        deep = "[" * 5000 + "]" * 5000
        for body, words in (({"result_text": "{not json"}, "not JSON"),
                            ({"result_text": "1", "result": 1}, "not both"),
                            ({"result_text": 5}, "result_text"),
                            ({"result_text": deep}, "nests too deeply"),
                            ({"result_text": '{"a": "nul \\u0000 here"}'}, "Unicode")):
            refused = await http.post("/api/transitions/complete", json={**fenced, **body})
            assert refused.status_code in (400, 422), refused.text
            assert words in refused.text
        row = (await http.get("/api/transitions/bad")).json()
        assert row["terminal_outcome"] == "IN_FLIGHT" and row["result"] is None  # nothing was written
