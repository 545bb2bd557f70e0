"""A transition as the store returns it, and the claim request and answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

from mycelium.ledger.envelope import LeaseValidity


@dataclass(frozen=True)
class Transition:
    """One row of ``mycelium.transitions`` (the durable record of a tool call or task)."""

    request_id: str
    kind: str
    transition_key: str
    tool: str
    agent_id: str
    policy_version: str
    side_effect_class: str
    spendability: str
    retry_permission: str
    capability: str
    side_effect_boundary: str
    terminal_outcome: str
    effect_phase: str
    owner: str
    fence: int
    attempts: int = 1
    idempotency_key: str | None = None
    scope: dict[str, Any] = field(default_factory=dict)
    dispatch_id: str | None = None
    args_hash: str | None = None
    external_operation_ref: str | None = None
    provider_key_param: str | None = None
    provider_idempotency_key: str | None = None
    provider_key_first_attempt_at: datetime | None = None
    provider_key_ttl: Any = None
    lease_until: datetime | None = None
    last_heartbeat_at: datetime | None = None
    result: Any = None
    error: str | None = None
    receipt_ref: str | None = None
    reconcile_status: str | None = None
    reconciled_at: datetime | None = None
    operator_resolution: str | None = None
    resolved_by: str | None = None
    resolution_reason: str | None = None
    resolved_at: datetime | None = None
    released_from_outcome: str | None = None
    worker_dead_asserted_by: str | None = None
    worker_dead_asserted_at: datetime | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_mapping(cls, row: Any) -> Transition:
        """From an asyncpg record or a JSON object (timestamps as ISO strings)."""
        values: dict[str, Any] = {}
        for name, value in row.items():
            if name not in _TRANSITION_FIELDS:
                continue
            if isinstance(value, str) and name in _TIMESTAMPS:
                value = datetime.fromisoformat(value)
            values[name] = value
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, datetime):
                out[k] = v.isoformat()
            elif k == "provider_key_ttl" and v is not None and not isinstance(v, (int, float)):
                out[k] = v.total_seconds()
        return out

    def lease_validity(self, now: datetime) -> LeaseValidity:
        if self.lease_until is None:
            return LeaseValidity.UNBOUNDED
        return LeaseValidity.EXPIRED if now >= self.lease_until else LeaseValidity.HELD

    def describe(self) -> str:
        text = (
            f"{self.tool!r} request {self.request_id!r} is {self.terminal_outcome} with boundary "
            f"{self.side_effect_boundary}"
        )
        if self.external_operation_ref:
            text += f" (external_operation_ref={self.external_operation_ref})"
        return text


@dataclass(frozen=True)
class ClaimRequest:
    """Everything ``mycelium.claim_transition`` needs; the database decides from it under the row lock."""

    request_id: str
    transition_key: str
    tool: str
    owner: str
    side_effect_class: str
    agent_id: str = ""
    policy_version: str = ""
    lease_ttl: float = 3600.0
    spendability: str | None = None
    retry_permission: str | None = None
    capability: str | None = None
    kind: str = "tool"
    scope: dict[str, Any] = field(default_factory=dict)
    dispatch_id: str | None = None
    args_hash: str | None = None
    idempotency_key: str | None = None
    key_param: str | None = None
    key_ttl: float | None = None
    incoming_key: str | None = None
    has_reconciler: bool = False
    reconciled: bool = False
    defer_read_unknown: bool = False
    presumed_dead_after: float | None = None

    def named(self) -> dict[str, Any]:
        """claim_transition's parameters, by name."""
        return {name: getattr(self, name) for name in _CLAIM_FIELDS}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Claim:
    """The database's answer to a claim. The row becomes a Transition only when it is read: the common
    answer (run a fresh row) needs nothing from it but the fence, and a claim made with
    ``with_row=False`` carries no row with that answer (only its fence)."""

    __slots__ = ("_row", "_transition", "action", "fence", "gate", "repaired")

    def __init__(
        self,
        gate: str,
        action: str,
        repaired: bool,
        row: Transition | Mapping[str, Any] | None,
        fence: int | None = None,
    ) -> None:
        self.gate, self.action, self.repaired = gate, action, repaired
        self._transition = row if isinstance(row, Transition) else None
        self._row = None if isinstance(row, Transition) else row
        if row is None and fence is None:
            raise ValueError("a claim without its row names its fence")
        self.fence: int = fence if row is None else row.fence if isinstance(row, Transition) else row["fence"]

    @property
    def transition(self) -> Transition:
        if self._transition is None:
            if self._row is None:
                raise LookupError(f"this {self.action!r} claim was made without its row (with_row=False)")
            self._transition = Transition.from_mapping(self._row)
        return self._transition


_TRANSITION_FIELDS = frozenset(f.name for f in fields(Transition))
_TIMESTAMPS = frozenset(n for n in _TRANSITION_FIELDS if n.endswith("_at") or n == "lease_until")
_CLAIM_FIELDS = tuple(f.name for f in fields(ClaimRequest))
