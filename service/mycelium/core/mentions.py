"""``@``-mentions in message text: who is named, and who is woken.

Two forms (``contracts/mentions.json`` freezes both and a table of cases):

- ``@handle`` — a **mention**: the handle becomes a recipient, is woken by ``await`` and, when it
  is an engine, summoned.
- ``@~handle`` — a **silent mention**: it names the handle (search finds it with
  ``mentions:handle``) and never wakes, addresses or summons it. It lets a writer credit or cc
  someone without spending their turn.

A token counts only at the start of the text or right after whitespace, ``(`` or ``<``, so an
e-mail address (``bob@host.example``) is not a mention. The handle runs over ``[A-Za-z0-9_-]``
(starting with a letter or digit) as far as it goes: ``@release-agent`` is one handle and
``@alice.`` is ``alice`` ending a sentence. Handles come back normalised
(:func:`mycelium.core.handles.normalize_handle`), in the order first seen, each form deduplicated on
its own: ``@~bob and @bob`` names bob silently *and* wakes him.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mycelium.core.handles import normalize_handle

MENTION_SIGIL = "@"
SILENT_SIGIL = "@~"

#: Characters that continue a handle: a handle followed by one of these is a longer handle.
HANDLE_CHARS = "[A-Za-z0-9_-]"

#: One mention token: group 1 is ``~`` for a silent mention, group 2 the handle as written.
TOKEN_PATTERN = r"(?:^|(?<=[\s(<]))@(~?)([A-Za-z0-9][A-Za-z0-9_-]*)"
_TOKEN_RE = re.compile(TOKEN_PATTERN)
_MENTIONABLE_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")


@dataclass(frozen=True)
class Mention:
    """One handle a text names; ``silent`` when it was written ``@~handle``."""

    handle: str
    silent: bool = False

    @property
    def wakes(self) -> bool:
        """Whether this mention wakes (and addresses, and summons) the handle."""
        return not self.silent


def parse_mentions(text: str) -> tuple[Mention, ...]:
    """Every mention in ``text`` in the order first seen, each (handle, form) once."""
    seen: dict[tuple[str, bool], None] = {}
    for match in _TOKEN_RE.finditer(text):
        seen.setdefault((normalize_handle(match.group(2)), match.group(1) == "~"), None)
    return tuple(Mention(handle, silent) for handle, silent in seen)


def loud_mentions(text: str) -> tuple[str, ...]:
    """The handles ``text`` wakes: its ``@handle`` mentions, first-seen order."""
    return tuple(m.handle for m in parse_mentions(text) if not m.silent)


def silent_mentions(text: str) -> tuple[str, ...]:
    """The handles ``text`` names silently: its ``@~handle`` mentions, first-seen order."""
    return tuple(m.handle for m in parse_mentions(text) if m.silent)


def mentioned_handles(text: str) -> tuple[str, ...]:
    """Everyone ``text`` names, loudly or silently, each once in first-seen order.

    This is what ``mentions:`` in message search matches and what ``has:mention`` tests.
    """
    return tuple(dict.fromkeys(m.handle for m in parse_mentions(text)))


def mentions_handle(text: str, handle: str) -> bool:
    """The await loop's text test: does ``text`` wake ``handle`` with an ``@handle`` in it?

    True when ``@handle`` appears at a mention boundary and is not followed by
    ``[A-Za-z0-9_-]`` (which would make it a longer handle); letters compare case-insensitively
    and ``handle`` is normalised first (one no token can spell wakes on nothing). A silent
    ``@~handle`` never counts. This equals
    ``normalize_handle(handle) in loud_mentions(text)``, written as one pattern so SQL can
    mirror it.
    """
    bare = normalize_handle(handle)
    if not _MENTIONABLE_RE.fullmatch(bare):
        return False  # no token can spell it, so no text wakes it
    pattern = rf"(?:^|(?<=[\s(<]))@{re.escape(bare)}(?![A-Za-z0-9_-])"
    return re.search(pattern, text, re.IGNORECASE) is not None
