"""The gate in front of every route: with ``MYCELIUM_AUTH`` on, a request needs a valid bearer token
except ``/health``, the docs (``/schema``) and ``POST /api/joins/redeem``; the verified principal is
kept in the request's scope for the verb gateway. A refusal is 401 with ``WWW-Authenticate`` and
the project's error shape."""

from __future__ import annotations

import json
from typing import Any

from litestar.types import ASGIApp, Receive, Scope, Send

from mycelium.auth.tokens import TokenRefused, TokenVerifier
from mycelium.verbs.actor import Principal

PRINCIPAL = "mycelium.principal"
OPEN_PATHS = ("/health", "/api/joins/redeem")
OPEN_PREFIXES = ("/schema",)


def principal_in(scope: Any) -> Principal | None:
    """The verified principal of a request (None when the gate is off)."""
    found: Principal | None = scope.get(PRINCIPAL)
    return found


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or any(path == p or path.startswith(p + "/") for p in OPEN_PREFIXES)


def gate(verifier: TokenVerifier) -> Any:
    """The middleware factory Litestar takes (``middleware=[gate(verifier)]``)."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def gated(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or is_open(scope["path"]):  # (the hub has no websocket routes)
                await app(scope, receive, send)
                return
            token = _bearer(scope)
            if token is None:
                await _refuse(send, "unauthenticated",
                              "this hub needs a bearer token (Authorization: Bearer …)", None)
                return
            try:
                principal = await verifier.verify(token)
            except TokenRefused as refused:
                await _refuse(send, "invalid_token", f"the token is refused: {refused.reason}",
                              refused.reason)
                return
            scope[PRINCIPAL] = principal  # type: ignore[literal-required]
            await app(scope, receive, send)

        return gated

    return middleware


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() or None if scheme.lower() == "bearer" else None
    return None


async def _refuse(send: Send, error: str, message: str, reason: str | None) -> None:
    challenge = 'Bearer realm="mycelium"'
    if reason is not None:
        challenge += ', error="invalid_token", error_description="' + reason.replace('"', "'")[:200] + '"'
    body = json.dumps({"error": error, "message": message, **({"reason": reason} if reason else {})}).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge.encode("latin-1", "replace"))]})
    await send({"type": "http.response.body", "body": body})
