"""Join codes and member tokens, kept in the database: a code minted on one replica is redeemed on
another, once, even by a thousand concurrent redeemers; the member token the hub signs verifies on
every replica and opens the private room it joined."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from mycelium.auth import codes
from tests.auth.conftest import bearer
from tests.support.cli import mycelium


def test_codes_are_normalised_before_hashing():
    code = codes.new_code()
    assert len(code) == 14 and code.count("-") == 2
    assert codes.code_hash(code.upper().replace("-", " ")) == codes.code_hash(code)


@pytest.mark.slow
def test_a_code_minted_on_one_replica_is_redeemed_once_on_another_and_its_token_opens_the_room(
        replicas, provider):
    one, two = (h.url for h in replicas)
    alice = bearer(provider.token("alice"))
    r = httpx.post(one + "/api/rooms", json={"name": "vault", "is_public": False, "owner": "alice"}, headers=alice)
    assert r.status_code == 201, r.text
    # a join code for another handle is refused: alice may act only as alice
    r = httpx.post(one + "/api/rooms/vault/joins", json={"handle": "dave"}, headers=alice)
    assert r.status_code == 403 and r.json()["error"] == "actor_mismatch"
    # an operator mints it for dave
    r = httpx.post(one + "/api/rooms/vault/joins", json={"handle": "dave"},
                   headers=bearer(provider.token("olga", role="operator")))
    assert r.status_code == 201, r.text
    code = r.json()["code"]
    assert httpx.get(two + "/api/rooms/vault", headers=bearer(provider.token("dave"))).status_code == 404

    redeemed = httpx.post(two + "/api/joins/redeem", json={"code": code.upper()})  # no token needed
    assert redeemed.status_code == 200, redeemed.text
    body = redeemed.json()
    assert (body["room"], body["handle"]) == ("vault", "dave") and body["token"]
    again = httpx.post(one + "/api/joins/redeem", json={"code": code})
    assert again.status_code == 400 and again.json()["error"] == "join_code_invalid"

    token = body["token"]
    for url in (one, two):  # the hub's own issuer, verified on every replica with no fetch
        who = httpx.get(url + "/api/whoami", headers=bearer(token)).json()
        assert (who["handle"], who["role"], who["issuer"]) == ("dave", "agent", "mycelium-hub")
        assert httpx.get(url + "/api/rooms/vault", headers=bearer(token)).status_code == 200
    # a token of another hub's key (same issuer name) is refused
    forged = provider.token("dave", iss="mycelium-hub", kid="ec-1")
    r = httpx.get(one + "/api/whoami", headers=bearer(forged))
    assert r.status_code == 401, r.text


@pytest.mark.slow
def test_a_thousand_concurrent_redemptions_of_one_code_give_one_token(replicas, provider):
    one, two = (h.url for h in replicas)
    op = bearer(provider.token("olga", role="operator"))
    assert httpx.post(one + "/api/rooms", json={"name": "lobby"}, headers=op).status_code == 201
    code = httpx.post(one + "/api/rooms/lobby/joins", json={"handle": "erin"}, headers=op).json()["code"]

    async def storm() -> list[int]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120, pool=None)) as client:
            answers = await asyncio.gather(*[
                client.post((one, two)[i % 2] + "/api/joins/redeem", json={"code": code}) for i in range(1000)])
        return [a.status_code for a in answers]

    statuses = asyncio.run(storm())
    assert statuses.count(200) == 1 and statuses.count(400) == 999, sorted(set(statuses))


async def test_a_code_redeems_once_in_process_and_an_expired_one_is_refused(gated, provider, admin_conn):
    """The two join routes on one in-process hub (the replicas' tests above run them across
    processes): a code opens its room once; one past its expiry is refused like a used one."""
    op = bearer(provider.token("olga", role="operator"))
    assert (await gated.post("/api/rooms", json={"name": "lobby"}, headers=op)).status_code == 201
    fresh, old = [(await gated.post("/api/rooms/lobby/joins", json={"handle": h, "ttl_seconds": 600},
                                    headers=op)).json()["code"] for h in ("erin", "finn")]
    redeemed = await gated.post("/api/joins/redeem", json={"code": fresh})
    assert redeemed.status_code == 200, redeemed.text
    assert redeemed.json()["handle"] == "erin" and redeemed.json()["room"] == "lobby"
    again = await gated.post("/api/joins/redeem", json={"code": fresh})
    assert again.status_code == 400 and "used or expired" in again.json()["message"]
    await admin_conn.execute("UPDATE mycelium.join_codes SET expires_at = now() - interval '1 second' "
                             "WHERE handle = 'finn'")
    r = await gated.post("/api/joins/redeem", json={"code": old})
    assert r.status_code == 400 and "used or expired" in r.json()["message"]
    assert await admin_conn.fetchval("SELECT redeemed_at FROM mycelium.join_codes WHERE handle = 'finn'") is None


@pytest.mark.slow
def test_mycelium_join_keeps_the_membership_for_the_folder_and_acts_as_it(replicas, provider, tmp_path):
    import os
    import stat
    import subprocess

    one, two = (h.url for h in replicas)
    op = bearer(provider.token("olga", role="operator"))
    assert httpx.post(one + "/api/rooms", json={"name": "vault", "is_public": False, "owner": "olga"},
                      headers=op).status_code == 201
    code = httpx.post(one + "/api/rooms/vault/joins", json={"handle": "frank"}, headers=op).json()["code"]
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MYCELIUM_TOKEN", "MYCELIUM_HANDLE", "USER")}

    def cli(*args: str, cwd) -> subprocess.CompletedProcess[str]:
        return mycelium(*args, url=two, base=env, cwd=cwd)

    joined = cli("join", code, cwd=project)
    assert joined.returncode == 0 and "joined vault as @frank" in joined.stdout, joined.stderr
    member = project / ".mycelium" / "member.json"
    assert stat.S_IMODE(member.stat().st_mode) == 0o600
    assert "member.json" in (project / ".mycelium" / ".gitignore").read_text().split()
    # from a folder below, the CLI is frank, with frank's token, and sees the private room
    who = cli("whoami", "--sources", cwd=project / "src")
    assert who.returncode == 0 and who.stdout.startswith("@frank (agent)"), who.stderr
    shown = cli("room", "show", "vault", cwd=project / "src")
    assert shown.returncode == 0, shown.stderr
    sent = cli("room", "send", "hello from frank", "--room", "vault", cwd=project / "src")
    assert sent.returncode == 0, sent.stderr
    assert cli("join", code, cwd=project).returncode != 0  # used
