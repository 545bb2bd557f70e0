"""The pages about the transition ledger: transitions by outcome, one transition with its receipts,
and the receipt chains' state per agent and lane."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.params import FromPath, FromQuery
from litestar.response import Template

from mycelium.api.deps import VerbsDep
from mycelium.errors import Refusal
from mycelium.ledger.receipts import signature_problem
from mycelium.verbs import NOBODY, Verbs
from mycelium.verbs.transitions import receipt_keyring, receipts_of, row_json
from mycelium.web import views
from mycelium.web.pages import page

OUTCOMES = ("IN_FLIGHT", "BLOCKED", "UNKNOWN", "EXPIRED", "COMPLETED", "FAILED_BEFORE_EFFECT",
            "FAILED_AFTER_EFFECT")
#: A filter of the list that is not an outcome: the transitions an operator released.
RELEASED = "released"
LISTED = 200


async def chain_problems(verbs: Verbs, agent: str | None) -> list[dict[str, Any]]:
    return [dict(r.items()) for r in await verbs.call(NOBODY, "verify_receipt_chain", agent=agent)]


@get("/transitions")
async def transitions(
    request: Request[Any, Any, Any], verbs: VerbsDep, outcome: FromQuery[str | None] = None,
    agent: FromQuery[str | None] = None,
) -> Template:
    if outcome is not None and outcome not in (*OUTCOMES, RELEASED):
        raise Refusal(422, "invalid_request",
                      f"outcome: {outcome!r} is not one of {', '.join((*OUTCOMES, RELEASED))}",
                      {"field": "outcome"})
    rows = await verbs.call(NOBODY, "list_transitions", stuck=None, agent=agent or None,
                            outcome=None if outcome in (None, RELEASED) else outcome, tool=None, limit=LISTED)
    shown = [row_json(r) for r in rows]
    if outcome == RELEASED:
        shown = [t for t in shown if t["operator_resolution"]]
    return page("transitions.html", request, transitions=shown, outcome=outcome, agent=agent or "",
                outcomes=(*OUTCOMES, RELEASED), chain_problems=await chain_problems(verbs, agent or None))


@get("/transitions/{request_id:path}")
async def transition(request: Request[Any, Any, Any], verbs: VerbsDep, request_id: FromPath[str]) -> Template:
    request_id = request_id.lstrip("/")
    row = await verbs.call(NOBODY, "get_transition", request_id=request_id)
    if row is None:
        raise Refusal(404, "transition_not_found", f"no transition {request_id!r}",
                      {"request_id": request_id})
    shown = row_json(row)
    receipts = [r async for r in receipts_of(verbs, shown["agent_id"]) if r["request_id"] == request_id]
    return page("transition.html", request, t=shown, receipts=receipts,
                chain_problems=await chain_problems(verbs, shown["agent_id"]))


@get("/receipts")
async def receipts(request: Request[Any, Any, Any], verbs: VerbsDep) -> Template:
    """Each agent's lanes: how many receipts, the head, how many are signed, and what breaks: the
    chain as the database checks it, and every signature against the hub's keyring (a receipt not
    signed yet is counted, not a fault: the hub signs receipts shortly after they are written)."""
    found = [r async for r in receipts_of(verbs, None)]
    keyring = await receipt_keyring(verbs)
    bad = [{**r, "problem": wrong} for r in found
           if (wrong := signature_problem(r, keyring)) not in (None, "unsigned")]
    problems = [*await chain_problems(verbs, None), *bad]
    return page("receipts.html", request, chains=views.chains(found, problems))


ROUTES: list[Any] = [transitions, transition, receipts]
