"""Snapping a read offer onto the issue space (upstream's ``offer_snap`` rules).

A value a member (or the model reading a member) gave is matched to one of the issue's options,
first rule that matches wins: exact; case-insensitive; normalised (runs of spaces, ``_`` and ``-``
are one space); for an issue whose options are all numbers, the nearest option within one grid
step (a tie between two options, or a value further off, is refused: authoritative, the string
rules are not tried); token containment either way; a ``difflib`` ratio of at least 80. Anything
else is refused (``None``): a value is never made up.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher
from itertools import pairwise

FUZZY_THRESHOLD = 80.0
STEP_TOLERANCE = 1.0


def _number(text: str) -> float | None:
    try:
        return float(str(text).strip().rstrip("%").strip())
    except ValueError:
        return None


def normalised(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", str(text).strip().lower())


class _NotNumeric:
    pass


NOT_NUMERIC = _NotNumeric()


def numeric_snap(raw: str, options: Sequence[str]) -> str | _NotNumeric | None:
    """The nearest option within one grid step, ``None`` (refused), or ``NOT_NUMERIC`` when the
    value or an option is not a number."""
    value = _number(raw)
    if value is None or not options:
        return NOT_NUMERIC
    grid: list[tuple[float, str]] = []
    for o in options:
        f = _number(o)
        if f is None:
            return NOT_NUMERIC
        grid.append((f, o))
    points = sorted(f for f, _ in grid)
    gaps = [b - a for a, b in pairwise(points) if b > a]
    step = min(gaps) if gaps else max(abs(points[0]), 1.0)
    near = sorted((abs(value - f), i) for i, (f, _) in enumerate(grid))
    best, index = near[0]
    if best > step * STEP_TOLERANCE:
        return None
    if len(near) > 1 and near[1][0] == best:
        return None
    return grid[index][1]


def snap(raw: object, options: Sequence[str], threshold: float = FUZZY_THRESHOLD) -> str | None:
    """The option ``raw`` means, or ``None`` (see the module docstring for the rules)."""
    s = str(raw)
    if s in options:
        return s
    low = s.lower()
    for o in options:
        if low == o.lower():
            return o
    norm = normalised(s)
    for o in options:
        if norm == normalised(o):
            return o
    numeric = numeric_snap(s, options)
    if not isinstance(numeric, _NotNumeric):
        return numeric
    tokens = set(norm.split())
    for o in options:
        mine = set(normalised(o).split())
        if mine and tokens and (mine <= tokens or tokens <= mine):
            return o
    best, match = 0.0, None
    for o in options:
        score = SequenceMatcher(None, norm, normalised(o)).ratio() * 100.0
        if score > best:
            best, match = score, o
    return match if best >= threshold else None


def snap_offer(raw: Mapping[str, object], issues: Mapping[str, Sequence[str]]) -> dict[str, str] | None:
    """``raw`` as a whole offer ``{issue: option}``: each issue's key, then its value, snapped;
    all or nothing (``None`` when any issue is missing or cannot be read)."""
    if not isinstance(raw, Mapping):
        return None
    keys = [str(k) for k in raw]
    out: dict[str, str] = {}
    for name, options in issues.items():
        key = name if name in raw else snap(name, keys)
        if key is None or key not in raw:
            return None
        value = snap(raw[key], list(options))
        if value is None:
            return None
        out[name] = value
    return out
