"""Failures on a page become a page: the refusal's status and message, never a JSON body or a 500
for something the person typed."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.response import Template

from mycelium.errors import Refusal, is_storage_unavailable, refusal_from_db
from mycelium.web.pages import identity

log = logging.getLogger("mycelium.web")


def _page(request: Request[Any, Any, Any], status: int, error: str, message: str) -> Template:
    return Template(template_name="error.html", status_code=status,
                    context={**identity(request), "status": status, "code": error, "message": message})


def on_refusal(request: Request[Any, Any, Any], exc: Refusal) -> Template:
    return _page(request, exc.status, exc.error, exc.message)


def on_validation(request: Request[Any, Any, Any], exc: ValidationException) -> Template:
    extra = exc.extra if isinstance(exc.extra, list) else []
    problems = [f"{p.get('key') or 'form'}: {p.get('message')}" for p in extra if isinstance(p, dict)]
    return _page(request, 422, "invalid_request", "; ".join(problems) or str(exc.detail or "invalid request"))


def on_http(request: Request[Any, Any, Any], exc: HTTPException) -> Template:
    if isinstance(exc, NotFoundException):
        return _page(request, 404, "not_found", str(exc.detail or "not found"))
    return _page(request, exc.status_code, "bad_request", str(exc.detail or "request failed"))


def on_error(request: Request[Any, Any, Any], exc: Exception) -> Template:
    refusal = refusal_from_db(exc)
    if refusal is not None:
        return on_refusal(request, refusal)
    if is_storage_unavailable(exc):
        return _page(request, 503, "storage_unavailable", "the database is unavailable; retry")
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _page(request, 500, "internal", "internal error")


HANDLERS: dict[Any, Any] = {
    Refusal: on_refusal,
    ValidationException: on_validation,
    HTTPException: on_http,
    Exception: on_error,
}
