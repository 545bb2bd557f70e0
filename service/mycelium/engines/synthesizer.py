"""The synthesizer's pure core: a room's transcript distilled into its ``context/synthesis`` memory.

It reads the room's prose (messages and replies, every thread; never its own posts, nor the
messages that summon it) after the cursor kept in the memory's own frontmatter, and asks the model,
through the seam, for the synthesis brought up to date with what it read. Position and text are
written together, in one write, so the cursor never says more was read than the text holds.
``--all`` in the summon starts again from the first message with an empty synthesis. A model that
fails is reported where it was summoned; nothing is written and the cursor stays where it was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mycelium.core import markers
from mycelium.engines.models import Model, ModelError

KEY = "context/synthesis"
#: messages read by one summon (the rest wait for the next)
BATCH = 400
#: characters of one message given to the model
MAX_MESSAGE = 2000

SYSTEM = (
    "You keep a room's synthesis: a short markdown briefing of what its members have argued out, "
    "what was decided and by whom, what is still open, and who does what next. You are given the "
    "synthesis so far and the messages written since. Answer with the whole updated synthesis and "
    "nothing else; keep what still holds, change what the new messages change, never add what "
    "nobody said."
)

_ALL = re.compile(r"(?<!\S)--all(?!\S)")


@dataclass(frozen=True)
class Ask:
    everything: bool
    """``--all``: read the whole transcript again, from an empty synthesis."""


def read_summon(content: str) -> Ask:
    return Ask(bool(_ALL.search(content)))


@dataclass(frozen=True)
class Said:
    position: int
    sender: str
    text: str


def prompt(room: str, current: str | None, said: Sequence[Said]) -> str:
    lines = "\n".join(f"[{m.position}] {m.sender}: {markers.defang(m.text)[:MAX_MESSAGE]}" for m in said)
    return (
        f"Room: {room}\n"
        f"The synthesis so far:\n{(current or '').strip() or '(none yet)'}\n\n"
        f"New messages, oldest first:\n{lines}\n\n"
        "Write the updated synthesis."
    )


@dataclass(frozen=True)
class Distilled:
    text: str | None
    """The new synthesis (None: the model failed; nothing is written)."""
    error: str | None = None


async def distil(
    model: Model, handle: str, room: str, current: str | None, said: Sequence[Said]
) -> Distilled:
    asked = [{"role": "user", "content": prompt(room, current, said)}]
    try:
        text = await model.complete(SYSTEM, asked, handle=handle)
    except ModelError as exc:
        return Distilled(None, f"{model.name}: {exc}")
    if not text.strip():
        return Distilled(None, f"{model.name} answered with no text")
    return Distilled(text.strip() + "\n")


def frontmatter(handle: str, cursor: int, read: int, model: str, everything: bool) -> dict[str, Any]:
    """What the synthesis memory says about itself: a knowledge memory, where its reading stopped."""
    return {"type": "knowledge", "synthesizer": handle, "cursor": cursor, "read": read, "model": model,
            "source": "transcript", "reread": everything}
