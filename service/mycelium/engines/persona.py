"""A persona: a member played by a model, in character.

Its ``agents/<handle>/notes`` memory is its system prompt; what it heard and said is kept per
(room, handle) in the database (``persona_turns``), so it remembers across turns and workers. It
answers a text mention and a turn addressed to it, in the thread it was asked in; its stance markers
are lifted onto the payload as ``/reply`` lifts them; every ``@`` it writes is neutralised; and the
database refuses its post where the floor does not admit it (the summon then closes as
``not_admitted``). A model that fails is reported in the thread (``model_failed``), never papered
over: a conductor counts that member as silent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mycelium.core import markers
from mycelium.engines.conductor import neutralise
from mycelium.engines.models import Model, ModelError

HISTORY_TURNS = 40


@dataclass(frozen=True)
class Answer:
    content: str
    payload: dict[str, Any]
    outcome: str
    error: str | None
    remember: list[dict[str, str]]


def system_prompt(handle: str, notes: str | None) -> str:
    return (notes or "").strip() or f"You are @{handle}, a member of this room. Answer briefly, in character."


async def answer(
    model: Model, handle: str, notes: str | None, turns: Sequence[Mapping[str, str]], sender: str, text: str
) -> Answer:
    """What the persona posts for a message from ``sender`` (its model's words, or the failure)."""
    heard = f"{sender}: {markers.defang(text)}"
    history = [{"role": t["role"], "content": t["content"]} for t in turns][-HISTORY_TURNS:]
    try:
        said = await model.complete(
            system_prompt(handle, notes), [*history, {"role": "user", "content": heard}], handle=handle
        )
    except ModelError as exc:
        error = str(exc)
        return Answer(
            neutralise(f"@{handle} could not answer: {error}"),
            {"action": "reply", "model_failed": True, "error": error, "model": model.name},
            "failed",
            error,
            [],
        )
    data, prose = markers.lift_reply(said)
    content = neutralise(prose.strip() or said.strip())
    return Answer(
        content,
        {**data, "model": model.name},
        "answered",
        None,
        [{"role": "user", "content": heard}, {"role": "assistant", "content": said}],
    )
