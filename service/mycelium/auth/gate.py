"""The gate as the settings ask for it: nothing when ``auth`` is off; else the middleware with a
verifier of the configured issuers (a configuration that cannot be used stops the hub at start,
naming the problem)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from mycelium.auth.issuers import IssuerConfigError, parse_issuers
from mycelium.auth.member_tokens import MemberTokens
from mycelium.auth.middleware import gate
from mycelium.auth.tokens import TokenVerifier
from mycelium.errors import Refusal
from mycelium.settings import Settings
from mycelium.verbs import HUB_PRINCIPAL, HUB_PROCESS, verbs_of

if TYPE_CHECKING:
    from mycelium.hub import Hub


def token_verifier(settings: Settings) -> TokenVerifier | None:
    """The verifier of a gated hub (None when the gate is off)."""
    if not settings.auth:
        return None
    if not settings.auth_issuers and not settings.auth_secret:
        raise IssuerConfigError("MYCELIUM_AUTH is on but MYCELIUM_AUTH_ISSUERS names no issuer "
                                "(and no MYCELIUM_AUTH_SECRET lets the hub issue member tokens)")
    issuers = parse_issuers(settings.auth_issuers) if settings.auth_issuers else ()
    return TokenVerifier(issuers, settings.auth_leeway_seconds)


def gate_middleware(verifier: TokenVerifier | None) -> list[Any]:
    return [] if verifier is None else [gate(verifier)]


async def start_gate(hub: Hub, verifier: TokenVerifier) -> MemberTokens:
    """Before a gated hub serves: private rooms closed, and its member tokens trusted."""
    await close_private_rooms(hub)
    members = MemberTokens(verbs_of(hub, HUB_PRINCIPAL), hub.settings.auth_secret)
    await members.start()
    verifier.members = members
    return members


async def close_private_rooms(hub: Hub) -> None:
    """A gated hub, before it serves: the hub-wide ``auth.gate`` setting on, so the database shows a
    private room only to those who may see it (sql/privacy.sql). Turning it off again is an
    operator's word (``mycelium config set auth.gate false``), never a hub started without the gate.

    Closing turns row-level security on, table by table, while other replicas may be reading them:
    PostgreSQL may then break a deadlock by failing this write, which is tried again."""
    verbs = verbs_of(hub, HUB_PRINCIPAL)
    for attempt in range(CLOSE_ATTEMPTS):
        if await verbs.call(HUB_PROCESS, "private_rooms_closed"):
            return
        try:
            await verbs.call(HUB_PROCESS, "write_setting", name="auth.gate", value=True, room="",
                             handle="env")
            return
        except Refusal as r:  # the gateway's answer to a deadlock: 409 deadlock
            if r.error != "deadlock" or attempt == CLOSE_ATTEMPTS - 1:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))


CLOSE_ATTEMPTS = 5
