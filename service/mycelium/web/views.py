"""What the pages show, shaped from the verbs' answers: pure functions, no I/O.

The board's three columns, the room's timeline with each thread's pings folded into one line, the
floors in words, a memory's body as text and the difference between two of its versions.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from mycelium.core.envelope import live_episode_urn, short_id
from mycelium.verbs.board import BoardRow
from mycelium.verbs.messages import MessageRead

#: The board's columns, in reading order: (attention, heading).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("needs_you", "Needs you"), ("in_flight", "In flight"), ("resolved", "Resolved"),
)

#: The namespaces whose memories are board rows (the vocabulary's live namespaces).
BOARD_NAMESPACES = ("decisions", "status", "work", "failed")

#: How a notice reads in the timeline, by subkind.
NOTICE_VERBS: dict[str, str] = {
    "filed": "filed", "claimed": "claimed", "released": "released", "resolved": "resolved",
    "blocked": "blocked", "unblocked": "unblocked", "expired": "let expire", "floor": "moved the floor in",
}

CONTROL_TYPES = frozenset({"presence", "keepalive"})


@dataclass
class Line:
    """One line of the timeline: a message of the room, a notice, or a thread's folded pings."""

    kind: str  # "message" | "notice" | "thread"
    position: int
    at: datetime
    sender: str
    text: str
    message: MessageRead | None = None
    subkind: str | None = None
    key: str | None = None
    title: str | None = None
    thread: str | None = None
    count: int = 1
    tail: str = ""


@dataclass
class Floor:
    thread: str
    key: str | None
    title: str | None
    holder: str
    speakers: list[str] = field(default_factory=list)

    @property
    def described(self) -> str:
        others = ", ".join(f"@{s}" for s in self.speakers if s != self.holder)
        tail = f"{others} may speak" if others else "no one else may speak right now"
        return f"@{self.holder} holds the floor; {tail}"


def seconds_left(row: BoardRow, now: datetime) -> float | None:
    """Seconds until a held lease expires (None when nothing is held)."""
    if row.expires_at is None or row.assignment != "held":
        return None
    return (row.expires_at - now).total_seconds()


def duration(seconds: float | None) -> str:
    """``12m`` / ``1h 05m`` / ``40s``; negative: ``expired``."""
    if seconds is None:
        return ""
    if seconds <= 0:
        return "expired"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, _ = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m"


def relative(moment: datetime | None, now: datetime) -> str:
    """``just now`` / ``5m ago`` / ``3h ago`` / ``2d ago`` (future times read ``in …``)."""
    if moment is None:
        return ""
    delta = (now - moment).total_seconds()
    ahead = delta < 0
    delta = abs(delta)
    if delta < 45:
        return "just now"
    if delta < 3600:
        text = f"{round(delta / 60)}m"
    elif delta < 86400:
        text = f"{round(delta / 3600)}h"
    else:
        text = f"{round(delta / 86400)}d"
    return f"in {text}" if ahead else f"{text} ago"


#: A thread's task row: the thread's URN -> (row key, title).
Titles = dict[str, tuple[str, "str | None"]]


def timeline(room: str, messages: Sequence[MessageRead], titles: Titles) -> list[Line]:
    """The room's timeline, oldest first: the room's messages and notices as they came, and for each
    thread one line (at its newest ping) quoting its newest message, with how many it had."""
    live = live_episode_urn(room)
    by_id = {m.id: m for m in messages}
    newest_of_thread: dict[str, MessageRead] = {}
    pings: dict[str, list[MessageRead]] = {}
    lines: list[Line] = []
    for m in messages:
        if m.payload_type in CONTROL_TYPES:
            continue
        if m.episode != live and m.payload_type not in ("ping", "notice"):
            newest_of_thread[m.episode] = m
            continue
        if m.payload_type == "ping":
            thread = str(m.payload.get("episode") or "")
            if thread:
                pings.setdefault(thread, []).append(m)
            continue
        if m.payload_type == "notice":
            lines.append(_notice_line(m))
            continue
        lines.append(Line("message", m.position, m.created_at, m.sender_handle, m.content, message=m))
    for thread, seen in pings.items():
        last = seen[-1]
        quoted = by_id.get(str(last.payload.get("message") or "")) or newest_of_thread.get(thread)
        key, title = titles.get(thread, (None, None))
        lines.append(Line(
            "thread", last.position, last.created_at, str(last.payload.get("sender") or "?"),
            quoted.content if quoted is not None else "", message=quoted, key=key, title=title,
            thread=short_id(thread), count=len(seen),
        ))
    lines.sort(key=lambda line: line.position)
    return lines


