"""``GET /api/whoami``: the principal the token gate verified for this request, or ``gated: false``."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from mycelium.auth.middleware import principal_in


@get("/api/whoami")
async def whoami(request: Request[Any, Any, Any]) -> dict[str, Any]:
    principal = principal_in(request.scope)
    if principal is None:
        return {"gated": False}
    return {"gated": True, "handle": principal.handle, "role": principal.role, "subject": principal.subject,
            "issuer": principal.issuer, "expires_at": principal.expires_at}
