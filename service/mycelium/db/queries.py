"""Named queries loaded from ``sql/queries/*.sql``.

Each file holds queries introduced by a ``-- name: <name>`` line; the text up to the next such line
is the query. Names are global across files and must be unique.

A query names its parameters (``:room``, ``:key``; ``::`` stays a cast, and nothing inside a string,
a quoted name or a comment is a parameter); they become ``$1``, ``$2``… in the order they first
appear. A ``-- returns: row | rows | value | none`` line in the query says what a call gives back
(default ``rows``). A ``-- needs: writer`` line marks a write a viewer may not make (a query that
declares its actor with ``mycelium.acting`` is one without saying so); the administrative verbs
refuse anyone but an operator in the database itself (sql/base.sql ``operator_only``). Every
caller reaches them through the verb gateway (``mycelium.verbs``), by name with named parameters
(the SDK's store binds them with the gateway's ``bind`` on its own connections).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Literal

from mycelium.paths import sql_dir

Returns = Literal["row", "rows", "value", "none"]

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_RETURNS = re.compile(r"^--\s*returns:\s*(\w+)\s*$", re.MULTILINE)
_NEEDS = re.compile(r"^--\s*needs:\s*(\w+)\s*$", re.MULTILINE)
# what may hold a colon that is not a parameter, then a parameter
_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|::|:([a-z_][a-z0-9_]*)""")


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    """The text with positional parameters."""
    params: tuple[str, ...]
    """The named parameters, in positional order (empty for a query written with ``$n``)."""
    returns: Returns
    needs: Literal["writer"] | None = None
    """What a principal must be to call it when the token gate is on: ``writer`` (an agent or an
    operator, not a viewer), or None (anyone admitted)."""


def compile_query(name: str, text: str) -> Query:
    """A query's text with its named parameters made positional."""
    found = _RETURNS.search(text)
    returns = found.group(1) if found else "rows"
    if returns not in ("row", "rows", "value", "none"):
        raise RuntimeError(f"query {name!r}: returns {returns!r} is not row, rows, value or none")
    needed = _NEEDS.search(text)
    needs = needed.group(1) if needed else None
    if needs not in (None, "writer"):
        raise RuntimeError(f"query {name!r}: needs {needs!r} is not writer")
    if needs is None and "mycelium.acting(" in _TOKENS.sub(_kept, text):
        needs = "writer"  # it declares its actor: a write
    params: list[str] = []

    def number(match: re.Match[str]) -> str:
        param = match.group(1)
        if param is None:
            return match.group(0)
        if param not in params:
            params.append(param)
        return f"${params.index(param) + 1}"

    sql = _TOKENS.sub(number, text)
    if params and re.search(r"\$\d", _TOKENS.sub("", text)):
        raise RuntimeError(f"query {name!r} mixes named and numbered parameters")
    return Query(name, sql, tuple(params), returns, needs)  # type: ignore[arg-type]


def _kept(match: re.Match[str]) -> str:
    """A token of a query's text as it counts for what the query calls: comments and strings out."""
    token = match.group(0)
    return "" if token.startswith(("--", "'")) else token


@cache
def _load() -> dict[str, Query]:
    found: dict[str, Query] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        text = path.read_text()
        marks = list(_NAME.finditer(text))
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            name = mark.group(1)
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice (second in {path.name})")
            found[name] = compile_query(name, text[mark.end():end].strip())
    return found


def query(name: str) -> Query:
    """The named query."""
    try:
        return _load()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries") from None