def _notice_line(m: MessageRead) -> Line:
    data = m.payload
    subkind = str(data.get("subkind") or m.subkind or "notice")
    by = data.get("by") or data.get("holder") or ""
    title = data.get("title")
    key = data.get("key")
    verb = NOTICE_VERBS.get(subkind, subkind)
    text = f"@{by} {verb}" if by else verb
    tail = ""
    if subkind == "filed" and data.get("assignee"):
        tail = f"for @{data['assignee']}"
    if subkind == "floor" and data.get("speakers"):
        tail = f"speakers: {data['speakers']}"
    return Line("notice", m.position, m.created_at, str(by or "system"), text, message=m, subkind=subkind,
                key=str(key) if key else None, title=str(title) if title else None, tail=tail)


def floors(rows: Iterable[Any]) -> list[Floor]:
    return [Floor(thread=short_id(f["episode"]), key=f["key"], title=f["title"], holder=f["holder"],
                  speakers=list(f["speakers"])) for f in rows]


def body_text(value: dict[str, Any] | None) -> str:
    """A memory's body as text: its prose, else its fields as YAML."""
    if not value:
        return ""
    text = value.get("text")
    if isinstance(text, str) and len(value) == 1:
        return text
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True)


def without_title(text: str, title: str | None) -> str:
    """A row's body without its first line when that line is the title the page already heads with."""
    first, _, rest = text.lstrip().partition("\n")
    if title and first.lstrip("#").strip() == title.strip():
        return rest.lstrip("\n")
    return text


def namespaces(keys: Iterable[str]) -> list[tuple[str, int]]:
    """The first key segments and how many keys each holds, most first."""
    counts: dict[str, int] = {}
    for key in keys:
        top = key.split("/", 1)[0] if "/" in key else ""
        counts[top] = counts.get(top, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def version_diff(old: str, new: str, old_label: str, new_label: str) -> list[tuple[str, str]]:
    """A unified diff as (class, line) pairs: ``add``, ``del``, ``hunk`` or ``same``."""
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), old_label, new_label, lineterm=""):
        if line.startswith(("+++", "---")):
            out.append(("head", line))
        elif line.startswith("@@"):
            out.append(("hunk", line))
        elif line.startswith("+"):
            out.append(("add", line))
        elif line.startswith("-"):
            out.append(("del", line))
        else:
            out.append(("same", line))
    return out


@dataclass
class Chain:
    """One agent's lane of receipts, as the verification sees it."""

    agent: str
    lane: int
    receipts: int = 0
    head: int = 0
    signed: int = 0
    problems: list[str] = field(default_factory=list)


def chains(receipts: Iterable[dict[str, Any]], problems: Iterable[dict[str, Any]]) -> list[Chain]:
    """The chains (agent, lane) of ``receipts`` with the verification's ``problems`` on each."""
    found: dict[tuple[str, int], Chain] = {}
    for r in receipts:
        chain = found.setdefault((r["agent_id"], r["lane"]), Chain(r["agent_id"], r["lane"]))
        chain.receipts += 1
        chain.head = max(chain.head, r["seq"])
        chain.signed += 1 if r["signature"] else 0
    for p in problems:
        chain = found.setdefault((p["agent_id"], p["lane"]), Chain(p["agent_id"], p["lane"]))
        chain.problems.append(f"seq {p['seq']}: {p['problem']}")
    return sorted(found.values(), key=lambda c: (c.agent, c.lane))
