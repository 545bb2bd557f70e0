"""Transitions and receipts: the request models and the answers every transport shares."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mycelium.verbs.actor import NOBODY
from mycelium.verbs.gateway import Verbs

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


def export_row(row: Any) -> dict[str, Any]:
    """A receipt exactly as hashed (without the sort column)."""
    out = dict(row.items())
    out.pop("recorded_at_ts", None)
    return out


def key_read(row: Any) -> dict[str, Any]:
    """A receipt key of the public keyring (the raw Ed25519 key in hex)."""
    return {"key_id": row["key_id"], "algorithm": row["algorithm"],
            "public_key": bytes(row["public_key"]).hex(), "created_at": row["created_at"],
            "retired_at": row["retired_at"]}


async def receipts_of(verbs: Verbs, agent: str | None) -> AsyncIterator[dict[str, Any]]:
    """Every receipt (of one agent), in id order, a page at a time."""
    after = 0
    while True:
        batch = await verbs.call(NOBODY, "export_receipts", since=None, agent=agent, after=after, limit=5000)
        if not batch:
            return
        after = batch[-1]["id"]
        for r in batch:
            yield export_row(r)


async def receipt_keyring(verbs: Verbs) -> dict[str, bytes]:
    """The hub's public receipt keys, key id -> raw Ed25519 key (retired ones too: they signed)."""
    return {r["key_id"]: bytes(r["public_key"]) for r in await verbs.call(NOBODY, "receipt_keys")}


def claim_read(row: Any) -> dict[str, Any]:
    """A claim's answer: the gate, the action, whether it repaired the row, and the row."""
    out = row_json(row)
    return {"gate": out.pop("gate"), "action": out.pop("action"), "repaired": out.pop("repaired"),
            "transition": out}
