"""The gate on real processes: two gated replicas on one database accept the same token and refuse
the same bad ones, the CLI sends MYCELIUM_TOKEN and `mycelium whoami` says who it acts as, and a
gate that cannot start says why in one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx
import pytest

from tests.auth.conftest import bearer
from tests.support.cli import mycelium
from tests.support.processes import HubProcess


def cli(url: str, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "MYCELIUM_TOKEN"}
    return mycelium(*args, url=url, base=base, env={"MYCELIUM_HANDLE": "alice", **({"MYCELIUM_TOKEN": token} if token else {})})


@pytest.mark.slow
def test_two_gated_replicas_share_the_issuer_and_the_cli_carries_the_token(replicas, provider):
    one, two = (h.url for h in replicas)
    alice = provider.token("alice")
    r = httpx.post(one + "/api/rooms", json={"name": "atlas"}, headers=bearer(alice))
    assert r.status_code == 201, r.text
    for url in (one, two):
        assert httpx.get(url + "/api/rooms/atlas", headers=bearer(alice)).status_code == 200
        refused = httpx.get(url + "/api/rooms/atlas", headers=bearer(provider.token("alice", aud="other")))
        assert refused.status_code == 401 and "not for this hub" in refused.json()["reason"]
        assert httpx.get(url + "/health").status_code == 200

    no_token = cli(two, "room", "ls")
    assert no_token.returncode != 0 and "401 unauthenticated" in no_token.stderr
    assert "Traceback" not in no_token.stderr
    listed = cli(two, "room", "ls", token=alice)
    assert listed.returncode == 0 and "atlas" in listed.stdout, listed.stderr
    who = cli(two, "whoami", "--sources", token=alice)
    assert who.returncode == 0, who.stderr
    assert who.stdout.startswith("@alice (agent)") and "verified" in who.stdout
    assert "MYCELIUM_TOKEN" in who.stdout
    # writing as someone else through the CLI is the database's refusal, named
    sent = cli(one, "room", "send", "hello", "--room", "atlas", "--as", "bob", token=alice)
    assert sent.returncode != 0 and "actor_mismatch" in sent.stderr, sent.stderr


def test_whoami_on_an_open_hub_says_nothing_verifies_the_handle(tmp_path, pg_server):
    name = asyncio.run(pg_server.create_database())
    hub = HubProcess(data_dir=tmp_path / "hub", database_url=pg_server.dsn(name), extra=["--no-mirror"])
    try:
        hub.wait_ready()
        who = cli(hub.url, "whoami")
        assert who.returncode == 0 and who.stdout.startswith("@alice on ") and "not gated" in who.stdout
    finally:
        hub.stop()
        asyncio.run(pg_server.drop_database(name))


def test_a_gate_that_cannot_start_says_why_in_one_line(tmp_path):
    env = {**os.environ, "MYCELIUM_AUTH": "on", "MYCELIUM_AUTH_ISSUERS": '[{"issuer": "x", "algorithms": ["none"]}]'}
    out = subprocess.run([sys.executable, "-m", "mycelium.cli.main", "up", "--data-dir", str(tmp_path / "d")],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == "mycelium up: the token gate cannot start: issuer 'x': algorithm none is not allowed"
