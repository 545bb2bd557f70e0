"""``@protect`` / ``protect_sync``: a TTL cache around a read tool.

A hit returns the cached result without calling the tool; a stale entry (older than ``ttl``
seconds) is refetched; an exception removes the entry, so the next call refetches instead of
serving what was cached before the failure. Keys are per tool and, with ``entity_param``, per value
of that argument (given by keyword or by position); without it one result is cached per tool. The
cache is the active ``Session``'s (see :mod:`mycelium.guards.session`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from mycelium.guards.session import MISS, _current, default_cache

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TTL = 300.0


def _entity_reader(fn: Callable[..., Any], entity_param: str | None) -> Callable[[tuple, dict], Any]:
    """A function (args, kwargs) -> the entity value, with the parameter's position found once."""
    if entity_param is None:
        return lambda args, kwargs: None
    position: int | None = None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    for i, p in enumerate(params):
        if p.name == entity_param and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            position = i
    if position is None:
        return lambda args, kwargs: kwargs.get(entity_param)
    pos = position

    def read(args: tuple, kwargs: dict) -> Any:
        if entity_param in kwargs:
            return kwargs[entity_param]
        return args[pos] if len(args) > pos else None

    return read


def _check(entity_param: str | None, ttl: float) -> float:
    if entity_param is not None and not isinstance(entity_param, str):
        raise TypeError(f"entity_param must be a parameter name, got {entity_param!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")
    return float(ttl)


def _mark(wrapper: Callable[..., Any], entity_param: str | None, ttl: float) -> None:
    wrapper._mycelium_protected = True  # type: ignore[attr-defined]
    wrapper._mycelium_entity_param = entity_param  # type: ignore[attr-defined]
    wrapper._mycelium_ttl = ttl  # type: ignore[attr-defined]


def protect(entity_param: str | None = None, ttl: float = DEFAULT_TTL) -> Callable[[F], F]:
    """TTL-cache an async tool: ``@protect(entity_param="customer_id", ttl=60)``."""
    seconds = _check(entity_param, ttl)

    def decorate(fn: F) -> F:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@protect wraps async functions; use @protect_sync for {fn.__name__}")
        tool = f"{fn.__module__}.{fn.__qualname__}"
        entity = _entity_reader(fn, entity_param)

        @functools.wraps(fn)
        async def cached(*args: Any, **kwargs: Any) -> Any:
            session = _current.get()
            cache = default_cache if session is None else session.cache
            key = (tool, entity(args, kwargs))
            try:
                value = cache.get(key)
            except TypeError:  # an unhashable entity value: keyed by its repr
                key = (tool, repr(key[1]))
                value = cache.get(key)
            if value is not MISS:
                return value
            try:
                value = await fn(*args, **kwargs)
            except BaseException:
                cache.discard(key)
                raise
            cache.set(key, value, seconds)
            return value

        _mark(cached, entity_param, seconds)
        return cached  # type: ignore[return-value]

    return decorate


def protect_sync(entity_param: str | None = None, ttl: float = DEFAULT_TTL) -> Callable[[F], F]:
    """TTL-cache a synchronous tool (CrewAI, Smolagents); same behaviour as :func:`protect`."""
    seconds = _check(entity_param, ttl)

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"protect_sync wraps plain functions; use @protect for async {fn.__name__}")
        tool = f"{fn.__module__}.{fn.__qualname__}"
        entity = _entity_reader(fn, entity_param)

        @functools.wraps(fn)
        def cached(*args: Any, **kwargs: Any) -> Any:
            session = _current.get()
            cache = default_cache if session is None else session.cache
            key = (tool, entity(args, kwargs))
            try:
                value = cache.get(key)
            except TypeError:  # an unhashable entity value: keyed by its repr
                key = (tool, repr(key[1]))
                value = cache.get(key)
            if value is not MISS:
                return value
            try:
                value = fn(*args, **kwargs)
            except BaseException:
                cache.discard(key)
                raise
            cache.set(key, value, seconds)
            return value

        _mark(cached, entity_param, seconds)
        return cached  # type: ignore[return-value]

    return decorate
