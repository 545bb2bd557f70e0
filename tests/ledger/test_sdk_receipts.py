"""Receipts the SDK signs for a store that is not the hub's database (YAML ``audit_receipt``): chained
and signed in the hub's export format, so ``mycelium receipts verify --file`` checks them; an edit, a
deletion or another key is caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mycelium.ledger.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
transition:
  agent_id: shop-agent
  policy_version: "7"
action_ledger:
  storage: {storage}
  {where}
audit_receipt:
  signing_key_env: SHOP_SIGNING_KEY
  storage: file
  path: {receipts}
tools:
  pay:
    side_effect_class: non_idempotent_mutate
"""


def verify(receipts: Path, keys: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mycelium.cli.main", "receipts", "verify", "--file", str(receipts),
         "--public-key", str(keys), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("storage", ["memory", "file", "redis"])
def test_sdk_receipts_verify_with_the_hub_s_verifier_and_tampering_is_caught(
    storage, tmp_path, monkeypatch, request
):
    where = {"memory": "", "file": f"path: {tmp_path / 'ledger'}"}.get(storage)
    if storage == "redis":
        where = f"url: {request.getfixturevalue('redis_url')}"
    receipts = tmp_path / "receipts.jsonl"
    (tmp_path / "mycelium.yaml").write_text(CONFIG.format(storage=storage, where=where, receipts=receipts))
    monkeypatch.setenv("SHOP_SIGNING_KEY", "correct horse battery staple")
    cfg = load_config(tmp_path / "mycelium.yaml")

    def pay(amount: int) -> dict:
        if amount < 0:
            raise ValueError("negative")
        return {"paid": amount}

    tool = cfg.wrap_tool("pay", pay)
    assert tool(5, request_id="p1") == {"paid": 5}
    assert tool(5, request_id="p1") == {"paid": 5}  # a redispatch: no second receipt
    with pytest.raises(ValueError):
        tool(-1, request_id="p2")
    store = cfg.action_ledger().storage
    store.run_sync(store.release("p2", "not_executed", "ann", "nothing was charged"))
    store.close()

    lines = [json.loads(line) for line in receipts.read_text().splitlines()]
    assert [(r["request_id"], r["kind"], r["outcome"], r["seq"]) for r in lines] == [
        ("p1", "tool", "COMPLETED", 1),
        ("p2", "tool", "FAILED_BEFORE_EFFECT", 2),
        ("p2", "release", "FAILED_BEFORE_EFFECT", 3),
    ]
    assert {r["agent_id"] for r in lines} == {"shop-agent"} and lines[2]["verified"] == "not_executed"
    keys = Path(str(receipts) + ".keys.json")
    ok = verify(receipts, keys)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout) == {"checked": 3, "problems": [], "ok": True}

    edited = tmp_path / "edited.jsonl"
    lines[0]["error"] = "nothing happened"
    edited.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = json.loads(verify(edited, keys).stdout)
    assert [p["problem"] for p in out["problems"]] == ["content does not match its hash (edited)"]

    dropped = tmp_path / "dropped.jsonl"
    dropped.write_text(receipts.read_text().splitlines(keepends=True)[0] + receipts.read_text().splitlines(
        keepends=True)[2])
    assert "gap" in json.loads(verify(dropped, keys).stdout)["problems"][0]["problem"]

    monkeypatch.setenv("SHOP_SIGNING_KEY", "another secret")
    other = load_config(tmp_path / "mycelium.yaml").action_ledger().storage.receipts.keyring_path
    ring = json.loads(other.read_text())
    ring["keys"] = ring["keys"][1:]  # only the new key
    stranger = tmp_path / "stranger.json"
    stranger.write_text(json.dumps(ring))
    assert "unknown key" in json.loads(verify(receipts, stranger).stdout)["problems"][0]["problem"]


def test_audit_receipt_without_its_key_is_a_config_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("SHOP_SIGNING_KEY", raising=False)
    (tmp_path / "mycelium.yaml").write_text(
        CONFIG.format(storage="memory", where="", receipts=tmp_path / "r.jsonl")
    )
    with pytest.raises(ConfigError, match="SHOP_SIGNING_KEY"):
        load_config(tmp_path / "mycelium.yaml").action_ledger()
    assert not os.path.exists(tmp_path / "r.jsonl")
