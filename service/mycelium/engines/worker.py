"""The worker engine's pure core: what a turn is told, and what its answer asks of the board.

A worker is a member played by an agent command (``pi``, or any program: the prompt on its
standard input and as ``{prompt}``, its answer on its standard output), run in the member's own git
worktree. :func:`prompt` writes what the command is told for one summon from what the database
says (``mycelium.worker_context``); :func:`parse` reads the answer: its stance markers (lifted as
``/reply`` lifts them), the rows its ``[[new: <title> -> @member]]`` lines file, whether it said
``[[done]]``, and the handles it names. What is applied is the database's to decide
(``mycelium.worker_turn``), in one transaction with the summon's close.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mycelium.core import markers
from mycelium.core.mentions import loud_mentions
from mycelium.engines.conductor import tasks_of

#: the placeholders a worker command may hold
PLACEHOLDERS = ("room", "handle", "task", "episode", "prompt")
DEFAULT_COMMAND = "pi -p {prompt}"
_DONE = re.compile(r"\[\[\s*done\s*\]\]", re.I)
_FIELD = re.compile(r"\{([^{}]*)\}")
#: where a prompt's thread begins (what comes before it is the turn's own: the row, why it woke)
THREAD_MARK = "\nThe thread so far:\n"
#: how much of the thread and of each part a prompt carries
THREAD_CHARS = 12_000


class CommandError(ValueError):
    """A worker command that cannot run (the message says why, in one line)."""


def command(line: str | None) -> list[str]:
    """The argv of ``MYCELIUM_WORKER_COMMAND`` (default ``pi -p {prompt}``), checked."""
    try:
        argv = shlex.split(line or DEFAULT_COMMAND)
    except ValueError as exc:
        raise CommandError(f"MYCELIUM_WORKER_COMMAND cannot be split: {exc}") from None
    if not argv:
        raise CommandError("MYCELIUM_WORKER_COMMAND is empty: name the agent command a worker runs")
    for arg in argv:
        for name in _FIELD.findall(arg):
            if name not in PLACEHOLDERS:
                raise CommandError(
                    f"MYCELIUM_WORKER_COMMAND: {{{name}}} is not a placeholder "
                    f"(a command may name {{{'} {'.join(PLACEHOLDERS)}}})"
                )
    return argv


def substitute(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    return [_FIELD.sub(lambda m: values.get(m[1], m[0]), a) for a in argv]


@dataclass(frozen=True)
class Parsed:
    content: str
    payload: dict[str, Any]
    tasks: list[dict[str, str]]
    done: bool
    mentions: list[str]


def parse(said: str, handle: str) -> Parsed:
    """What an answer says: the posted text (markers lifted), its data, the rows it files, its
    ``[[done]]``, and the handles it names (itself left out)."""
    data, prose = markers.lift_reply(said)
    content = prose.strip() or said.strip()
    named = [h for h in loud_mentions(content) if h != handle]
    return Parsed(content, dict(data), tasks_of(said), bool(_DONE.search(said)), list(dict.fromkeys(named)))


def _thread(messages: Sequence[Mapping[str, Any]]) -> str:
    lines: list[str] = []
    used = 0
    for m in reversed(messages):
        line = f"@{m['sender']}: {markers.defang(str(m['content']))}"
        used += len(line)
        if used > THREAD_CHARS:
            break
        lines.append(line)
    return "\n\n".join(reversed(lines)) or "(nothing yet)"


def _part(p: Mapping[str, Any]) -> str:
    line = f"- {p['key']} — {p['title']} ({'settled' if p['settled'] else 'open'})"
    last = p.get("last")
    return line + (f": @{last['sender']} said: {markers.defang(str(last['content']))}" if last else "")


def prompt(ctx: Mapping[str, Any]) -> str:
    """What one turn's command is told (``ctx`` is ``mycelium.worker_context``)."""
    s = ctx["summon"]
    me, how = s["engine"], s["how"]
    row = ctx.get("row") or None
    team = [h for h in (ctx.get("team") or []) if h != me]
    key = row["key"] if row else None
    head = f"You are @{me}, a worker in the room {s['room']}."
    if team:
        head += f" Your team: {', '.join('@' + h for h in team)}."
    if row:
        state = "settled" if row["settled"] else (row.get("status") or "open")
        holder = f", held by @{row['holder']}" if row.get("holder") else ""
        head += f"\n\nThe row of this thread: {key} — {row['title']} ({state}{holder})."
        if row.get("part_of"):
            head += f" It is a part of {row['part_of']}."
        text = str(row.get("text") or "").strip()
        if text:
            head += f"\n\n{markers.defang(text)}"
    if how == "filed":
        why = (
            f"{key} was filed for you by @{s['sender']}, and you hold it now. Do the work here, in your "
            f"own worktree (branch swarm/{me}); commit what you make. Answer with what you did, and end with "
            f"[[done]] when {key} is done."
        )
    elif how == "completed":
        parts = "\n".join(_part(p) for p in ctx.get("parts") or [])
        why = (
            f"Every part of {key} is settled:\n\n{parts}\n\nCombine them: answer with what {key} came to. "
            f"Your answer resolves {key}."
        )
    else:
        asked = markers.defang(str(s["content"]))
        why = f"@{s['sender']} wrote to you:\n\n{asked}"
    rules = (
        "Board actions, one per line: [[new: <title> -> @<member>]] files a part"
        + (f" of {key}" if key else "")
        + " for a member; [[done]]"
        + (f" resolves {key}" if key else " resolves the thread's row")
        + ". Name a teammate (@handle) to hand them the thread."
    )
    return f"{head}\n\n{why}\n{THREAD_MARK}\n{_thread(ctx.get('thread') or [])}\n\n{rules}\n"
