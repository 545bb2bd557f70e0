"""Named queries loaded from ``sql/queries/*.sql``.

Each file holds queries introduced by a ``-- name: <name>`` line; the text up to the next such line
is the query. Names are global across files and must be unique.
"""

from __future__ import annotations

import re
from functools import cache

from mycelium.paths import sql_dir

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@cache
def _load() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        text = path.read_text()
        marks = list(_NAME.finditer(text))
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            name = mark.group(1)
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice (second in {path.name})")
            found[name] = text[mark.end():end].strip()
    return found


def q(name: str) -> str:
    """The SQL of the named query."""
    try:
        return _load()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries") from None
