"""An identity provider for the gate's tests: RSA and EC keys, a JWKS served over real HTTP on
loopback (its keys can be rotated while it runs), and tokens minted with PyJWT."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://id.test.example"
AUDIENCE = "mycelium"
SECRET_ISSUER = "https://shared.test.example"
SECRET = "s" * 40
HUB_SECRET = "a deployment secret of at least thirty-two characters"


class Provider:
    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.published: list[str] = []
        self.fetches = 0
        self.add("rsa-1", rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")
        self.add("ec-1", ec.generate_private_key(ec.SECP256R1()), "ES256")
        self.url = ""

    def add(self, kid: str, key: Any, alg: str) -> None:
        self.keys[kid] = (key, alg)
        self.published.append(kid)

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid in self.published:
            key, alg = self.keys[kid]
            codec = RSAAlgorithm if alg.startswith("RS") else ECAlgorithm
            jwk = json.loads(codec.to_jwk(key.public_key()))
            out.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": out}

    def token(self, handle: str = "alice", role: str | None = "agent", *, kid: str = "rsa-1",
              **claims: Any) -> str:
        key, alg = self.keys[kid]
        now = int(time.time())
        payload: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": f"user-{handle}", "handle": handle,
                                   "iat": now, "exp": now + 300}
        if role is not None:
            payload["role"] = role
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})

    def issuers(self) -> str:
        return json.dumps([
            {"issuer": ISSUER, "audience": AUDIENCE, "algorithms": ["RS256", "ES256"], "jwks_url": self.url,
             "handle_claim": "handle"},
            {"issuer": SECRET_ISSUER, "audience": AUDIENCE, "algorithms": ["HS256"], "secret": SECRET,
             "handle_claim": "handle"},
        ])


@pytest.fixture
def provider() -> Iterator[Provider]:
    idp = Provider()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            idp.fetches += 1
            body = json.dumps(idp.jwks()).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    idp.url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    try:
        yield idp
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def gated(db_dsn: str, settings_for, provider: Provider):
    """An HTTP client on the real app with the gate on, trusting the provider and the shared secret."""
    from litestar.testing import AsyncTestClient

    from mycelium.hub import Hub
    from tests.support.apps import app_for

    settings = settings_for(db_dsn, embedder="none", auth=True, auth_issuers=provider.issuers())
    with app_for(Hub(settings)) as app:
        async with AsyncTestClient(app=app) as c:
            yield c


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def replicas(hub_processes, provider: Provider):
    """Two gated hub processes on one database (the first runs the loops), sharing a secret."""
    env = {"MYCELIUM_AUTH": "on", "MYCELIUM_AUTH_ISSUERS": provider.issuers(), "MYCELIUM_AUTH_SECRET": HUB_SECRET}
    hubs = [hub_processes(extra=["--no-mirror", *(["--no-workers"] if i else [])], env=env, wait=False)
            for i in range(2)]
    for h in hubs:
        h.wait_ready()
    return hubs
