"""A call's arguments by name: the quick binder for plain signatures answers exactly as inspect does."""

from __future__ import annotations

import inspect
from typing import Any

from mycelium.ledger.identity import bound_arguments


def by_inspect(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {"args": list(args), "kwargs": dict(kwargs)}
    bound.apply_defaults()
    return dict(bound.arguments)


def none() -> None: ...
def one(a: Any) -> None: ...
def two(a: Any, b: Any = 2) -> None: ...
def three(a: Any, b: Any = 2, c: Any = None) -> None: ...
def varargs(a: Any, *rest: Any, k: Any = 1, **kw: Any) -> None: ...
def positional_only(a: Any, /, b: Any) -> None: ...
def keyword_only(a: Any, *, b: Any = 1) -> None: ...


class Tool:
    def method(self, a: Any, b: Any = 1) -> None: ...


def test_every_call_shape_binds_as_inspect_binds_it():
    shapes = 0
    for fn in (none, one, two, three, varargs, positional_only, keyword_only, Tool().method, len):
        for args in ((), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)):
            for kwargs in ({}, {"a": 9}, {"b": 8}, {"c": 7}, {"z": 1}, {"b": 8, "c": 7}, {"a": 1, "b": 2}):
                got, expected = bound_arguments(fn, args, dict(kwargs)), by_inspect(fn, args, dict(kwargs))
                assert (got, list(got)) == (expected, list(expected)), (fn, args, kwargs)
                shapes += 1
    assert shapes == 9 * 5 * 7
