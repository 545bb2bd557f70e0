"""The message search grammar: one line of text in, a typed query out.

    from:avery task:checkout after:2d "apple pay" -stance:reject sort:oldest

==========================  ======================================================================
``word``                    every word must appear (case-insensitive)
``"a phrase"``              the phrase must appear
``-word``                   the word must not appear
``field:value``             narrow by a field; the same field twice is an OR, different fields AND
``field:"two words"``       a quoted value
``-field:value``            drop what matches
``@handle``                 shorthand for ``from:handle``
``after:`` ``since:``       lower bound (inclusive); ``before:`` ``until:`` upper bound (exclusive)
``on:``                     the whole UTC day ``[day, next day)``
``sort:``                   ``newest`` (default), ``oldest``, ``relevance``
==========================  ======================================================================

A time value is an ISO date or stamp, an age (``30m``, ``2h``, ``3d``, ``1w``; units
``m|min|h|d|w``), ``today`` or ``yesterday``. A date-only ``before:`` stops at the start of that
day, so ``before:2026-09-03`` excludes the 3rd.

**Problems are reported, not dropped**: a time that cannot be read, a negated time, an unknown sort
and a closed field's value outside its set each land in :attr:`SearchQuery.problems`, so the person
or agent who typed them finds out. The closed-value clause is kept (it matches nothing, which is the
truth, and the count agrees with the problem). A ``name:value`` whose name is not a field is free
text (URLs and memory keys keep working); a field with no value yet (``from:``) narrows nothing.

This module only *parses*; the SQL query is built from :class:`SearchQuery` elsewhere. The scoring
rule and the snippet window (:func:`score_text`, :func:`snippet`) live here too, as the reference
the SQL reproduces. ``now`` is always a parameter: there is no hidden clock. The vocabularies are
frozen in ``contracts/message-search.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from types import MappingProxyType
from typing import Any

from mycelium.core.handles import normalize_handle

#: The fields a message is searched by, in the order a caller lists them.
FIELDS: tuple[str, ...] = (
    "from",
    "to",
    "mentions",
    "task",
    "in",
    "type",
    "kind",
    "status",
    "stance",
    "step",
    "is",
    "has",
    "day",
    "thread",
)
ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "sender": "from",
        "by": "from",
        "author": "from",
        "recipient": "to",
        "mention": "mentions",
        "row": "task",
        "episode": "thread",
        "date": "day",
    }
)
#: The field ``@handle`` is shorthand for.
AT_FIELD = "from"
#: Time keywords and the bound each sets.
TIME_KEYS: Mapping[str, str] = MappingProxyType(
    {"after": "after", "since": "after", "before": "before", "until": "before", "on": "on"}
)
SORTS: tuple[str, ...] = ("newest", "oldest", "relevance")
DEFAULT_SORT = "newest"
SORT_KEY = "sort"
#: Fields whose values are a closed set, and that set.
CLOSED_VALUES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "in": ("channel", "thread"),
        "is": ("edited", "conductor"),
        "has": ("mention", "link", "memory", "code", "scores"),
        "stance": ("accept", "reject"),
    }
)
#: Fields whose values are handles: their values are normalised like every handle.
HANDLE_FIELDS: tuple[str, ...] = ("from", "to", "mentions")
#: Age units and the length of one.
AGE_UNITS: Mapping[str, timedelta] = MappingProxyType(
    {
        "m": timedelta(minutes=1),
        "min": timedelta(minutes=1),
        "h": timedelta(hours=1),
        "d": timedelta(days=1),
        "w": timedelta(weeks=1),
    }
)
#: Words that name a UTC day relative to ``now``, and how many days back.
DAY_WORDS: Mapping[str, int] = MappingProxyType({"today": 0, "yesterday": 1})

#: Scoring: each phrase occurrence weighs this much; a term's raw count is capped at this.
PHRASE_WEIGHT = 3
TERM_COUNT_CAP = 5
#: A snippet is a window this many characters wide around the first match.
SNIPPET_WIDTH = 180
ELLIPSIS = "…"

#: Why a token became a problem (the reason rides next to the token as typed).
NEGATED_TIME = "a time bound cannot be negated"
UNREADABLE_TIME = "not a time: an ISO date or stamp, an age (30m, 2h, 3d, 1w), today or yesterday"
NEGATED_SORT = "a sort cannot be negated"
UNREADABLE_DAY = "not a day: an ISO date or stamp, an age (30m, 2h, 3d, 1w), today or yesterday"

# One token: an optional ``-``, then ``name:value`` (value may be quoted) or a bare/quoted word.
_TOKEN_RE = re.compile(r'(-?)(?:([A-Za-z][\w-]*):)?("([^"]*)"?|\S+)')
_AGE_RE = re.compile(r"(\d+)\s*(min|m|h|d|w)", re.IGNORECASE)
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_STAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ].+", re.IGNORECASE)
_AT_HANDLE_RE = re.compile(r"@[A-Za-z0-9][A-Za-z0-9_-]*(?:#\S*)?")


@dataclass(frozen=True)
class Clause:
    """One ``field:value`` the query narrows by; ``field`` is canonical, ``value`` lowercased."""

    field: str
    value: str
    negate: bool = False


@dataclass(frozen=True)
class Problem:
    """A token that looked like scope but could not be honoured, as typed, and why."""

    token: str
    reason: str


@dataclass(frozen=True)
class SearchQuery:
    """A raw query split into what to match, what to narrow by, and how to order it."""

    #: Words every hit must contain, lowercased.
    words: tuple[str, ...] = ()
    #: Phrases every hit must contain, lowercased, inner whitespace collapsed.
    phrases: tuple[str, ...] = ()
    #: Words (or quoted phrases) no hit may contain, lowercased.
    excluded: tuple[str, ...] = ()
    clauses: tuple[Clause, ...] = ()
    #: Inclusive lower bound on the message time (aware, UTC).
    after: datetime | None = None
    #: Exclusive upper bound on the message time (aware, UTC).
    before: datetime | None = None
    sort: str = DEFAULT_SORT
    problems: tuple[Problem, ...] = ()

    @property
    def text(self) -> str:
        """The free text as one string (words, then quoted phrases), for display."""
        return " ".join([*self.words, *(f'"{p}"' for p in self.phrases)])

    @property
    def needles(self) -> tuple[str, ...]:
        """What a hit was matched on (phrases first), for placing a snippet."""
        return (*self.phrases, *self.words)

    def by_field(self) -> dict[str, tuple[Clause, ...]]:
        """The clauses grouped by field, in :data:`FIELDS` order: OR within, AND across."""
        return {
            name: found for name in FIELDS if (found := tuple(c for c in self.clauses if c.field == name))
        }

    @property
    def named_types(self) -> frozenset[str]:
        """The message types a positive ``type:`` names (they widen the default prose-only scope)."""
        return frozenset(c.value for c in self.clauses if c.field == "type" and not c.negate)

    def scope(self) -> dict[str, Any]:
        """The interpretation the search ran under, as the response echoes it."""
        return {
            "text": self.text,
            "clauses": [{"field": c.field, "value": c.value, "negate": c.negate} for c in self.clauses],
            "after": self.after,
            "before": self.before,
            "sort": self.sort,
            "problems": [p.token for p in self.problems],
        }


# ── time ────────────────────────────────────────────────────────────────────


def _utc(now: datetime) -> datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    return now.astimezone(UTC)


def _day_start(moment: datetime) -> datetime:
    return datetime.combine(moment.astimezone(UTC).date(), time(), tzinfo=UTC)


def parse_time(raw: str, *, now: datetime) -> datetime | None:
    """The instant ``raw`` names (aware, UTC), or ``None`` when it cannot be read.

    An age is that long before ``now``; ``today``, ``yesterday`` and an ISO date are the start of
    that UTC day; an ISO stamp without an offset is read as UTC.
    """
    now = _utc(now)
    text = raw.strip().lower()
    age = _AGE_RE.fullmatch(text)
    if age:
        return now - int(age.group(1)) * AGE_UNITS[age.group(2)]
    if text in DAY_WORDS:
        return _day_start(now) - timedelta(days=DAY_WORDS[text])
    try:
        if _DATE_RE.fullmatch(text):
            return datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
        if _STAMP_RE.fullmatch(text):
            stamp = datetime.fromisoformat(raw.strip())
            return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)
    except ValueError:
        return None
    return None


def day_of(raw: str, *, now: datetime) -> date | None:
    """The UTC day ``raw`` names (any time value; an instant names the day it falls in)."""
    moment = parse_time(raw, now=now)
    return moment.date() if moment else None


def time_bounds(key: str, raw: str, *, now: datetime) -> tuple[datetime | None, datetime | None] | None:
    """``(after, before)`` that the time clause ``key:raw`` sets, or ``None`` when unreadable.

    ``after:`` sets an inclusive lower bound; ``before:`` an exclusive upper bound (a day stops at
    its start); ``on:`` spans the whole UTC day the value names (an instant: the day it falls in).
    """
    moment = parse_time(raw, now=now)
    if moment is None:
        return None
    bound = TIME_KEYS[key]
    if bound == "after":
        return moment, None
    if bound == "before":
        return None, moment
    start = _day_start(moment)
    return start, start + timedelta(days=1)


# ── parsing ─────────────────────────────────────────────────────────────────


def _is_pending_field(word: str, names: Mapping[str, str]) -> bool:
    """``from:``, ``-after:``, ``sort:`` typed with no value yet."""
    bare = word[:-1].lower()
    return word.endswith(":") and (bare in names or bare in TIME_KEYS or bare == SORT_KEY)


def _clause_value(field: str, value: str, *, now: datetime) -> tuple[str, str | None]:
    """The value as the clause carries it, and why it cannot match (``None`` when it can)."""
    if field in HANDLE_FIELDS:
        return normalize_handle(value), None
    lowered = " ".join(value.lower().split())
    if field in CLOSED_VALUES and lowered not in CLOSED_VALUES[field]:
        return lowered, f"not a value of {field}: (one of {', '.join(CLOSED_VALUES[field])})"
    if field == "day":
        day = day_of(value, now=now)
        return (day.isoformat(), None) if day else (lowered, UNREADABLE_DAY)
    return lowered, None


def parse(raw: str | None, *, now: datetime) -> SearchQuery:
    """Split ``raw`` into words, phrases, clauses, time bounds and sort, reporting what can't be read.

    ``now`` (aware) anchors ages and ``today``/``yesterday``; bounds come back in UTC.
    """
    now = _utc(now)
    names = {**{f: f for f in FIELDS}, **ALIASES}
    words: list[str] = []
    phrases: list[str] = []
    excluded: list[str] = []
    clauses: list[Clause] = []
    problems: list[Problem] = []
    after: datetime | None = None
    before: datetime | None = None
    sort = DEFAULT_SORT

    for m in _TOKEN_RE.finditer(raw or ""):
        token = m.group(0)
        negate = m.group(1) == "-"
        name = (m.group(2) or "").lower()
        quoted = m.group(4)
        value = quoted if quoted is not None else m.group(3)

        if name in TIME_KEYS:
            if not value.strip():
                continue
            bounds = time_bounds(name, value, now=now)
            if negate:
                problems.append(Problem(token, NEGATED_TIME))
            elif bounds is None:
                problems.append(Problem(token, UNREADABLE_TIME))
            else:
                low, high = bounds
                if low is not None:
                    after = low if after is None else max(after, low)
                if high is not None:
                    before = high if before is None else min(before, high)
            continue
        if name == SORT_KEY:
            if negate:
                problems.append(Problem(token, NEGATED_SORT))
            elif value.strip().lower() in SORTS:
                sort = value.strip().lower()
            elif value.strip():
                problems.append(Problem(token, f"not a sort (one of {', '.join(SORTS)})"))
            continue
        if name in names:
            if not value.strip():
                continue  # a field with no value yet narrows nothing
            field = names[name]
            clause_value, problem = _clause_value(field, value.strip(), now=now)
            if not clause_value:
                continue  # `from:@` — nothing left to narrow by
            clauses.append(Clause(field, clause_value, negate))
            if problem is not None:
                problems.append(Problem(token, problem))
            continue
        if name:
            value = f"{m.group(2)}:{value}"  # not a field: the whole token is text, colon and all
        elif quoted is None and _AT_HANDLE_RE.fullmatch(value):
            clauses.append(Clause(AT_FIELD, normalize_handle(value), negate))
            continue

        word = " ".join(value.lower().split())
        if not word or word == "@" or _is_pending_field(word, names):
            continue
        if negate:
            excluded.append(word)
        elif quoted is not None and not name:
            phrases.append(word)
        else:
            words.append(word)

    return SearchQuery(
        words=tuple(words),
        phrases=tuple(phrases),
        excluded=tuple(excluded),
        clauses=tuple(clauses),
        after=after,
        before=before,
        sort=sort,
        problems=tuple(problems),
    )


# ── scoring and snippets (the reference the SQL reproduces) ─────────────────


def _whole_word_count(haystack: str, needle: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack))


def score_text(text: str, query: SearchQuery) -> int | None:
    """How well ``text`` answers the free text of ``query``; ``None`` when it does not.

    Case-insensitive substring counts (non-overlapping). Any excluded word present → ``None``.
    Every phrase and every word must appear. Each phrase scores ``3 × count``; each word scores
    ``min(count, 5) + whole-word count`` (a whole-word hit reads as a better answer than a
    fragment). A query with no free text scores 0 for every text.
    """
    lowered = text.lower()
    if any(x in lowered for x in query.excluded):
        return None
    score = 0
    for phrase in query.phrases:
        n = lowered.count(phrase)
        if n == 0:
            return None
        score += PHRASE_WEIGHT * n
    for word in query.words:
        n = lowered.count(word)
        if n == 0:
            return None
        score += min(n, TERM_COUNT_CAP) + _whole_word_count(lowered, word)
    return score


def snippet(text: str, needles: Sequence[str], *, width: int = SNIPPET_WIDTH) -> str:
    """A one-line window of ``text`` around the first needle found (needles tried in order).

    Whitespace collapses to single spaces. A text that fits is returned whole. Otherwise the
    window starts a third of ``width`` before the match (never before the start) and an ellipsis
    marks each side that was cut; with no needle found it is the first ``width`` characters.
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    at = next((i for i in (lowered.find(n.lower()) for n in needles if n) if i >= 0), -1)
    if at < 0:
        return flat[:width].rstrip() + ELLIPSIS
    start = max(0, at - width // 3)
    window = flat[start : start + width].strip()
    return (ELLIPSIS if start > 0 else "") + window + (ELLIPSIS if start + width < len(flat) else "")
