"""Transitions over HTTP: the same SQL verbs, for agents (and operators) without database access.

Every route is one call of a ``mycelium.*`` function through the gateway; its refusals become the
HTTP error body. A lease's verbs are fenced by their owner (the worker that holds it); the
operators' verbs (release, a worker's death) are authored by who asks.

A completed call's result is kept as the JSON text the caller sent (``result_text``, or ``result``
encoded in the order it arrived), and every answer gives ``result`` back from that text: a redispatch
returns the object exactly as the first caller had it, keys in their order (the jsonb column sorts
them).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import Field

from mycelium.api.deps import VERBS, Annotated, Query, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.transitions import (
    BoundaryBody,
    ClaimBody,
    CompleteBody,
    ExternalOperationBody,
    FailBody,
    Fenced,
    MarkBody,
    Outcome,
    ReconcileBody,
    ReleaseBody,
    RenewBody,
    WorkerDeadBody,
    claim_read,
    row_json,
)

_encode = msgspec.json.Encoder(enc_hook=str).encode


class CompleteTextBody(CompleteBody):
    """``result`` as a value, or ``result_text``: the same result as its JSON text (what the SDK sends,
    so nothing between the tool and the row reorders or reformats it). Not both."""

    result_text: Annotated[str, Field(max_length=64 * 1024 * 1024)] | None = None


def result_text(body: CompleteTextBody) -> tuple[Any, str]:
    """(the result, its JSON text) of a completion, or a 400 naming what is wrong."""
    if body.result_text is None:
        return body.result, _encode(body.result).decode()
    if body.result is not None:
        raise Refusal(400, "invalid_request", "give the result as result or as result_text, not both",
                      {"field": "result_text"})
    try:
        return msgspec.json.decode(body.result_text), body.result_text
    except msgspec.DecodeError as exc:
        raise Refusal(400, "invalid_request", f"result_text is not JSON: {exc}",
                      {"field": "result_text"}) from exc
    except RecursionError as exc:
        raise Refusal(400, "malformed_json", "result_text nests too deeply (at most a few hundred levels)",
                      {"field": "result_text"}) from exc


def answer(row: Any) -> dict[str, Any]:
    """A row as JSON, its ``result`` decoded from the text the caller completed it with."""
    out = row_json(row)
    with_result_text(out)
    return out


def with_result_text(out: dict[str, Any]) -> None:
    text = out.get("result_text")
    if text is not None:
        out["result"] = msgspec.json.decode(text)


class TransitionController(Controller):
    path = "/api/transitions"
    dependencies = VERBS

    @post("/claim", status_code=200)
    async def claim(self, verbs: VerbsDep, data: JSONBody[ClaimBody]) -> dict[str, Any]:
        claimed = claim_read(await verbs.call(NOBODY, "claim_transition", **data.model_dump()))
        with_result_text(claimed["transition"])
        return claimed

    @post("/renew", status_code=200)
    async def renew(self, verbs: VerbsDep, data: JSONBody[RenewBody]) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "renew_lease", **data.model_dump()))

    @post("/boundary", status_code=200)
    async def boundary(self, verbs: VerbsDep, data: JSONBody[BoundaryBody]) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "advance_boundary", **data.model_dump()))

    @post("/external-operation", status_code=200)
    async def external_operation(self, verbs: VerbsDep, data: JSONBody[ExternalOperationBody]
                                 ) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "record_external_operation", **data.model_dump()))

    @post("/complete", status_code=200)
    async def complete(self, verbs: VerbsDep, data: JSONBody[CompleteTextBody]) -> dict[str, Any]:
        result, text = result_text(data)
        return answer(await verbs.call(NOBODY, "complete_transition", request_id=data.request_id,
                                       owner=data.owner, fence=data.fence, result=result, result_text=text))

    @post("/fail", status_code=200)
    async def fail(self, verbs: VerbsDep, data: JSONBody[FailBody]) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "fail_transition", **data.model_dump()))

    @post("/unknown", status_code=200)
    async def unknown(self, verbs: VerbsDep, data: JSONBody[MarkBody]) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "mark_unknown", **data.model_dump()))

    @post("/blocked", status_code=200)
    async def blocked(self, verbs: VerbsDep, data: JSONBody[MarkBody]) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "mark_blocked", **data.model_dump()))

    @post("/repair", status_code=200)
    async def repair(self, verbs: VerbsDep, data: JSONBody[Fenced]) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "repair_transition", **data.model_dump()))

    @post("/reconcile", status_code=200)
    async def reconcile(self, verbs: VerbsDep, data: JSONBody[ReconcileBody]) -> dict[str, Any]:
        return answer(await verbs.call(NOBODY, "apply_reconcile_result", **data.model_dump()))

    @post("/release", status_code=200)
    async def release(self, verbs: VerbsDep, data: JSONBody[ReleaseBody]) -> dict[str, Any]:
        actor = Actor.declared(data.by, "operator")
        return answer(await verbs.call(actor, "release_transition", **data.model_dump()))

    @post("/workers/dead", status_code=200)
    async def worker_dead(self, verbs: VerbsDep, data: JSONBody[WorkerDeadBody]) -> list[dict[str, Any]]:
        actor = Actor.declared(data.by, "operator")
        return [answer(r) for r in await verbs.call(actor, "mark_worker_dead", **data.model_dump())]

    @get("/")
    async def list_transitions(
        self,
        verbs: VerbsDep,
        stuck: Annotated[float | None, Query(ge=0)] = None,
        agent: FromQuery[str | None] = None,
        outcome: FromQuery[Outcome | None] = None,
        tool: FromQuery[str | None] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        rows = await verbs.call(NOBODY, "list_transitions", stuck=stuck, agent=agent, outcome=outcome,
                                tool=tool, limit=limit)
        return [answer(r) for r in rows]

    @get("/{request_id:path}")
    async def show(self, verbs: VerbsDep, request_id: FromPath[str]) -> dict[str, Any]:
        request_id = request_id.lstrip("/")
        row = await verbs.call(NOBODY, "get_transition", request_id=request_id)
        if row is None:
            raise Refusal(
                404, "transition_not_found", f"no transition {request_id!r}", {"request_id": request_id}
            )
        return answer(row)
