"""Exception handlers: every failure a client can cause becomes ``{error, message, …}`` with a 4xx."""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import (
    ClientException,
    HTTPException,
    NotFoundException,
    SerializationException,
    ValidationException,
)
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from mycelium.errors import Refusal, is_storage_unavailable, refusal_from_db

log = logging.getLogger("mycelium.api")


def _json(status: int, body: dict[str, Any]) -> Response[dict[str, Any]]:
    return Response(body, status_code=status, media_type=MediaType.JSON)


def on_refusal(_: Request, exc: Refusal) -> Response[dict[str, Any]]:
    return _json(exc.status, exc.body())


def on_validation(_: Request, exc: ValidationException) -> Response[dict[str, Any]]:
    problems: list[dict[str, Any]] = []
    extra = exc.extra if isinstance(exc.extra, list) else []
    for item in extra:
        if isinstance(item, dict):
            problems.append({k: item.get(k) for k in ("key", "message", "source") if k in item})
    detail = str(exc.detail or "")
    summary = "; ".join(
        f"{p.get('key') or 'body'}: {p.get('message')}" for p in problems
    ) or detail or "the request is invalid"
    return _json(422, {"error": "invalid_request", "message": summary, "problems": problems})


def on_http(_: Request, exc: HTTPException) -> Response[dict[str, Any]]:
    status = exc.status_code
    if status == 413:
        return _json(413, {"error": "body_too_large", "message": "the request body is over the limit"})
    if isinstance(exc.__cause__, SerializationException):
        message = f"the request body is not valid JSON: {exc.detail}"
        return _json(400, {"error": "malformed_json", "message": message})
    if isinstance(exc, NotFoundException):
        return _json(404, {"error": "not_found", "message": str(exc.detail or "not found")})
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
