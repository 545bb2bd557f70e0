"""The wake digest as an agent reads it, from what ``mycelium.wake_digest`` says (sql/digest.sql).

Why it woke, what changed since its last turn, its tasks and the board, the messages that asked for
it, then "await first" (what else waits for it) and the reply line naming the thread. Pure text from
the database's facts: no clock, no query of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_NOTICE_VERBS = {
    "filed": "filed",
    "claimed": "claimed",
    "released": "released",
    "resolved": "resolved",
    "blocked": "blocked",
    "unblocked": "unblocked",
    "expired": "let the lease of",
}


def _why(d: Mapping[str, Any]) -> str:
    who = f"@{d['from']}"
    turn = d.get("turn") or {}
    if d["why"] == "turn":
        at = f" (turn {turn['turn']} of {turn['cap']})" if turn.get("turn") and turn.get("cap") else ""
        return f"It is your turn: {who} runs {turn.get('flow', 'a flow')}, step {turn.get('step', '?')}{at}."
    if d["why"] == "mention":
        return f"{who} mentioned you."
    if d["why"] == "addressed":
        return f"{who} wrote to you."
    return f"{who} wrote where you take part."


def _where(thread: Mapping[str, Any]) -> str:
    if thread.get("live"):
        return "the room"
    if thread.get("key"):
        return f"{thread['key']} ({thread['title']})" if thread.get("title") else str(thread["key"])
    return f"thread {thread['short_id']}"


def _change(c: Mapping[str, Any]) -> str:
    by = f"@{c['by']} " if c.get("by") else ""
    verb = _NOTICE_VERBS.get(str(c.get("subkind")), str(c.get("subkind")))
    what = c.get("key") or "?"
    title = f" ({c['title']})" if c.get("title") else ""
    return f"- {by}{verb} {what}{title}"


def render(room: str, d: Mapping[str, Any]) -> str:
    """The digest's text: one short section a line group, the reply line last."""
    me = d["handle"]
    thread = d.get("thread") or {}
    lines = [f"Woken in {room}, in {_where(thread)}. {_why(d)}"]
    since = "since your last turn" if d.get("since") is not None else "so far (you have not spoken here yet)"
    changes = d.get("changes") or []
    if changes:
        lines += ["", f"Changed {since}:", *(_change(c) for c in changes)]
        if d.get("changes_more"):
            lines.append(f"- … and {d['changes_more']} more")
    else:
        lines += ["", f"Nothing changed on the board {since}."]
    tasks = d.get("tasks") or []
    if tasks:
        lines += ["", "Your tasks:"]
        for t in tasks:
            held = ", you hold it" if t.get("holding") else ""
            lines.append(f"- {t['key']}: {t['title']} [{t.get('status') or 'open'}{held}]")
    board = d.get("board") or []
    if board:
        lines += ["", "The board:"]
        for b in board:
            who = f" @{b['owner']} holds it" if b.get("owner") else ""
            who = who or (f" for @{b['assignee']}" if b.get("assignee") else "")
            lines.append(f"- {b['key']}: {b['title']} [{b.get('status') or 'open'}]{who}")
        if d.get("board_more"):
            lines.append(f"- … and {d['board_more']} more open row(s)")
    asked = d.get("asked") or []
    if asked:
        lines += ["", "Asked for you before this:"]
        for a in asked:
            where = "" if a.get("here") else " (elsewhere)"
            lines.append(f"- @{a['sender']}{where}: {' '.join(str(a['text']).split())}")
        if d.get("asked_more"):
            lines.append(f"- … and {d['asked_more']} earlier message(s)")
    waiting = int(d.get("waiting") or 0)
    lines += [
        "",
        f"Await first: {waiting} more message(s) wait for you (`mycelium await --handle {me}`)."
        if waiting
        else "Await first: nothing else waits for you now.",
    ]
    if thread.get("live"):
        target = ""
    elif thread.get("key"):
        target = f" --task {thread['key']}"
    else:
        target = f" --episode {thread['short_id']}"
    lines.append(f'Reply in {_where(thread)}: `mycelium respond --handle {me}{target} "…"`')
    return "\n".join(lines)
