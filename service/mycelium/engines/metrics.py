"""An episode's quality metrics (SIEP-style), from the confidences its members stated.

Only members who stated a confidence count (reporters); with fewer than two, or fewer than all
members but one, there are no metrics (None), never zeros.

* **MPC** — mean of the last stated confidence;
* **GAR** (genuine agreement ratio) — the share of reporters whose confidence moved toward the
  group's side of 0.5 or held: ``(last − first) × (MPC − 0.5) ≥ 0``; at MPC exactly 0.5 only those
  who did not move count;
* **SCR** (social compliance ratio) — revisions caused by social compliance over reporters with any
  revision cause; a cause is the member's own (``revision_cause``) when stated, else a move of more
  than 0.05 with nothing it addresses counts as a grounded argument. A flow records no deference,
  so without stated causes SCR is 0;
* **provenance weight** — ``(1 − SCR) × GAR``. All rounded to 4 places.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CAUSES = ("grounded_argument", "social_compliance", "new_evidence", "semantic_memory", "repair_resolution")


def compute_metrics(
    first: Mapping[str, float],
    last: Mapping[str, float],
    agents: Sequence[str],
    causes: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    reporters = [h for h in agents if h in last and not isinstance(last[h], bool)]
    if len(reporters) < 2 or len(reporters) < len(agents) - 1:
        return None
    mpc = sum(last[h] for h in reporters) / len(reporters)
    if mpc == 0.5:
        genuine = [h for h in reporters if last[h] == first.get(h, last[h])]
    else:
        genuine = [h for h in reporters if (last[h] - first.get(h, last[h])) * (mpc - 0.5) >= 0]
    gar = len(genuine) / len(reporters)
    stated = dict(causes or {})
    revised = {}
    for h in reporters:
        cause = stated.get(h) if stated.get(h) in CAUSES else None
        if cause is None and abs(last[h] - first.get(h, last[h])) > 0.05:
            cause = "grounded_argument"
        if cause:
            revised[h] = cause
    scr = sum(1 for c in revised.values() if c == "social_compliance") / len(revised) if revised else 0.0
    return {
        "mpc": round(mpc, 4),
        "gar": round(gar, 4),
        "scr": round(scr, 4),
        "provenance_weight": round((1 - scr) * gar, 4),
        "participants": len(reporters),
    }
