"""Exception handlers: every failure a client can cause becomes ``{error, message, …}`` with a 4xx."""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import (
    ClientException,
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    SerializationException,
    ValidationException,
)
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from mycelium.errors import Refusal, is_storage_unavailable, refusal_from_db

log = logging.getLogger("mycelium.api")


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None
          ) -> Response[dict[str, Any]]:
    return Response(body, status_code=status, media_type=MediaType.JSON, headers=headers)


def on_refusal(_: Request, exc: Refusal) -> Response[dict[str, Any]]:
    return _json(exc.status, exc.body())


def _missing_body(item: dict[str, Any]) -> bool:
    """The problem Litestar reports for a route's body when none was sent (its ``data`` argument)."""
    return item.get("key") == "data" and item.get("source") == "body" and item.get("message") == "'data'"


def on_validation(_: Request, exc: ValidationException) -> Response[dict[str, Any]]:
    problems: list[dict[str, Any]] = []
    extra = exc.extra if isinstance(exc.extra, list) else []
    for item in extra:
        if isinstance(item, dict):
            if _missing_body(item):
                message = "the request body is empty: send a JSON object (application/json)"
                return _json(400, {"error": "empty_body", "message": message})
            problems.append({k: item.get(k) for k in ("key", "message", "source") if k in item})
    detail = str(exc.detail or "")
    summary = "; ".join(
        f"{p.get('key') or 'body'}: {p.get('message')}" for p in problems
    ) or detail or "the request is invalid"
    return _json(422, {"error": "invalid_request", "message": summary, "problems": problems})


def on_http(request: Request, exc: HTTPException) -> Response[dict[str, Any]]:
    status = exc.status_code
    if status == 413:
        limit = request.route_handler.resolve_request_max_body_size()
        return _json(413, {"error": "body_too_large", "limit_bytes": limit,
                           "message": f"the request body is over the limit of {limit} bytes"})
    if isinstance(exc.__cause__, SerializationException):
        message = f"the request body is not valid JSON: {exc.detail}"
        return _json(400, {"error": "malformed_json", "message": message})
    if isinstance(exc, NotFoundException):
        return _json(404, {"error": "not_found", "message": str(exc.detail or "not found")})
    if isinstance(exc, MethodNotAllowedException):
        allowed = (exc.headers or {}).get("allow", "")
        message = f"{request.method} is not allowed here: use {allowed or 'another method'}"
        return _json(405, {"error": "method_not_allowed", "message": message,
                           "allowed": [m.strip() for m in allowed.split(",") if m.strip()]},
                     headers={"allow": allowed} if allowed else None)
    error = "bad_request" if isinstance(exc, ClientException) else "http_error"
    return _json(status, {"error": error, "message": str(exc.detail or "request failed")})


def on_error(request: Request, exc: Exception) -> Response[dict[str, Any]]:
    refusal = refusal_from_db(exc)
    if refusal is not None:
        return _json(refusal.status, refusal.body())
    if is_storage_unavailable(exc):
        return _json(503, {"error": "storage_unavailable", "message": "the database is unavailable; retry"})
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _json(HTTP_500_INTERNAL_SERVER_ERROR, {"error": "internal", "message": "internal error"})


HANDLERS: dict[Any, Any] = {
    Refusal: on_refusal,
    ValidationException: on_validation,
    HTTPException: on_http,
    Exception: on_error,
}
