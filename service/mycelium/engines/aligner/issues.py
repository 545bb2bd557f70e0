"""Before the rounds: opening positions, the term check, and issue discovery.

Issues are discovered from the opening positions. When every member stated its position with an
offer marker, no model is needed: each term named is an issue; a term every member gave a number
for is a numeric issue, an evenly spaced grid spanning their positions; any other term's options
are the values stated. Otherwise the model seam is asked (``{"issues": [{"name", "options"}],
"positions": {handle: {issue: option}}}``); what it answers is checked (snake_case names, at least
two options, a numeric issue evenly spaced, positions snapped or dropped) and never completed by
guesswork. An issue everyone already agrees on is settled, not negotiated.

The term check (only with a model, and only over what members wrote in words) asks which terms two
or more members use in different senses (at most three, each reading naming a real member); any
failure finds none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from itertools import pairwise
from typing import Any

from mycelium.core import markers
from mycelium.engines.aligner.snap import snap
from mycelium.engines.models import Model, ModelError

GRID_INTERVALS = 4
MAX_TERMS = 3
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_JSON = re.compile(r"[\[{].*[\]}]", re.DOTALL)

DISCOVER_SYSTEM = (
    "You find the issues a negotiation is about from each member's opening position. Answer with "
    'JSON only: {"issues": [{"name": "<snake_case>", "options": ["<option>", ...]}], "positions": '
    '{"<member>": {"<issue>": "<option>"}}}. Each issue has at least two options; a numeric issue '
    "is an evenly spaced grid spanning the members' positions. Use only what the members said."
)
TERMS_SYSTEM = (
    "You check whether members of a negotiation use a term in different senses. Answer with JSON "
    'only: {"terms": [{"term": "<word>", "readings": {"<member>": "<what they mean>"}}]}, at most '
    'three terms, each read differently by two or more members; {"terms": []} when there are none.'
)


@dataclass(frozen=True)
class Opening:
    handle: str
    text: str  # the prose, markers removed
    offer: Mapping[str, str] | None = None  # the offer marker's terms, as written
    reply: str | None = None
    confidence: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "offer": dict(self.offer) if self.offer else None,
            "reply": self.reply,
            "confidence": self.confidence,
        }


@dataclass
class Space:
    """The issues to negotiate ({name: options}), the ones already settled, and each member's
    opening ask on the grid."""

    issues: dict[str, list[str]] = field(default_factory=dict)
    settled: dict[str, str] = field(default_factory=dict)
    asks: dict[str, dict[str, str]] = field(default_factory=dict)
    how: str = "markers"


class NoIssues(ValueError):
    """Nothing to negotiate; the message says why."""


def snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(name).strip().lower()).strip("_")


def _decimal(value: str) -> Decimal | None:
    try:
        d = Decimal(str(value).strip().rstrip("%").strip())
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def _shown(d: Decimal) -> str:
    return str(int(d)) if d == d.to_integral_value() else format(d.normalize(), "f")


def grid(low: Decimal, high: Decimal) -> list[str]:
    """An evenly spaced grid from low to high: whole steps when both ends are whole numbers (as
    many intervals, up to four, as divide the span), else four equal intervals."""
    if high < low:
        low, high = high, low
    span = high - low
    if span == 0:
        return [_shown(low)]
    whole = low == low.to_integral_value() and high == high.to_integral_value()
    n = GRID_INTERVALS
    if whole:
        n = next(k for k in range(min(GRID_INTERVALS, int(span)), 0, -1) if int(span) % k == 0)
    step = span / n
    return [_shown(low + step * i) for i in range(n + 1)]


def evenly_spaced(options: Sequence[str]) -> bool:
    nums = [_decimal(o) for o in options]
    if any(n is None for n in nums) or len(nums) < 2:
        return False
    ordered = sorted(n for n in nums if n is not None)
    gaps = {b - a for a, b in pairwise(ordered)}
    return len(gaps) == 1 and 0 not in gaps


def from_markers(openings: Sequence[Opening]) -> Space:
    """The space the members' offer markers span (every member stated one)."""
    names: list[str] = []
    stated: dict[str, dict[str, str]] = {}
    for o in openings:
        for k, v in (o.offer or {}).items():
            name = snake(k)
            if not name:
                continue
            if name not in names:
                names.append(name)
            stated.setdefault(name, {})[o.handle] = str(v).strip()
    space = Space()
    for name in names:
        values = stated[name]
        nums = {h: _decimal(v) for h, v in values.items()}
        if all(n is not None for n in nums.values()):
            known = [n for n in nums.values() if n is not None]
            options = grid(min(known), max(known))
        else:
            options = []
            for v in values.values():
                if not any(markers_norm(v) == markers_norm(o) for o in options):
                    options.append(v)
        if len(options) < 2:
            space.settled[name] = options[0]
            continue
        space.issues[name] = options
        for h, v in values.items():
            got = snap(v, options)
            if got is not None:
                space.asks.setdefault(h, {})[name] = got
    return space


