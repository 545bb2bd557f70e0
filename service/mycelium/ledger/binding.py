"""How one tool is classified: ``ToolTransitionBinding.for_tool(...)``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from mycelium.ledger.envelope import (
    DEFAULT_RETRY,
    DEFAULT_SPENDABILITY,
    RetryPermission,
    SideEffectBoundary,
    SideEffectClass,
    Spendability,
    ToolCapability,
    capability_floor,
)
from mycelium.ledger.errors import ToolCapabilityDeclarationError


@dataclass(frozen=True)
class ToolTransitionBinding:
    """The envelope a ledgered tool runs under. Build it with :meth:`for_tool` (class defaults)."""

    agent_id: str = ""
    policy_version: str = ""
    side_effect_class: SideEffectClass = SideEffectClass.NON_IDEMPOTENT_MUTATE
    retry_permission: RetryPermission = RetryPermission.MANUAL_RECONCILIATION_REQUIRED
    spendability: Spendability = Spendability.SINGLE_USE
    side_effect_boundary_default: SideEffectBoundary = SideEffectBoundary.NOT_CROSSED
    explicit_capability: ToolCapability | None = None
    scope_from: Mapping[str, str] = field(default_factory=dict)
    provider_idempotency_key_param: str | None = None
    provider_idempotency_key_ttl: float | None = None
    request_id_from: str | None = None

    @classmethod
    def for_tool(
        cls,
        *,
        agent_id: str = "",
        policy_version: str = "",
        side_effect_class: SideEffectClass | str = SideEffectClass.NON_IDEMPOTENT_MUTATE,
        retry_permission: RetryPermission | str | None = None,
        spendability: Spendability | str | None = None,
        capability: ToolCapability | str | None = None,
        scope_from: Mapping[str, str] | None = None,
        provider_idempotency_key_param: str | None = None,
        provider_idempotency_key_ttl: float | None = None,
        request_id_from: str | None = None,
    ) -> ToolTransitionBinding:
        """A binding with the class's defaults for anything not given (runtime.md §3.2)."""
        klass = SideEffectClass.parse(side_effect_class)
        declared = ToolCapability(capability) if capability is not None else None
        if declared is not None:
            best = capability_floor(klass, key_param=True, reconciler=True)
            if declared.rank < best.rank:
                raise ToolCapabilityDeclarationError(
                    f"capability {declared.value!r} is impossible for {klass.value}: the loosest it can "
                    f"ever be is {best.value!r}"
                )
        if provider_idempotency_key_ttl is not None and provider_idempotency_key_ttl < 0:
            raise ValueError("provider_idempotency_key_ttl is a number of seconds >= 0")
        return cls(
            agent_id=agent_id,
            policy_version=str(policy_version),
            side_effect_class=klass,
            retry_permission=RetryPermission(retry_permission) if retry_permission else DEFAULT_RETRY[klass],
            spendability=Spendability(spendability) if spendability else DEFAULT_SPENDABILITY[klass],
            explicit_capability=declared,
            scope_from=dict(scope_from or {}),
            provider_idempotency_key_param=provider_idempotency_key_param,
            provider_idempotency_key_ttl=provider_idempotency_key_ttl,
            request_id_from=request_id_from,
        )

    def effective_capability(self, *, has_reconciler: bool) -> ToolCapability:
        """The declared capability, but never looser than what the mechanisms present justify."""
        floor = capability_floor(
            self.side_effect_class,
            key_param=self.provider_idempotency_key_param is not None,
            reconciler=has_reconciler,
        )
        if self.explicit_capability is None or self.explicit_capability.rank < floor.rank:
            return floor
        return self.explicit_capability

    def with_agent(self, agent_id: str, policy_version: str) -> ToolTransitionBinding:
        """This binding with agent and policy filled in where it left them empty."""
        return replace(
            self, agent_id=self.agent_id or agent_id, policy_version=self.policy_version or policy_version
        )

    @property
    def capability(self) -> ToolCapability:
        return self.effective_capability(has_reconciler=False)
