"""A negotiation's quality and satisfaction (research hub.md §11.3), as pure functions.

Quality is computed over the members who stated a confidence (first and last):

* **MPC**: the mean of the last stated confidences;
* **GAR** (genuine agreement ratio): the share of reporters whose confidence moved to the group's
  side of 0.5, ``(last − first) × (MPC − 0.5) ≥ 0``; at exactly 0.5, those who did not move;
* **SCR** (social compliance ratio): revisions caused by social compliance over the members with
  any revision cause (0 when none). A cause is the member's own valid report, else derived: an
  accept deferring to someone is social compliance; a confidence move over 0.05 is a grounded
  argument when what the member addressed is grounded in earlier evidence (at least 40 % of it),
  social compliance otherwise;
* **provenance weight** = (1 − SCR) × GAR.

There is none with fewer than two reporters, or fewer reporters than members minus one. Everything
is rounded to 4 places. Satisfaction, per member, is the mean over the issues of
``1 − |index(opening ask) − index(agreed)| / max(1, options − 1)``; ``min_satisfaction`` flags a
barely tolerated agreement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

CAUSES = ("grounded_argument", "social_compliance", "new_evidence", "semantic_memory", "repair_resolution")
MOVE_THRESHOLD = 0.05
GROUNDING = 0.40


@dataclass(frozen=True)
class Revision:
    """What a member's last turn says about why its view moved."""

    reported: str | None = None  # the member's own revision_cause
    accepted: bool = False
    deferred_to: str | None = None
    addresses: frozenset[str] = field(default_factory=frozenset)


def grounded(addresses: Iterable[str], pool: Iterable[str]) -> bool:
    mine = set(addresses)
    return bool(mine) and len(mine & set(pool)) / len(mine) >= GROUNDING


def revision_cause(r: Revision, first: float | None, last: float | None, pool: Iterable[str]) -> str | None:
    if r.reported in CAUSES:
        return r.reported
    if r.accepted and r.deferred_to:
        return "social_compliance"
    if first is not None and last is not None and abs(last - first) > MOVE_THRESHOLD:
        return "grounded_argument" if grounded(r.addresses, pool) else "social_compliance"
    return None


def quality(
    cast: Sequence[str],
    first: Mapping[str, float],
    last: Mapping[str, float],
    causes: Mapping[str, str | None] | None = None,
) -> dict[str, float | int] | None:
    reporters = [h for h in cast if last.get(h) is not None]
    if len(reporters) < 2 or len(reporters) < len(cast) - 1:
        return None
    lasts = {h: float(last[h]) for h in reporters}
    firsts = {h: float(first.get(h, last[h])) for h in reporters}
    mpc = sum(lasts.values()) / len(reporters)
    if mpc == 0.5:
        genuine = sum(1 for h in reporters if lasts[h] == firsts[h])
    else:
        genuine = sum(1 for h in reporters if (lasts[h] - firsts[h]) * (mpc - 0.5) >= 0)
    gar = genuine / len(reporters)
    stated = [c for c in (causes or {}).values() if c]
    scr = sum(1 for c in stated if c == "social_compliance") / len(stated) if stated else 0.0
    return {
        "mpc": round(mpc, 4),
        "gar": round(gar, 4),
        "scr": round(scr, 4),
        "provenance_weight": round((1 - scr) * gar, 4),
        "participants": len(reporters),
    }


def satisfaction(
    issues: Mapping[str, Sequence[str]],
    asks: Mapping[str, Mapping[str, str]],
    agreed: Mapping[str, str],
) -> dict[str, float]:
    """Each member's satisfaction with ``agreed``, relative to its opening ``asks`` (issues it
    asked nothing on, or outside the space, are left out; a member with none is left out)."""
    out: dict[str, float] = {}
    for h, ask in asks.items():
        scores = []
        for name, options in issues.items():
            opts = list(options)
            if ask.get(name) in opts and agreed.get(name) in opts:
                gap = abs(opts.index(ask[name]) - opts.index(agreed[name]))
                scores.append(1 - gap / max(1, len(opts) - 1))
        if scores:
            out[h] = round(sum(scores) / len(scores), 4)
    return out
