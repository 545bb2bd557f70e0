"""The transition envelope's closed sets and per-class defaults (contracts/transition-gates.json).

Values are the wire strings stored in the database's CHECK-constrained columns.
"""

from __future__ import annotations

from enum import StrEnum


class SideEffectClass(StrEnum):
    READ = "read"
    IDEMPOTENT_MUTATE = "idempotent_mutate"
    KEYED_MUTATE = "keyed_mutate"
    NON_IDEMPOTENT_MUTATE = "non_idempotent_mutate"
    IRREVERSIBLE = "irreversible"

    @classmethod
    def parse(cls, value: str | SideEffectClass) -> SideEffectClass:
        """A class from its value or a legacy alias (``payment``, ``read_only``, …)."""
        if isinstance(value, SideEffectClass):
            return value
        key = str(value).strip().lower()
        try:
            return cls(CLASS_ALIASES.get(key, key))
        except ValueError:
            raise ValueError(
                f"unknown side_effect_class {value!r} (one of {', '.join(c.value for c in cls)})"
            ) from None


CLASS_ALIASES: dict[str, str] = {
    "read_only": "read",
    "idempotent_write": "idempotent_mutate",
    "external_api_mutation": "keyed_mutate",
    "non_idempotent_write": "non_idempotent_mutate",
    "payment": "non_idempotent_mutate",
    "email": "non_idempotent_mutate",
    "subagent": "non_idempotent_mutate",
    "onchain_action": "irreversible",
}


class Spendability(StrEnum):
    MULTI_USE = "multi_use"
    SINGLE_USE = "single_use"
    NON_REPLAYABLE = "non_replayable"


class SideEffectBoundary(StrEnum):
    NOT_CROSSED = "not_crossed"
    MAYBE_CROSSED = "maybe_crossed"
    CROSSED = "crossed"

    @property
    def rank(self) -> int:
        return BOUNDARY_ORDER.index(self)


BOUNDARY_ORDER = [
    SideEffectBoundary.NOT_CROSSED,
    SideEffectBoundary.MAYBE_CROSSED,
    SideEffectBoundary.CROSSED,
]


class TerminalOutcome(StrEnum):
    IN_FLIGHT = "IN_FLIGHT"
    COMPLETED = "COMPLETED"
    FAILED_BEFORE_EFFECT = "FAILED_BEFORE_EFFECT"
    FAILED_AFTER_EFFECT = "FAILED_AFTER_EFFECT"
    EXPIRED = "EXPIRED"
    BLOCKED = "BLOCKED"
    UNKNOWN = "UNKNOWN"


class RetryPermission(StrEnum):
    SAFE_RETRY = "safe_retry"
    RETRY_ONLY_WITH_SAME_PROVIDER_IDEMPOTENCY_KEY = "retry_only_with_same_provider_idempotency_key"
    MANUAL_RECONCILIATION_REQUIRED = "manual_reconciliation_required"
    NEVER_RETRY_AUTOMATICALLY = "never_retry_automatically"


class ToolCapability(StrEnum):
    IDEMPOTENT = "idempotent"
    QUERYABLE = "queryable"
    BLIND = "blind"

    @property
    def rank(self) -> int:
        return [ToolCapability.IDEMPOTENT, ToolCapability.QUERYABLE, ToolCapability.BLIND].index(self)


class TransitionGate(StrEnum):
    ALLOW = "ALLOW"
    RETURN = "RETURN"
    POLL = "POLL"
    RECLAIM = "RECLAIM"
    REPAIR = "REPAIR"
    SOFT_BLOCK = "SOFT_BLOCK"
    HARD_BLOCK = "HARD_BLOCK"


class LeaseValidity(StrEnum):
    HELD = "HELD"
    EXPIRED = "EXPIRED"
    UNBOUNDED = "UNBOUNDED"


DEFAULT_RETRY: dict[SideEffectClass, RetryPermission] = {
    SideEffectClass.READ: RetryPermission.SAFE_RETRY,
    SideEffectClass.IDEMPOTENT_MUTATE: RetryPermission.SAFE_RETRY,
    SideEffectClass.KEYED_MUTATE: RetryPermission.RETRY_ONLY_WITH_SAME_PROVIDER_IDEMPOTENCY_KEY,
    SideEffectClass.NON_IDEMPOTENT_MUTATE: RetryPermission.MANUAL_RECONCILIATION_REQUIRED,
    SideEffectClass.IRREVERSIBLE: RetryPermission.NEVER_RETRY_AUTOMATICALLY,
}

DEFAULT_SPENDABILITY: dict[SideEffectClass, Spendability] = {
    SideEffectClass.READ: Spendability.MULTI_USE,
    SideEffectClass.IDEMPOTENT_MUTATE: Spendability.MULTI_USE,
    SideEffectClass.KEYED_MUTATE: Spendability.SINGLE_USE,
    SideEffectClass.NON_IDEMPOTENT_MUTATE: Spendability.SINGLE_USE,
    SideEffectClass.IRREVERSIBLE: Spendability.NON_REPLAYABLE,
}


def capability_floor(cls: SideEffectClass, *, key_param: bool, reconciler: bool) -> ToolCapability:
    """The loosest capability a tool may honestly claim given its class and mechanisms."""
    if cls in (SideEffectClass.READ, SideEffectClass.IDEMPOTENT_MUTATE):
        return ToolCapability.IDEMPOTENT
    if cls is SideEffectClass.KEYED_MUTATE and (key_param or reconciler):
        return ToolCapability.QUERYABLE
    if cls is SideEffectClass.NON_IDEMPOTENT_MUTATE and reconciler:
        return ToolCapability.QUERYABLE
    return ToolCapability.BLIND
