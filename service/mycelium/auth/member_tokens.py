"""Member tokens: ES256 JWTs the hub signs for a redeemed join code, with a key every replica
shares through the database (``mycelium.hub_keys``): the private half sealed with AES-GCM under a
key derived from ``MYCELIUM_AUTH_SECRET``, so only the hub's processes can sign. The hub trusts its
own issuer beside the configured ones, verifying with the public keys in the database (retired ones
included, until the tokens they signed expire) and fetching nothing."""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from jwt.algorithms import ECAlgorithm

from mycelium.auth.issuers import Issuer
from mycelium.auth.tokens import TokenRefused
from mycelium.verbs import HUB_PROCESS, Verbs

HUB_ISSUER = "mycelium-hub"
TOKEN_TTL_SECONDS = 30 * 24 * 3600
_NONCE = 12


class MemberTokensUnavailable(Exception):
    """The hub holds no secret to seal its key with (``MYCELIUM_AUTH_SECRET``)."""


def _sealing_key(secret: str) -> AESGCM:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"mycelium.hub_keys",
                   info=b"member-token signing key").derive(secret.encode())
    return AESGCM(derived)


def seal(secret: str, private_pem: bytes, kid: str) -> bytes:
    nonce = os.urandom(_NONCE)
    return nonce + _sealing_key(secret).encrypt(nonce, private_pem, kid.encode())


def unseal(secret: str, sealed: bytes, kid: str) -> bytes:
    return _sealing_key(secret).decrypt(sealed[:_NONCE], sealed[_NONCE:], kid.encode())


def new_key(secret: str) -> tuple[str, dict[str, Any], bytes]:
    """A fresh P-256 key: its id, public JWK and sealed private key."""
    private = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(ECAlgorithm.to_jwk(private.public_key()))
    kid = hashlib.sha256(json.dumps(jwk, sort_keys=True).encode()).hexdigest()[:16]
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return kid, {**jwk, "kid": kid, "alg": "ES256", "use": "sig"}, seal(secret, pem, kid)


class MemberTokens:
    """Signing and verifying the hub's member tokens, on the keys in the database."""

    issuer = Issuer(HUB_ISSUER, None, ("ES256",), handle_claim="sub", role_claim="role")

    def __init__(self, verbs: Verbs, secret: str | None) -> None:
        self._verbs = verbs
        self._secret = secret
        self._signing: tuple[str, Any] | None = None
        self._public: dict[str, Any] = {}

    @property
    def available(self) -> bool:
        return self._signing is not None

    async def start(self) -> None:
        """Make sure the deployment has a key (the first process to ask makes it) and load it."""
        if self._secret is not None:
            kid, jwk, sealed = new_key(self._secret)
            await self._verbs.call(HUB_PROCESS, "ensure_hub_key", kid=kid, public_jwk=jwk, sealed=sealed)
        await self.reload()

    async def rotate(self, verbs: Verbs) -> str:
        """A new signing key for the deployment (``verbs`` carries the operator who asks)."""
        if self._secret is None:
            raise MemberTokensUnavailable("the hub has no member-token key: set MYCELIUM_AUTH_SECRET")
        kid, jwk, sealed = new_key(self._secret)
        await verbs.call(HUB_PROCESS, "rotate_hub_key", kid=kid, public_jwk=jwk, sealed=sealed)
        await self.reload()
        return kid

    async def reload(self) -> None:
        rows = await self._verbs.call(HUB_PROCESS, "hub_keys")
        self._public = {r["kid"]: jwt.PyJWK.from_dict(dict(r["public_jwk"])).key for r in rows}
        active = next((r for r in rows if r["retired_at"] is None), None)
        self._signing = None
        if active is not None and self._secret is not None:
            pem = unseal(self._secret, bytes(active["sealed_private"]), active["kid"])
            self._signing = (active["kid"], serialization.load_pem_private_key(pem, password=None))

    def sign(self, handle: str, room: str) -> tuple[str, int]:
        """A member token for ``handle`` in ``room`` and when it expires (epoch seconds)."""
        if self._signing is None:
            raise MemberTokensUnavailable("the hub has no member-token key: set MYCELIUM_AUTH_SECRET")
        kid, key = self._signing
        now = int(time.time())
        claims: dict[str, Any] = {"iss": HUB_ISSUER, "sub": handle, "role": "agent", "mycelium_room": room,
                                  "iat": now, "exp": now + TOKEN_TTL_SECONDS}
        return jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid}), claims["exp"]

    def held(self) -> object:
        """The public keys held now (a reload replaces them)."""
        return self._public

    async def public_key(self, kid: str | None) -> Any:
        if kid not in self._public:
            await self.reload()  # a key another replica made or rotated in since
        found = self._public.get(kid)  # type: ignore[arg-type]
        if found is None:
            raise TokenRefused(f"unknown key id {kid!r}")
        return found
