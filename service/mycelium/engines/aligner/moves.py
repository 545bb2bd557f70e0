"""Reading a member's reply into a move, faithfully.

A move marker is authoritative and needs no model: ``[[mycelium: offer price=20 vendor=acme]]``,
``[[mycelium: accept]]``, ``[[mycelium: reject]]``. Unmarked prose goes to the model seam, which
answers ``{"action": "accept" | "reject" | "counter", "offer": {…}}``; empty prose never reaches a
model. Every offer is snapped onto the issue space (:mod:`.snap`) or refused. What cannot be read
is never filled in from what is on the table: a member who is silent, rejects, or whose offer
cannot be read **holds its own last line** (its last offer, else its opening ask, else the first
option of each issue), so no convergence is ever made up. An offer equal to the standing one
accepts it; an accept with nothing on the table holds the member's own line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mycelium.core import markers
from mycelium.engines.aligner.snap import snap_offer
from mycelium.engines.models import Model, ModelError

Offer = dict[str, str]

INTERPRET_SYSTEM = (
    "You read one negotiator's reply in a negotiation and say which move it makes. Answer with "
    'JSON only: {"action": "accept"} to accept the offer on the table, {"action": "reject"} to '
    'refuse it without a counter-offer, or {"action": "counter", "offer": {"<issue>": "<option>", '
    "...}} naming one option for every issue. Use only what the reply says; never guess."
)
_JSON = re.compile(r"\{.*\}", re.DOTALL)
EPISTEMIC = ("revision_cause", "deferred_to", "evidence", "addresses")


@dataclass(frozen=True)
class Reading:
    """A reply as the mediator read it: the move fed to NEGMAS and how it was read."""

    handle: str
    action: str  # accept | offer
    offer: Offer | None
    how: str  # marker | model | silent | held
    said: str  # the mediator's restatement of its reading
    reply: str | None = None
    confidence: float | None = None
    error: str | None = None
    fields: Mapping[str, str] = field(default_factory=dict)

    def entry(self) -> dict[str, Any]:
        out: dict[str, Any] = {"who": self.handle, "action": self.action, "how": self.how, "said": self.said}
        if self.offer is not None:
            out["offer"] = dict(self.offer)
        if self.reply:
            out["reply"] = self.reply
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.error:
            out["error"] = self.error
        if self.fields:
            out["fields"] = dict(self.fields)
        return out


def terms(offer: Mapping[str, str] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (offer or {}).items()) or "nothing"


def own_line(
    handle: str,
    issues: Mapping[str, Sequence[str]],
    last: Mapping[str, Offer],
    asks: Mapping[str, Mapping[str, str]],
) -> Offer:
    """What a member holds when it makes no readable offer: its last offer, else its opening ask
    (an issue it asked nothing on: that issue's first option)."""
    if handle in last:
        return dict(last[handle])
    ask = asks.get(handle, {})
    return {name: ask.get(name) or next(iter(opts)) for name, opts in issues.items()}


def prose_of(text: str | None) -> str:
    """The words of a reply without its markers (empty when it says nothing else)."""
    return markers.MARKER_RE.sub(" ", text or "").strip()


def parse_model_move(text: str) -> tuple[str, Any] | None:
    """``(action, offer)`` from the model's answer, or None when it is not one."""
    found = _JSON.search(text or "")
    if not found:
        return None
    try:
        data = json.loads(found.group(0))
    except ValueError:
        return None
    if not isinstance(data, Mapping):
        return None
    action = str(data.get("action", "")).lower()
    if action in ("accept", "reject"):
        return action, None
    if action in ("counter", "offer") and isinstance(data.get("offer"), Mapping):
        return "counter", data["offer"]
    return None


def interpret_prompt(
    handle: str, prose: str, issues: Mapping[str, Sequence[str]], standing: Offer | None
) -> str:
    space = "\n".join(f"- {name}: {', '.join(opts)}" for name, opts in issues.items())
    return (
        f"Issues and their options:\n{space}\n\nOn the table: {terms(standing)}\n\n"
        f"Reply from {handle}:\n{markers.defang(prose)}"
    )


async def read_reply(
    handle: str,
    reply: Any | None,
    issues: Mapping[str, Sequence[str]],
    standing: Offer | None,
    held: Offer,
    model: Model | None,
) -> Reading:
    """The move ``handle``'s ``reply`` makes (``reply``: a conductor Reply, or None for silence);
    ``held`` is the member's own last line."""
    space = {k: list(v) for k, v in issues.items()}

    def hold(how: str, why: str, **kw: Any) -> Reading:
        return Reading(handle, "offer", held, how, f"{why}; holding their own line: {terms(held)}", **kw)

    def decided(action: str, offer: Offer | None, how: str, **kw: Any) -> Reading:
        if action == "offer" and offer is not None and standing is not None and offer == standing:
            return Reading(handle, "accept", None, how, f"accept (they offer what is on the table: "
                           f"{terms(standing)})", **kw)
        if action == "accept":
            if standing is None:
                return hold(how, "accept, with nothing on the table", **kw)
            return Reading(handle, "accept", None, how, f"accept {terms(standing)}", **kw)
        if action == "reject":
            return hold(how, "reject", **kw)
        return Reading(handle, "offer", offer, how, f"offer {terms(offer)}", **kw)

    if reply is None or reply.failed:
        return hold("silent", "no reply" if reply is None else "their model failed, so no reply")
    base = {
        "reply": reply.id,
        "confidence": markers.confidence_of(reply.payload, reply.text),
        "fields": markers.fields_of(reply.text, EPISTEMIC),
    }
    move = markers.move_of(reply.payload, reply.text)
    if move is not None:
        if move.action != "offer":
            return decided(move.action, None, "marker", **base)
        snapped = snap_offer(move.offer, space)
        if snapped is None:
            return hold("held", f"an offer that does not fit the issues ({terms(move.offer)})", **base)
        return decided("offer", snapped, "marker", **base)
    prose = prose_of(reply.text)
    if not prose:
        return hold("silent", "a reply with no words")
    if model is None:
        return hold("held", "prose with no move marker, and no model to read it", **base)
    try:
        answer = await model.complete(
            INTERPRET_SYSTEM,
            [{"role": "user", "content": interpret_prompt(handle, prose, space, standing)}],
            handle=handle,
        )
    except ModelError as exc:
        return hold("held", f"the model could not read the reply ({exc})", error=str(exc), **base)
    parsed = parse_model_move(answer)
    if parsed is None:
        return hold("held", "the model's reading was not a move", **base)
    action, raw = parsed
    if action != "counter":
        return decided(action, None, "model", **base)
    snapped = snap_offer(raw, space)
    if snapped is None:
        return hold("held", f"an offer that does not fit the issues ({terms(raw)})", **base)
    return decided("offer", snapped, "model", **base)
