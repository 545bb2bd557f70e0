"""The token gate: off by default; on, a request needs a valid bearer JWT of a configured issuer,
and every kind of bad token is refused with 401, a reason and WWW-Authenticate."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mycelium.auth import tokens
from mycelium.auth.issuers import IssuerConfigError, parse_issuers
from tests.auth.conftest import AUDIENCE, ISSUER, SECRET, SECRET_ISSUER, Provider, bearer


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed_by_hand(header: dict, payload: dict, secret: bytes) -> str:
    signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"
    return f"{signing}.{_b64(hmac.new(secret, signing.encode(), hashlib.sha256).digest())}"


async def test_with_the_gate_off_nothing_is_asked_and_whoami_says_so(client):
    assert (await client.get("/api/whoami")).json() == {"gated": False}
    assert (await client.get("/api/rooms")).status_code == 200


async def test_a_valid_token_admits_and_whoami_names_the_principal(gated, provider: Provider):
    for kid in ("rsa-1", "ec-1"):
        r = await gated.get("/api/whoami", headers=bearer(provider.token("alice", kid=kid)))
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["gated"], body["handle"], body["role"], body["subject"], body["issuer"]) == \
            (True, "alice", "agent", "user-alice", ISSUER)
    # the HMAC issuer, with its own secret
    now = int(time.time())
    shared = jwt.encode({"iss": SECRET_ISSUER, "aud": AUDIENCE, "handle": "bob", "exp": now + 60}, SECRET,
                        algorithm="HS256")
    assert (await gated.get("/api/whoami", headers=bearer(shared))).json()["handle"] == "bob"


async def test_health_and_the_docs_stay_open(gated):
    assert (await gated.get("/health")).status_code == 200
    assert (await gated.get("/schema/openapi.json")).status_code == 200


async def test_no_token_is_401_with_a_challenge(gated):
    r = await gated.get("/api/rooms")
    assert r.status_code == 401
    assert r.json()["error"] == "unauthenticated"
    assert r.headers["www-authenticate"].startswith('Bearer realm="mycelium"')
    assert (await gated.get("/api/rooms", headers={"authorization": "Basic YTpi"})).status_code == 401


async def test_every_bad_token_is_refused_with_its_reason(gated, provider: Provider):
    now = int(time.time())
    rsa_public_pem = provider.keys["rsa-1"][0].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    good = provider.token("alice")
    head, body, sig = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    tampered = f"{head}.{_b64(json.dumps({**claims, 'handle': 'mallory'}).encode())}.{sig}"
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cases = {
        "expired": (provider.token(exp=now - 120), "expired"),
        "not yet valid": (provider.token(nbf=now + 600), "not valid yet"),
        "wrong iss": (provider.token(iss="https://evil.example"), "unknown issuer"),
        "wrong aud": (provider.token(aud="someone-else"), "not for this hub"),
        "no exp": (provider.token(exp=None), "no exp claim"),
        "unknown kid": (jwt.encode({**claims}, stranger, algorithm="RS256", headers={"kid": "nope"}),
                        "unknown key id"),
        "signed by another key with a known kid": (
            jwt.encode({**claims}, stranger, algorithm="RS256", headers={"kid": "rsa-1"}), "bad signature"),
        "alg none": (f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT'}).encode())}.{body}.", "alg none"),
        "HS256 with the RSA public key as the secret": (
            _signed_by_hand({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims, rsa_public_pem),
            "algorithm HS256 is not allowed"),
        "tampered payload": (tampered, "bad signature"),
        "garbage": ("not.a.token", "malformed"),
        "unknown role": (provider.token(role="root"), "unknown role"),
        "no handle": (provider.token(handle=None), "no handle"),
    }
    for name, (token, reason) in cases.items():
        r = await gated.get("/api/rooms", headers=bearer(token))
        assert r.status_code == 401, name
        body_ = r.json()
        assert body_["error"] == "invalid_token" and reason in body_["reason"], (name, body_)
        assert 'error="invalid_token"' in r.headers["www-authenticate"], name


async def test_a_new_key_is_fetched_for_its_kid_and_a_rotated_out_key_stops_working(
        gated, provider: Provider, monkeypatch):
    monkeypatch.setattr(tokens, "JWKS_MIN_REFRESH", 0.0)
    old = provider.token("alice", kid="rsa-1")
    assert (await gated.get("/api/whoami", headers=bearer(old))).status_code == 200
    provider.add("rsa-2", rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")
    provider.published.remove("rsa-1")  # rotated out at the provider
    fetched = provider.fetches
    r = await gated.get("/api/whoami", headers=bearer(provider.token("carol", kid="rsa-2")))
    assert r.status_code == 200 and r.json()["handle"] == "carol"
    assert provider.fetches == fetched + 1
    # the old kid is gone from the set the hub now holds
    r = await gated.get("/api/whoami", headers=bearer(provider.token("alice", kid="rsa-1")))
    assert r.status_code == 401 and "unknown key id" in r.json()["reason"]


@pytest.mark.parametrize(("config", "problem"), [
    ({"issuer": "x", "algorithms": ["none"], "secret": SECRET}, "not allowed"),
    ({"issuer": "x", "algorithms": ["HS256"], "jwks_url": "http://127.0.0.1/j"}, "no HMAC"),
    ({"issuer": "x", "algorithms": ["RS256"], "secret": SECRET}, "only HS256"),
    ({"issuer": "x", "algorithms": ["HS256"], "secret": SECRET, "keys": [{"kty": "oct"}]}, "together"),
    ({"issuer": "x", "algorithms": ["HS256"], "secret": "short"}, "at least 32"),
    ({"issuer": "x", "algorithms": ["RS256"]}, "jwks_url, keys or a secret"),
    ({"issuer": "x", "algorithms": ["RS256"], "jwks_url": "u", "colour": 1}, "unknown field colour"),
])
def test_an_unusable_issuer_configuration_is_refused_naming_the_problem(config, problem):
    with pytest.raises(IssuerConfigError, match=problem):
        parse_issuers(json.dumps([config]))


def test_the_hub_does_not_start_gated_without_issuers(db_dsn, settings_for):
    from mycelium.api.app import create_app

    with pytest.raises(IssuerConfigError, match="names no issuer"):
        create_app(settings_for(db_dsn, auth=True))


@pytest.mark.slow
async def test_a_remembered_token_is_not_checked_again_until_it_expires(monkeypatch):
    verifier = tokens.TokenVerifier(
        parse_issuers(json.dumps([{"issuer": SECRET_ISSUER, "algorithms": ["HS256"], "secret": SECRET}])),
        leeway=0)
    checks = []
    real = tokens.TokenVerifier._check

    async def counted(self, token):
        checks.append(token)
        return await real(self, token)

    monkeypatch.setattr(tokens.TokenVerifier, "_check", counted)
    token = jwt.encode({"iss": SECRET_ISSUER, "sub": "alice", "handle": "alice", "exp": int(time.time()) + 2},
                       SECRET, algorithm="HS256")
    for _ in range(3):
        assert (await verifier.verify(token)).handle == "alice"
    assert len(checks) == 1
    time.sleep(3.1)  # past its exp: remembered or not, it is refused
    with pytest.raises(tokens.TokenRefused, match="expired"):
        await verifier.verify(token)
