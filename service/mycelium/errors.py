"""Refusals: the one shape every 4xx takes, and the one map from database errors to it.

The database refuses with SQLSTATE ``MYnnn`` (nnn = the HTTP status) and a JSON DETAIL holding
``{"error": code, ...}``; constraint violations that reach us from a direct write, and the other plain
SQLSTATEs a caller can cause, are mapped as ``contracts/refusals.json`` says (``database_errors``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import asyncpg

from mycelium.paths import contracts_dir


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


@cache
def _database_errors() -> tuple[dict[str, tuple[int, str]], dict[str, tuple[int, str]]]:
    """``contracts/refusals.json``'s ``database_errors`` (SQLSTATE -> status, code) and
    ``database_error_classes`` (the catch-all by a SQLSTATE's class), read once, at the first need."""
    spec = json.loads((contracts_dir() / "refusals.json").read_text(encoding="utf-8"))

    def pairs(table: dict[str, dict[str, Any]]) -> dict[str, tuple[int, str]]:
        return {key: (int(entry["status"]), str(entry["error"])) for key, entry in table.items()}

    return pairs(spec["database_errors"]), pairs(spec["database_error_classes"])


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
    by_sqlstate, by_class = _database_errors()
    if state in by_sqlstate:
        status, error = by_sqlstate[state]
        extra = {}
        constraint = getattr(exc, "constraint_name", None)
        if constraint:
            extra["constraint"] = constraint
        return Refusal(status, error, message, extra)
    if state[:2] in by_class:
        status, error = by_class[state[:2]]
        return Refusal(status, error, message)
    return None


def is_storage_unavailable(exc: BaseException) -> bool:
    """The database cannot be reached (down, restarting, connection lost)."""
    if isinstance(exc, (OSError, asyncpg.exceptions.ConnectionDoesNotExistError,
                        asyncpg.exceptions.CannotConnectNowError)):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state.startswith("08") or state in {"57P01", "57P02", "57P03"}
