"""The contracts in ``contracts/`` that code reads at run time (the others are specifications the
tests hold the code to).

``vocabulary.json`` holds the closed sets the database and this package share: engine kinds, stance
words, a flow's step vocabulary. The SQL names them by placeholder (see
:func:`mycelium.db.schema.inline_contracts`), so each set is written once.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from mycelium.paths import contracts_dir


@cache
def load(name: str) -> Any:
    """A contract file's content, without its ``_comment``."""
    data = json.loads((contracts_dir() / name).read_text())
    if isinstance(data, dict):
        data.pop("_comment", None)
    return data


def vocabulary() -> dict[str, Any]:
    """``contracts/vocabulary.json``: ``engine_kinds``, ``stance_words``, ``flow``."""
    return load("vocabulary.json")
