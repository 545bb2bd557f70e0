"""Transitions over HTTP: the same SQL verbs, for agents (and operators) without database access.

Every route is one call of a ``mycelium.*`` function; its refusals become the HTTP error body.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.db.queries import q
from mycelium.errors import Refusal

Text = Annotated[str, Field(min_length=1, max_length=512)]


def row_json(row: Any) -> dict[str, Any]:
    """A transitions row as JSON (intervals as seconds)."""
    out = dict(row.items())
    for key, value in out.items():
        if isinstance(value, timedelta):
            out[key] = value.total_seconds()
    return out


class ClaimBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: Text
    transition_key: Annotated[str, Field(min_length=1, max_length=256)]
    tool: Annotated[str, Field(min_length=1, max_length=256)]
    owner: Annotated[str, Field(min_length=1, max_length=256)]
    side_effect_class: Annotated[str, Field(min_length=1, max_length=64)]
    agent_id: Annotated[str, Field(max_length=256)] = ""
    policy_version: Annotated[str, Field(max_length=256)] = ""
    lease_ttl: Annotated[float, Field(ge=0, le=30 * 86400)] = 3600.0
    spendability: Literal["multi_use", "single_use", "non_replayable"] | None = None
    retry_permission: (
        Literal[
            "safe_retry",
            "retry_only_with_same_provider_idempotency_key",
            "manual_reconciliation_required",
            "never_retry_automatically",
        ]
        | None
    ) = None
    capability: Literal["idempotent", "queryable", "blind"] | None = None
    kind: Literal["tool", "task"] = "tool"
    scope: dict[str, Any] = Field(default_factory=dict)
    dispatch_id: Annotated[str, Field(max_length=512)] | None = None
    args_hash: Annotated[str, Field(max_length=128)] | None = None
    idempotency_key: Annotated[str, Field(max_length=512)] | None = None
    key_param: Annotated[str, Field(max_length=256)] | None = None
    key_ttl: Annotated[float, Field(ge=0)] | None = None
    incoming_key: Annotated[str, Field(max_length=1024)] | None = None
    has_reconciler: bool = False
    reconciled: bool = False
    defer_read_unknown: bool = False
    presumed_dead_after: Annotated[float, Field(gt=0)] | None = None


class Fenced(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: Text
    owner: Annotated[str, Field(min_length=1, max_length=256)]
    fence: Annotated[int, Field(ge=1)]


class RenewBody(Fenced):
    lease_ttl: Annotated[float, Field(gt=0, le=30 * 86400)]


class BoundaryBody(Fenced):
    boundary: Literal["not_crossed", "maybe_crossed", "crossed"]


class ExternalOperationBody(Fenced):
    ref: Annotated[str, Field(min_length=1, max_length=1024)]


class CompleteBody(Fenced):
    result: Any = None


class FailBody(Fenced):
    error: Annotated[str, Field(max_length=8000)] | None = None
    after_effect: bool | None = None


class MarkBody(Fenced):
    error: Annotated[str, Field(max_length=8000)] | None = None


class ReconcileBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: Text
    fence: Annotated[int, Field(ge=1)]
    status: Literal["COMPLETED", "NOT_EXECUTED", "UNKNOWN"]
    result: Any = None
    by: Annotated[str, Field(max_length=256)] | None = None


class ReleaseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: Text
    verified: Literal["completed", "not_executed"]
    by: Annotated[str, Field(min_length=1, max_length=256)]
    reason: Annotated[str, Field(min_length=1, max_length=4000)]
    result: Any = None
    expected_fence: Annotated[int, Field(ge=1)] | None = None


class WorkerDeadBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    owner: Annotated[str, Field(min_length=1, max_length=256)]
    by: Annotated[str, Field(min_length=1, max_length=256)]
    reason: Annotated[str, Field(min_length=1, max_length=4000)]
    override: bool = False
    presumed_dead_after: Annotated[float, Field(gt=0)] = 60.0


Outcome = Literal[
    "IN_FLIGHT", "COMPLETED", "FAILED_BEFORE_EFFECT", "FAILED_AFTER_EFFECT", "BLOCKED", "UNKNOWN", "EXPIRED"
]


class TransitionController(Controller):
    path = "/api/transitions"

    @post("/claim", status_code=200)
    async def claim(self, hub: HubDep, data: JSONBody[ClaimBody]) -> dict[str, Any]:
        d = data
        row = await hub.db.fetchrow(
            q("claim_transition"),
            d.request_id,
            d.transition_key,
            d.tool,
            d.owner,
            d.side_effect_class,
            d.agent_id,
            d.policy_version,
            d.lease_ttl,
            d.spendability,
            d.retry_permission,
            d.capability,
            d.kind,
            d.scope,
            d.dispatch_id,
            d.args_hash,
            d.idempotency_key,
            d.key_param,
            d.key_ttl,
            d.incoming_key,
            d.has_reconciler,
            d.reconciled,
            d.defer_read_unknown,
            d.presumed_dead_after,
        )
        out = row_json(row)
        return {
            "gate": out.pop("gate"),
            "action": out.pop("action"),
            "repaired": out.pop("repaired"),
            "transition": out,
        }

    @post("/renew", status_code=200)
    async def renew(self, hub: HubDep, data: JSONBody[RenewBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(q("renew_lease"), data.request_id, data.owner, data.fence, data.lease_ttl)
        )

    @post("/boundary", status_code=200)
    async def boundary(self, hub: HubDep, data: JSONBody[BoundaryBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(
                q("advance_boundary"), data.request_id, data.owner, data.fence, data.boundary
            )
        )

    @post("/external-operation", status_code=200)
    async def external_operation(self, hub: HubDep, data: JSONBody[ExternalOperationBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(
                q("record_external_operation"), data.request_id, data.owner, data.fence, data.ref
            )
        )

    @post("/complete", status_code=200)
    async def complete(self, hub: HubDep, data: JSONBody[CompleteBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(
                q("complete_transition"), data.request_id, data.owner, data.fence, data.result
            )
        )

    @post("/fail", status_code=200)
    async def fail(self, hub: HubDep, data: JSONBody[FailBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(
                q("fail_transition"), data.request_id, data.owner, data.fence, data.error, data.after_effect
            )
        )

    @post("/unknown", status_code=200)
    async def unknown(self, hub: HubDep, data: JSONBody[MarkBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(q("mark_unknown"), data.request_id, data.owner, data.fence, data.error)
        )

    @post("/blocked", status_code=200)
    async def blocked(self, hub: HubDep, data: JSONBody[MarkBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(q("mark_blocked"), data.request_id, data.owner, data.fence, data.error)
        )

    @post("/repair", status_code=200)
    async def repair(self, hub: HubDep, data: JSONBody[Fenced]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(q("repair_transition"), data.request_id, data.owner, data.fence)
        )

    @post("/reconcile", status_code=200)
    async def reconcile(self, hub: HubDep, data: JSONBody[ReconcileBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(
                q("apply_reconcile_result"), data.request_id, data.fence, data.status, data.result, data.by
            )
        )

    @post("/release", status_code=200)
    async def release(self, hub: HubDep, data: JSONBody[ReleaseBody]) -> dict[str, Any]:
        return row_json(
            await hub.db.fetchrow(
                q("release_transition"),
                data.request_id,
                data.verified,
                data.by,
                data.reason,
                data.result,
                data.expected_fence,
            )
        )

    @post("/workers/dead", status_code=200)
    async def worker_dead(self, hub: HubDep, data: JSONBody[WorkerDeadBody]) -> list[dict[str, Any]]:
        rows = await hub.db.fetch(
            q("mark_worker_dead"), data.owner, data.by, data.reason, data.override, data.presumed_dead_after
        )
        return [row_json(r) for r in rows]

    @get("/")
    async def list_transitions(
        self,
        hub: HubDep,
        stuck: Annotated[float | None, Query(ge=0)] = None,
        agent: FromQuery[str | None] = None,
        outcome: FromQuery[Outcome | None] = None,
        tool: FromQuery[str | None] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        rows = await hub.db.fetch(q("list_transitions"), stuck, agent, outcome, tool, limit)
        return [row_json(r) for r in rows]

    @get("/{request_id:path}")
    async def show(self, hub: HubDep, request_id: FromPath[str]) -> dict[str, Any]:
        request_id = request_id.lstrip("/")
        row = await hub.db.fetchrow(q("get_transition"), request_id)
        if row is None:
            raise Refusal(
                404, "transition_not_found", f"no transition {request_id!r}", {"request_id": request_id}
            )
        return row_json(row)
