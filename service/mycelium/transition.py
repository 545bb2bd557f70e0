"""The transition envelope's names where the upstream SDK's README imports them from
(``from mycelium.transition import SideEffectClass, ToolTransitionBinding``)."""

from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.envelope import (
    LeaseValidity,
    RetryPermission,
    SideEffectBoundary,
    SideEffectClass,
    Spendability,
    TerminalOutcome,
    ToolCapability,
    TransitionGate,
)

__all__ = [
    "LeaseValidity",
    "RetryPermission",
    "SideEffectBoundary",
    "SideEffectClass",
    "Spendability",
    "TerminalOutcome",
    "ToolCapability",
    "ToolTransitionBinding",
    "TransitionGate",
]
