"""The gate in front of every route: with ``MYCELIUM_AUTH`` on, a request needs a valid bearer token
except ``/health``, the docs (``/schema``), ``POST /api/joins/redeem``, the web app's sign-in page
and its static files; the verified principal is kept in the request's scope for the verb gateway. A
refusal is 401 with ``WWW-Authenticate`` and the project's error shape; a browser asking for a page
is sent to ``/login`` instead.

A browser signs in by keeping its token in the ``mycelium_token`` cookie (HttpOnly, SameSite=Strict),
read when a request has no ``Authorization`` header; a write carried by that cookie must come from
this hub's own pages (``Sec-Fetch-Site`` / ``Origin``), so another site cannot make one."""

from __future__ import annotations

import json
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import quote, urlsplit

from litestar.types import ASGIApp, Receive, Scope, Send

from mycelium.auth.tokens import TokenRefused, TokenVerifier
from mycelium.verbs.actor import Principal

PRINCIPAL = "mycelium.principal"
TOKEN_COOKIE = "mycelium_token"
OPEN_PATHS = ("/health", "/api/joins/redeem", "/login", "/logout")
OPEN_PREFIXES = ("/schema", "/static")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


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
            token, from_cookie = _bearer(scope), False
            if token is None:
                token, from_cookie = _cookie(scope), True
            if token is None:
                if scope["method"] == "GET" and b"text/html" in _header(scope, b"accept"):
                    await _redirect(send, "/login?next=" + quote(scope["path"], safe="/"))
                    return
                await _refuse(send, "unauthenticated",
                              "this hub needs a bearer token (Authorization: Bearer …)", None)
                return
            if from_cookie and scope["method"] not in SAFE_METHODS and not _same_origin(scope):
                await _refuse(send, "cross_site",
                              "a write signed in by cookie must come from this hub's pages", None, status=403)
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


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return b""


def _bearer(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    if not value:
        return None
    scheme, _, token = value.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _cookie(scope: Scope) -> str | None:
    jar = SimpleCookie()
    try:
        jar.load(_header(scope, b"cookie").decode("latin-1"))
    except CookieError:
        return None
    found = jar.get(TOKEN_COOKIE)
    return found.value or None if found is not None else None


def _same_origin(scope: Scope) -> bool:
    site = _header(scope, b"sec-fetch-site").decode("latin-1")
    if site:
        return site in ("same-origin", "none")
    origin = _header(scope, b"origin").decode("latin-1")
    if not origin:
        return True  # not a browser's cross-site request (browsers send Origin on those)
    return urlsplit(origin).netloc == _header(scope, b"host").decode("latin-1")


async def _redirect(send: Send, location: str) -> None:
    await send({"type": "http.response.start", "status": 303, "headers": [
        (b"location", location.encode("latin-1", "replace")), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _refuse(send: Send, error: str, message: str, reason: str | None, status: int = 401) -> None:
    challenge = 'Bearer realm="mycelium"'
    if reason is not None:
        challenge += ', error="invalid_token", error_description="' + reason.replace('"', "'")[:200] + '"'
    body = json.dumps({"error": error, "message": message, **({"reason": reason} if reason else {})}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge.encode("latin-1", "replace"))]})
    await send({"type": "http.response.body", "body": body})
