"""Refusals: the one shape every 4xx takes, and the one map from database errors to it.

The database refuses with SQLSTATE ``MYnnn`` (nnn = the HTTP status) and a JSON DETAIL holding
``{"error": code, ...}``; constraint violations that reach us from a direct write are mapped by class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import asyncpg


@dataclass
class Refusal(Exception):
    status: int
    error: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.error}: {self.message}"

    def body(self) -> dict[str, Any]:
        return {**self.extra, "error": self.error, "message": self.message}


_BY_SQLSTATE: dict[str, tuple[int, str]] = {
    "23505": (409, "conflict"),
    "23514": (422, "constraint"),
    "23502": (422, "missing_value"),
    "23503": (409, "reference"),
    "23P01": (409, "conflict"),
    "22001": (422, "too_long"),
    "22P02": (422, "invalid_input"),
    "22023": (422, "invalid_input"),
    "22000": (422, "invalid_input"),
    "22003": (422, "out_of_range"),
    "22007": (422, "invalid_input"),
    "22008": (422, "out_of_range"),
    "40001": (409, "serialization_failure"),
    "40P01": (409, "deadlock"),
}


def refusal_from_db(exc: BaseException) -> Refusal | None:
    """The refusal a database error means, or None if it is not one (a bug, or the server down)."""
    if not isinstance(exc, asyncpg.PostgresError):
        return None
    state = getattr(exc, "sqlstate", None) or ""
    message = getattr(exc, "message", None) or str(exc)
    if state.startswith("MY") and state[2:].isdigit():
        extra: dict[str, Any] = {}
        detail = getattr(exc, "detail", None)
        if detail:
            try:
                parsed = json.loads(detail)
            except ValueError:
                parsed = {"detail": detail}
            if isinstance(parsed, dict):
                extra = parsed
        error = str(extra.pop("error", "refused"))
        return Refusal(int(state[2:]), error, message, extra)
    if state in _BY_SQLSTATE:
        status, error = _BY_SQLSTATE[state]
        extra = {}
        constraint = getattr(exc, "constraint_name", None)
        if constraint:
            extra["constraint"] = constraint
        return Refusal(status, error, message, extra)
    if state.startswith("22"):
        return Refusal(422, "invalid_input", message)
    return None


def is_storage_unavailable(exc: BaseException) -> bool:
    """The database cannot be reached (down, restarting, connection lost)."""
    if isinstance(exc, (OSError, asyncpg.exceptions.ConnectionDoesNotExistError,
                        asyncpg.exceptions.CannotConnectNowError)):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state.startswith("08") or state in {"57P01", "57P02", "57P03"}
