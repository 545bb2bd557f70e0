"""The TTL cache behind ``@protect`` and the ``Session`` that scopes it to one agent run.

A cache entry is keyed by the tool and, when the decorator names an ``entity_param``, that
argument's value. Inside ``with Session():`` / ``async with Session():`` the tools use the session's
own cache (a ContextVar, so concurrent asyncio tasks and threads each see their own session);
outside any session they share the process's default cache.
"""

from __future__ import annotations

import time
from collections import deque
from contextvars import ContextVar, Token
from typing import Any

#: returned by ToolCache.get for a missing or stale entry (a cached None is a hit)
MISS: Any = object()


class ToolCache:
    """Entries ``(tool, entity) -> (value, expires_at)`` on the monotonic clock."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[str, Any], tuple[Any, float]] = {}

    def get(self, key: tuple[str, Any]) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return MISS
        if time.monotonic() >= entry[1]:
            self._entries.pop(key, None)  # stale: the caller refetches
            return MISS
        return entry[0]

    def set(self, key: tuple[str, Any], value: Any, ttl: float) -> None:
        self._entries[key] = (value, time.monotonic() + ttl)

    def discard(self, key: tuple[str, Any]) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


default_cache = ToolCache()
_current: ContextVar[Session | None] = ContextVar("mycelium_session", default=None)


def get_cache() -> ToolCache:
    """The active session's cache, else the process default."""
    session = _current.get()
    return default_cache if session is None else session.cache


class Session:
    """One cache (and one guard audit trail) per agent run; nothing leaks into the next run."""

    def __init__(self) -> None:
        self.cache = ToolCache()
        self._audit: deque[dict[str, Any]] = deque(maxlen=1000)
        self._tokens: list[Token[Session | None]] = []

    def audit_log(self) -> list[dict[str, Any]]:
        """Guard events recorded while this session was active (the latest 1000)."""
        return list(self._audit)

    def record(self, entry: dict[str, Any]) -> None:
        self._audit.append(entry)

    def __enter__(self) -> Session:
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *_: Any) -> None:
        if self._tokens:
            _current.reset(self._tokens.pop())
        if not self._tokens:
            self.cache.clear()

    async def __aenter__(self) -> Session:
        return self.__enter__()

    async def __aexit__(self, *_: Any) -> None:
        self.__exit__()


def record_event(entry: dict[str, Any]) -> None:
    """Add a guard event to the active session's audit trail (no session: nothing)."""
    session = _current.get()
    if session is not None:
        session.record(entry)
