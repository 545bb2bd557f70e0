"""The ledger over HTTP: routes that call the same SQL verbs, the SDK's hub store against a real hub
process, and the operator CLI (transitions, receipts) against it."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from mycelium import HubLedgerStorage, LedgerHardBlockError, ToolTransitionBinding, ledger, side_effect
from mycelium.ledger.ledger import ActionLedger
from tests.support.cli import mycelium
from tests.support.processes import HubProcess

ROOT = Path(__file__).resolve().parents[2]


def claim_body(rid: str, owner: str, **kw) -> dict:
    return {
        "request_id": rid,
        "transition_key": "k-" + rid,
        "tool": "pay",
        "owner": owner,
        "side_effect_class": "non_idempotent_mutate",
        "agent_id": "agent-1",
        **kw,
    }


async def test_the_routes_carry_the_database_s_decisions_and_refusals(client):
    first = (await client.post("/api/transitions/claim", json=claim_body("r1", "w:1"))).json()
    assert (first["gate"], first["action"], first["transition"]["fence"]) == ("ALLOW", "run", 1)
    dup = await client.post("/api/transitions/claim", json=claim_body("r1", "w:2"))
    assert dup.status_code == 200 and dup.json()["action"] == "poll"
    stale = await client.post(
        "/api/transitions/complete", json={"request_id": "r1", "owner": "w:2", "fence": 1}
    )
    assert stale.status_code == 409 and stale.json()["error"] == "fence_lost"
    done = await client.post(
        "/api/transitions/complete",
        json={"request_id": "r1", "owner": "w:1", "fence": 1, "result": {"ok": 1}},
    )
    assert done.json()["terminal_outcome"] == "COMPLETED" and done.json()["receipt_ref"].startswith("rcpt-")
    again = (await client.post("/api/transitions/claim", json=claim_body("r1", "w:2"))).json()
    assert (again["action"], again["transition"]["result"]) == ("return", {"ok": 1})
    shown = await client.get("/api/transitions/r1")
    assert shown.json()["terminal_outcome"] == "COMPLETED"
    listed = (
        await client.get("/api/transitions", params={"outcome": "COMPLETED", "agent": "agent-1"})
    ).json()
    assert [t["request_id"] for t in listed] == ["r1"]
    missing = await client.get("/api/transitions/nope")
    assert (missing.status_code, missing.json()["error"]) == (404, "transition_not_found")


async def test_bad_input_gets_a_4xx_naming_the_problem(client):
    cases = [
        ("/api/transitions/claim", {"request_id": "r"}, 422, "invalid_request"),
        (
            "/api/transitions/claim",
            claim_body("r", "w", side_effect_class="teleport"),
            422,
            "invalid_side_effect_class",
        ),
        ("/api/transitions/claim", {**claim_body("r", "w"), "extra": 1}, 422, "invalid_request"),
        (
            "/api/transitions/boundary",
            {"request_id": "r", "owner": "w", "fence": 1, "boundary": "over"},
            422,
            "invalid_request",
        ),
        (
            "/api/transitions/release",
            {"request_id": "r", "verified": "completed", "by": "", "reason": "x"},
            422,
            "invalid_request",
        ),
        (
            "/api/transitions/renew",
            {"request_id": "nope", "owner": "w", "fence": 1, "lease_ttl": 5},
            404,
            "transition_not_found",
        ),
    ]
    for path, body, status, code in cases:
        response = await client.post(path, json=body)
        assert (response.status_code, response.json()["error"]) == (status, code), (path, response.json())
    raw = await client.post(
        "/api/transitions/claim", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert raw.status_code == 400


@pytest.fixture
def hub_process(hub_processes) -> HubProcess:
    return hub_processes()


def cli(hub: HubProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return mycelium(*args, url=hub.url, env={"USER": "ann"}, cwd=ROOT, timeout=120)


@pytest.mark.slow
async def test_agents_without_database_access_ledger_through_the_hub(hub_process, tmp_path):
    store = HubLedgerStorage(hub_process.url)
    led = ActionLedger(store, agent_id="http-agent", policy_version="1", poll_interval=0.02)
    binding = ToolTransitionBinding.for_tool(side_effect_class="non_idempotent_mutate")
    effects = []

    @ledger(action_ledger=led, transition_binding=binding)
    async def spawn_subagent(task: str) -> dict:
        async with side_effect():
            effects.append(task)
            await asyncio.sleep(0.3)
        return {"task": task}

    results = await asyncio.gather(*(spawn_subagent("research", tool_call_id="c1") for _ in range(4)))
    assert results == [{"task": "research"}] * 4 and effects == ["research"]

    @ledger(action_ledger=led, transition_binding=binding)
    async def email(to: str) -> None:
        async with side_effect():
            raise ConnectionError("reset")

    with pytest.raises(ConnectionError):
        await email("x@y", tool_call_id="e1")
    with pytest.raises(LedgerHardBlockError) as blocked:
        await email("x@y", tool_call_id="e1")
    rid = blocked.value.details["request_id"]
    await store.aclose()

    # the operator sees it, releases it, and the receipts verify, online and offline
    ls = cli(hub_process, "transitions", "ls", "--outcome", "unknown", "--json")
    assert [t["request_id"] for t in json.loads(ls.stdout)] == [rid]
    shown = cli(hub_process, "transitions", "show", rid)
    assert "maybe_crossed" in shown.stdout
    rel = cli(
        hub_process, "transitions", "release", rid, "--not-executed", "--reason", "no mail in the sent log"
    )
    assert rel.returncode == 0 and "not_executed by ann" in rel.stdout, rel.stderr
    again = cli(hub_process, "transitions", "release", rid, "--completed", "--reason", "twice")
    assert again.returncode == 1 and "already_resolved" in again.stderr

    for _ in range(100):  # the hub signs receipts as they appear
        verified = cli(hub_process, "receipts", "verify")
        if verified.returncode == 0:
            break
        await asyncio.sleep(0.1)
    assert verified.returncode == 0 and "all intact and signed" in verified.stdout, verified.stdout
    out, keys = tmp_path / "receipts.jsonl", tmp_path / "keys.json"
    assert cli(hub_process, "receipts", "export", "--agent", "http-agent", "-o", str(out)).returncode == 0
    assert cli(hub_process, "receipts", "public-key", "-o", str(keys)).returncode == 0
    lines = out.read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["tool", "tool", "release"]
    offline = cli(hub_process, "receipts", "verify", "--file", str(out), "--public-key", str(keys))
    assert offline.returncode == 0, offline.stdout
    forged = [json.loads(x) for x in lines]
    forged[0]["outcome"] = "FAILED_BEFORE_EFFECT"
    out.write_text("".join(json.dumps(x) + "\n" for x in forged))
    caught = cli(hub_process, "receipts", "verify", "--file", str(out), "--public-key", str(keys))
    assert caught.returncode == 1 and "edited" in caught.stdout
