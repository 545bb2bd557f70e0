"""The pick: the option that leaves its least happy member happiest (leximin over 0-100 ratings).

Each option's ratings (one per member of the cast; a missing rating counts as 0 for the ranking) are
sorted ascending and compared lexicographically; a tie goes to the earlier letter. The pick is
``feasible`` when every member rated it at or above the bar; ``stuck`` when only missing ratings
keep it from the bar, or the repairs are used up; otherwise ``infeasible``, and the least happy
rater of the pick (the earlier in the cast on a tie) is asked for a fix. **A missing rating is
recorded as missing, never as 0.**
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BAR = 70
MAX_OPTIONS = 26
LABELS = string.ascii_uppercase


@dataclass(frozen=True)
class Option:
    label: str
    text: str
    authors: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "text": self.text, "authors": list(self.authors)}


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def add_options(
    options: Sequence[Option], suggestions: Sequence[tuple[str, str]]
) -> tuple[list[Option], list[str]]:
    """``options`` with each (author, text) suggestion added in order: an empty one skipped, a
    duplicate (whitespace and case aside) folded into the option it repeats, crediting its author;
    at most 26. Returns the options and the labels that are new."""
    out = list(options)
    new: list[str] = []
    for author, text in suggestions:
        if not text.strip():
            continue
        same = next((i for i, o in enumerate(out) if _fold(o.text) == _fold(text)), None)
        if same is not None:
            o = out[same]
            if author not in o.authors:
                out[same] = Option(o.label, o.text, (*o.authors, author))
            continue
        if len(out) >= MAX_OPTIONS:
            break
        label = LABELS[len(out)]
        out.append(Option(label, text.strip(), (author,)))
        new.append(label)
    return out, new


@dataclass(frozen=True)
class Pick:
    pick: str | None
    outcome: str  # feasible | infeasible | stuck
    lowest: int | None
    least_happy: str | None
    missing: tuple[str, ...]
    shortfall: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "pick": self.pick,
            "outcome": self.outcome,
            "lowest": self.lowest,
            "least_happy": self.least_happy,
            "missing": list(self.missing),
            "shortfall": list(self.shortfall),
        }


def pick(
    options: Sequence[str],
    cast: Sequence[str],
    ratings: Mapping[str, Mapping[str, int]],
    threshold: int = BAR,
    repairs_done: int = 0,
    max_repairs: int = 2,
) -> Pick:
    """The leximin pick among ``options`` (labels) by ``cast``'s ``ratings`` ({handle: {label: 0-100}})."""
    if not options:
        return Pick(None, "stuck", None, None, (), ())

    def key(label: str) -> tuple[tuple[int, ...], int]:
        row = sorted(ratings.get(h, {}).get(label, 0) for h in cast)
        return tuple(row), -options.index(label)

    best = max(options, key=key)
    rated = [(h, ratings[h][best]) for h in cast if best in ratings.get(h, {})]
    missing = tuple(h for h in cast if best not in ratings.get(h, {}))
    short = tuple(h for h, v in rated if v < threshold)
    lowest = min((v for _, v in rated), default=None)
    if not missing and not short:
        return Pick(best, "feasible", lowest, None, (), ())
    least = min(((v, cast.index(h), h) for h, v in rated if v < threshold), default=None)
    if not short or repairs_done >= max_repairs:
        return Pick(best, "stuck", lowest, least[2] if least else None, missing, short)
    return Pick(best, "infeasible", lowest, least[2] if least else None, missing, short)


def scorecard(
    options: Sequence[Option],
    cast: Sequence[str],
    ratings: Mapping[str, Mapping[str, int]],
    chosen: str | None,
    threshold: int = BAR,
) -> str:
    """The ratings as a markdown table (``?`` for a missing rating, ``◀`` on the pick)."""
    head = "| option | " + " | ".join(f"@{h}" for h in cast) + " |"
    rule = "|---|" + "---|" * len(cast)
    rows = []
    for o in options:
        mark = f"**{o.label}** ◀" if o.label == chosen else f"**{o.label}**"
        cells = [str(ratings.get(h, {}).get(o.label, "?")) for h in cast]
        rows.append(f"| {mark} | " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *rows, "", f"The bar is {threshold}."])
