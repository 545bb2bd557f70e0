"""A synthesizer's summon, answered by the engines loop (:mod:`mycelium.engines.synthesizer` has the
rules): the synthesis so far and the transcript after its cursor up to the summon (read by the
database for the summon's holder, sql/synthesis.sql), the model's synthesis, then in one transaction
the memory (text and cursor, compared and swapped on the version read) and the answer that closes
the summon."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mycelium.engines import synthesizer
from mycelium.engines.conductor import neutralise
from mycelium.engines.models import Model
from mycelium.errors import Refusal
from mycelium.verbs import Actor, Session, Verbs


def _plural(n: int) -> str:
    return f"{n} message" if n == 1 else f"{n} messages"


async def _close(db: Verbs | Session, s: Mapping[str, Any], worker: str, text: str, outcome: str = "answered",
                 error: str | None = None, **synthesis: Any) -> None:
    await db.call(Actor(s["engine"], "engine"), "answer_summon", room=s["room"], id=s["id"], worker=worker,
                  content=neutralise(text), payload={"action": "reply", "synthesis": synthesis},
                  outcome=outcome, error=error, remember=None)


async def answer(verbs: Verbs, model: Model, worker: str, s: Mapping[str, Any]) -> None:
    """Answer the synthesizer summon ``s`` (held by ``worker``)."""
    room, handle, key = s["room"], s["engine"], synthesizer.KEY
    ask = synthesizer.read_summon(s["content"])
    source = await verbs.call(Actor(handle, "engine"), "synthesis_input", room=room, summon=s["id"],
                              worker=worker, all=ask.everything, limit=synthesizer.BATCH)
    after: int = source["after"]
    said = [synthesizer.Said(m["position"], m["sender"], m["text"]) for m in source["messages"]]
    if not said:
        await _close(verbs, s, worker,
                     f"Nothing new to synthesise since position {after}: {key} is as it was.", cursor=after)
        return
    got = await synthesizer.distil(model, handle, room, source["text"], said)
    if got.text is None:
        text = (f"@{handle} could not synthesise: {got.error}. {key} and its cursor (position {after}) "
                "are unchanged.")
        await _close(verbs, s, worker, text, "failed", got.error, model_failed=True, cursor=after)
        return
    cursor = said[-1].position
    meta = synthesizer.frontmatter(handle, cursor, len(said), model.name, ask.everything)
    try:
        async with verbs.transaction() as tx:
            written = await tx.call(Actor(handle, "engine"), "write_memory", room=room, key=key,
                                    value={"text": got.text}, created_by=handle, tags=None, meta=meta,
                                    content_text=None, base_version=source["version"] or 0,
                                    embedding=None, embed=True)
            version = written["version"]
            text = (f"Synthesised {_plural(len(said))} (positions {said[0].position}–{cursor}) into {key} "
                    f"v{version}{' from the start' if ask.everything else ''}.")
            await _close(tx, s, worker, text, key=key, cursor=cursor, version=version, read=len(said))
    except Refusal as r:
        if r.error != "stale_base":
            raise
        await _close(verbs, s, worker, f"{key} moved on while it was being read; nothing was written. "
                     f"Summon @{handle} again.", "refused", r.message, cursor=after)
