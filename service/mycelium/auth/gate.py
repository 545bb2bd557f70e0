"""The gate as the settings ask for it: nothing when ``auth`` is off; else the middleware with a
verifier of the configured issuers (a configuration that cannot be used stops the hub at start,
naming the problem)."""

from __future__ import annotations

from typing import Any

from mycelium.auth.issuers import IssuerConfigError, parse_issuers
from mycelium.auth.middleware import gate
from mycelium.auth.tokens import TokenVerifier
from mycelium.settings import Settings


def gate_middleware(settings: Settings) -> list[Any]:
    if not settings.auth:
        return []
    if not settings.auth_issuers:
        raise IssuerConfigError("MYCELIUM_AUTH is on but MYCELIUM_AUTH_ISSUERS names no issuer")
    return [gate(TokenVerifier(parse_issuers(settings.auth_issuers), settings.auth_leeway_seconds))]
