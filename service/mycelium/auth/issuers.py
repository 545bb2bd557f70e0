"""The issuers a gated hub trusts, read from ``MYCELIUM_AUTH_ISSUERS``: a JSON list (or ``@file``
holding one) of objects::

    {"issuer": "https://id.example.com",          # the exact iss
     "audience": "mycelium",                      # the aud a token must carry
     "algorithms": ["RS256", "ES256"],            # the allow-list (never none)
     "jwks_url": "https://id.example.com/jwks",   # or "keys": [JWK, …], or "secret": "…" (HS* only)
     "handle_claim": "handle", "role_claim": "role", "default_role": "agent"}

An issuer has public keys (a JWKS URL or static JWKs) and asymmetric algorithms, or a shared secret
and HMAC algorithms, never both: a token's HMAC signature is never checked against a public key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mycelium.verbs.actor import ROLES, Role

HMAC = frozenset({"HS256", "HS384", "HS512"})
ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
                        "EdDSA"})
_FIELDS = {"issuer", "audience", "algorithms", "jwks_url", "keys", "secret", "handle_claim", "role_claim",
           "default_role"}


class IssuerConfigError(ValueError):
    """The issuers' configuration cannot be used (the hub does not start with it)."""


@dataclass(frozen=True)
class Issuer:
    issuer: str
    audience: str | None
    algorithms: tuple[str, ...]
    jwks_url: str | None = None
    keys: tuple[dict[str, Any], ...] = ()
    secret: str | None = field(default=None, repr=False)
    handle_claim: str = "sub"
    role_claim: str = "role"
    default_role: Role = "agent"

    @property
    def hmac(self) -> bool:
        return self.secret is not None


def parse_issuers(text: str) -> tuple[Issuer, ...]:
    """The issuers of a configuration text (JSON, or ``@path`` to a JSON file)."""
    text = text.strip()
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise IssuerConfigError(f"cannot read the issuers file {text[1:]}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IssuerConfigError(f"MYCELIUM_AUTH_ISSUERS is not JSON: {exc}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise IssuerConfigError("MYCELIUM_AUTH_ISSUERS must be a list of issuers, with at least one")
    issuers = tuple(_issuer(i, entry) for i, entry in enumerate(data))
    names = [i.issuer for i in issuers]
    if len(set(names)) != len(names):
        raise IssuerConfigError("an issuer is configured twice")
    return issuers


def _issuer(index: int, entry: Any) -> Issuer:
    where = f"issuer {index + 1}"
    if not isinstance(entry, dict):
        raise IssuerConfigError(f"{where} is not an object")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise IssuerConfigError(f"{where}: unknown field {', '.join(unknown)}")
    name = entry.get("issuer")
    if not isinstance(name, str) or not name:
        raise IssuerConfigError(f"{where}: issuer (the exact iss) is required")
    where = f"issuer {name!r}"
    algorithms = entry.get("algorithms")
    if not isinstance(algorithms, list) or not algorithms or not all(isinstance(a, str) for a in algorithms):
        raise IssuerConfigError(f"{where}: algorithms must be a non-empty list")
    unsupported = sorted(set(algorithms) - HMAC - ASYMMETRIC)
    if unsupported:
        raise IssuerConfigError(f"{where}: algorithm {', '.join(unsupported)} is not allowed")
    secret, jwks_url, keys = entry.get("secret"), entry.get("jwks_url"), entry.get("keys") or []
    has_public = bool(jwks_url or keys)
    if secret is not None and has_public:
        raise IssuerConfigError(f"{where}: a secret and public keys cannot be configured together")
    if secret is not None:
        if not isinstance(secret, str) or len(secret) < 32:
            raise IssuerConfigError(f"{where}: the secret must be a string of at least 32 characters")
        if not set(algorithms) <= HMAC:
            raise IssuerConfigError(f"{where}: with a secret only HS256, HS384 and HS512 are allowed")
    elif has_public:
        if not set(algorithms) <= ASYMMETRIC:
            raise IssuerConfigError(f"{where}: with public keys no HMAC algorithm is allowed")
        if not isinstance(keys, list) or not all(isinstance(k, dict) for k in keys):
            raise IssuerConfigError(f"{where}: keys must be a list of JWKs")
    else:
        raise IssuerConfigError(f"{where}: give a jwks_url, keys or a secret")
    role = entry.get("default_role", "agent")
    if role not in ROLES:
        raise IssuerConfigError(f"{where}: default_role must be one of {', '.join(ROLES)}")
    audience = entry.get("audience")
    if audience is not None and not isinstance(audience, str):
        raise IssuerConfigError(f"{where}: audience must be a string")
    return Issuer(name, audience, tuple(algorithms), jwks_url, tuple(keys), secret,
                  str(entry.get("handle_claim", "sub")), str(entry.get("role_claim", "role")), role)
