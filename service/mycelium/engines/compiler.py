"""The task compiler's pure core: an agreement ({issue: value}) becomes task lines.

The model is asked once, through the seam, for checklist lines (``- [ ] text @handle``); each line
it writes becomes one row. It may tag a line only with a participant's handle: any other ``@``
is dropped (the row is filed untagged), never trusted. When the model cannot answer, or answers
with no task line, the agreement itself is filed, one ``issue=value`` row per term, with the reason
(:func:`compile_agreement` never invents a task in the model's place).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mycelium.core.handles import normalize_handle
from mycelium.engines.models import Model, ModelError

#: at most this many rows from one agreement, each title at most this long
MAX_LINES = 20
MAX_TEXT = 200

SYSTEM = (
    "You turn an agreement that agents reached into the concrete tasks that carry it out. Answer only "
    "with a checklist, one task per line, each line `- [ ] <task> @<handle>`: a specific, doable action, "
    "not a restatement of a term. Tag a task only with one of the participants' handles listed; leave a "
    "shared task untagged rather than invent a handle. No preamble, no headings, at most "
    f"{MAX_LINES} lines."
)

_LINE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s*\[\s?\]\s*(?P<body>.+?)\s*$")
_TAG = re.compile(r"(?<![\w@])@(?P<handle>[A-Za-z0-9][A-Za-z0-9_-]{0,63})\b")

Source = Literal["model", "raw"]


@dataclass(frozen=True)
class Line:
    text: str
    assignee: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"text": self.text, "assignee": self.assignee}


@dataclass(frozen=True)
class Compiled:
    lines: list[Line]
    source: Source
    note: str | None = None
    """Why the raw agreement was filed (the model's failure), or the tags dropped from its lines."""


def term_text(value: Any) -> str:
    """An agreed value as a line shows it (text as it is, anything else as JSON)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def raw_lines(assignments: Mapping[str, Any]) -> list[Line]:
    """The agreement as it is: one ``issue=value`` line per term, by issue."""
    terms = [f"{issue}={term_text(assignments[issue])}" for issue in sorted(assignments)]
    return [Line(_cut(term)) for term in terms][:MAX_LINES]


def prompt(assignments: Mapping[str, Any], participants: Sequence[str], task_title: str | None) -> str:
    terms = "\n".join(f"- {issue} = {term_text(assignments[issue])}" for issue in sorted(assignments))
    who = ", ".join(f"@{h}" for h in participants) or "(none known: leave every task untagged)"
    return (
        f"Task: {task_title or '(untitled)'}\n"
        f"Agreed terms:\n{terms}\n"
        f"Participants (the only handles you may tag): {who}\n"
        "Write the task lines."
    )


def parse_lines(text: str, participants: Sequence[str]) -> tuple[list[Line], list[str]]:
    """The checklist lines of a model's answer (anything else is ignored), each with its one tag
    when the tag is a participant's; and the tags that were not."""
    allowed = {normalize_handle(h) for h in participants}
    lines: list[Line] = []
    dropped: list[str] = []
    seen: set[tuple[str, str | None]] = set()
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        body = m.group("body")
        assignee: str | None = None
        for tag in _TAG.finditer(body):
            h = normalize_handle(tag.group("handle"))
            if h in allowed and assignee is None:
                assignee = h
            elif h not in allowed:
                dropped.append(h)
        words = _cut(" ".join(_TAG.sub("", body).split()).strip(" -:—"))
        if not words or (words.casefold(), assignee) in seen:
            continue
        seen.add((words.casefold(), assignee))
        lines.append(Line(words, assignee))
        if len(lines) == MAX_LINES:
            break
    return lines, sorted(set(dropped))


async def compile_agreement(
    model: Model, assignments: Mapping[str, Any], participants: Sequence[str], task_title: str | None,
    engine: str = "",
) -> Compiled:
    """The lines to file for an agreement: the model's, or the raw terms with the reason."""
    asked = [{"role": "user", "content": prompt(assignments, participants, task_title)}]
    try:
        said = await model.complete(SYSTEM, asked, handle=engine)
    except ModelError as exc:
        return Compiled(raw_lines(assignments), "raw", f"{model.name}: {exc}")
    lines, dropped = parse_lines(said, participants)
    if not lines:
        return Compiled(raw_lines(assignments), "raw", f"{model.name} answered with no task line")
    note = f"untagged: @{', @'.join(dropped)} (not participants)" if dropped else None
    return Compiled(lines, "model", note)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1].rstrip() + "…"