def markers_norm(v: str) -> str:
    return re.sub(r"[\s_\-]+", " ", v.strip().lower())


def _load(text: str) -> Any:
    found = _JSON.search(text or "")
    if not found:
        return None
    try:
        return json.loads(found.group(0))
    except ValueError:
        return None


def checked_space(data: Any, cast: Sequence[str]) -> Space:
    """The model's answer as a space, or NoIssues saying what was wrong with it."""
    raw = data.get("issues") if isinstance(data, Mapping) else data
    if not isinstance(raw, list):
        raise NoIssues("the model's answer named no issues")
    space = Space(how="model")
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        name = snake(str(item.get("name", "")))
        options = [str(o).strip() for o in item.get("options") or [] if str(o).strip()]
        options = list(dict.fromkeys(options))
        if not _NAME.match(name) or len(options) < 2:
            continue
        if all(_decimal(o) is not None for o in options) and not evenly_spaced(options):
            continue  # a numeric issue must be an evenly spaced grid
        space.issues[name] = options
    positions = data.get("positions") if isinstance(data, Mapping) else None
    if isinstance(positions, Mapping):
        for h, ask in positions.items():
            if h not in cast or not isinstance(ask, Mapping):
                continue
            for name, options in space.issues.items():
                got = snap(ask[name], options) if name in ask else None
                if got is not None:
                    space.asks.setdefault(h, {})[name] = got
    if not space.issues:
        raise NoIssues("no issue with at least two options was found in the opening positions")
    return space


def positions_text(openings: Sequence[Opening], clarifications: Mapping[str, str] | None = None) -> str:
    lines = []
    for o in openings:
        offer = f" (offer: {', '.join(f'{k}={v}' for k, v in o.offer.items())})" if o.offer else ""
        lines.append(f"{o.handle}: {markers.defang(o.text) or '(no words)'}{offer}")
    for h, text in (clarifications or {}).items():
        lines.append(f"{h} clarifies: {markers.defang(text)}")
    return "\n".join(lines)


async def discover(
    openings: Sequence[Opening], model: Model | None, clarifications: Mapping[str, str] | None = None
) -> Space:
    """The issue space of the opening positions (see the module docstring), or NoIssues."""
    spoke = [o for o in openings if o.offer or o.text]
    if len(spoke) < 2:
        raise NoIssues("fewer than two members stated an opening position")
    if all(o.offer for o in spoke):
        space = from_markers(spoke)
        if not space.issues:
            raise NoIssues("the members' opening offers already agree on every term")
        return space
    if model is None:
        raise NoIssues("an opening position is in words only, and no model is configured to read it")
    try:
        prompt = "Opening positions:\n" + positions_text(spoke, clarifications)
        answer = await model.complete(DISCOVER_SYSTEM, [{"role": "user", "content": prompt}])
    except ModelError as exc:
        raise NoIssues(f"the model could not find the issues ({exc})") from None
    return checked_space(_load(answer), [o.handle for o in openings])


async def term_check(openings: Sequence[Opening], model: Model | None) -> list[dict[str, Any]]:
    """Terms two or more members use in different senses (fail-soft: none)."""
    worded = [o for o in openings if o.text]
    if model is None or len(worded) < 2:
        return []
    try:
        answer = await model.complete(
            TERMS_SYSTEM, [{"role": "user", "content": "Term check:\n" + positions_text(worded)}]
        )
    except ModelError:
        return []
    data = _load(answer)
    raw = data.get("terms") if isinstance(data, Mapping) else None
    members = {o.handle for o in worded}
    found: list[dict[str, Any]] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("readings"), Mapping):
            continue
        readings = {str(h): str(r) for h, r in item["readings"].items() if h in members and str(r).strip()}
        term = str(item.get("term", "")).strip()
        if term and len(readings) >= 2:
            found.append({"term": term, "readings": readings})
    return found[:MAX_TERMS]
