"""Handles: the one spelling of "the same member", and what a handle may look like.

A handle names a member of a room (an agent, a person, an engine). People and agents write it
many ways — ``@Alice``, ``alice``, `` alice ``, ``alice#a8f3`` (one *session* of alice) — and every
place that compares handles (floors, the await loop, mentions, search, claims) must agree that
these are one member. So there is exactly one normalisation, here, and the database carries the
same rule as a SQL function; ``contracts/mentions.json`` holds a table of cases both assert.

**Normalisation** (in this order, simple enough to mirror in SQL):

1. trim ASCII whitespace (space, tab, newline, carriage return, form feed, vertical tab);
2. drop every leading ``@``;
3. drop a session suffix: everything from the first ``#``;
4. trim ASCII whitespace again;
5. lowercase ASCII letters ``A-Z`` (nothing else is touched, so the result never depends on a
   locale; a non-ASCII character survives and then fails validation).

**Validity**: a normalised handle matches ``^[a-z0-9][a-z0-9_-]{0,63}$``. There is no dot on
purpose: a handle is what an ``@``-mention names, and in prose ``@alice.`` ends a sentence, so a
dotted handle could never be mentioned whole. Every valid handle is mentionable, and every handle a
mention yields is (length aside) a valid one.
"""

from __future__ import annotations

import re
from types import MappingProxyType

#: The characters trimmed around a handle (ASCII whitespace; SQL: ``E' \\t\\n\\r\\f\\v'``).
WHITESPACE = " \t\n\r\f\v"

#: Longest handle, in characters.
MAX_LENGTH = 64

#: What a normalised handle must match.
HANDLE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_START_RE = re.compile(r"^[a-z0-9]")
_CHARS_RE = re.compile(r"^[a-z0-9_-]*$")

#: Why a handle is refused: a stable code and the sentence a person reads, checked in this order.
PROBLEMS: MappingProxyType[str, str] = MappingProxyType(
    {
        "blank": "a handle must not be blank",
        "too_long": f"a handle has at most {MAX_LENGTH} characters",
        "bad_start": "a handle must start with a letter a-z or a digit",
        "bad_character": "a handle may contain only a-z, 0-9, '_' and '-'",
    }
)


class HandleError(ValueError):
    """A handle that cannot name a member; ``code`` is one of :data:`PROBLEMS`."""

    def __init__(self, code: str, raw: str) -> None:
        super().__init__(f"{PROBLEMS[code]} (got {raw!r})")
        self.code = code
        self.raw = raw


def normalize_handle(raw: str) -> str:
    """``raw`` in its one canonical spelling; ``""`` when nothing is left (see the module rule)."""
    bare = raw.strip(WHITESPACE).lstrip("@")
    bare = bare.partition("#")[0].strip(WHITESPACE)
    return bare.translate(_LOWER)


def handle_problem(raw: str) -> str | None:
    """The code of what is wrong with ``raw`` as a handle (after normalising), or ``None``."""
    handle = normalize_handle(raw)
    if not handle:
        return "blank"
    if len(handle) > MAX_LENGTH:
        return "too_long"
    if not _START_RE.match(handle):
        return "bad_start"
    if not _CHARS_RE.match(handle):
        return "bad_character"
    return None


def is_valid_handle(raw: str) -> bool:
    """Whether ``raw`` normalises to a valid handle."""
    return handle_problem(raw) is None


def parse_handle(raw: str) -> str:
    """``raw`` normalised, or :class:`HandleError` naming what is wrong with it."""
    problem = handle_problem(raw)
    if problem is not None:
        raise HandleError(problem, raw)
    return normalize_handle(raw)


def same_handle(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name the same member (a blank handle names nobody)."""
    na = normalize_handle(a)
    return bool(na) and na == normalize_handle(b)
