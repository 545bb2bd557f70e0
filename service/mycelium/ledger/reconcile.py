"""Asking the provider what happened: ``Reconciler`` / ``ReconcileResult``. Fail-closed throughout."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from mycelium.ledger.record import Transition

log = logging.getLogger("mycelium.ledger.reconcile")


class ReconcileStatus(StrEnum):
    COMPLETED = "COMPLETED"
    NOT_EXECUTED = "NOT_EXECUTED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class ReconcileResult:
    status: ReconcileStatus
    result: Any = None

    @classmethod
    def completed(cls, result: Any = None) -> ReconcileResult:
        """The provider shows the operation done: settle the transition with this result."""
        return cls(ReconcileStatus.COMPLETED, result)

    @classmethod
    def not_executed(cls) -> ReconcileResult:
        """The provider proves the operation never ran: the tool may run exactly once more."""
        return cls(ReconcileStatus.NOT_EXECUTED)

    @classmethod
    def unknown(cls) -> ReconcileResult:
        """The provider cannot tell: hard-block, as without a reconciler."""
        return cls(ReconcileStatus.UNKNOWN)


@runtime_checkable
class Reconciler(Protocol):
    """A read-only question to the provider about ``entry.external_operation_ref``; never a retry."""

    def reconcile(self, entry: Transition) -> ReconcileResult: ...


async def ask(reconciler: Any, entry: Transition, timeout: float) -> ReconcileResult:
    """The reconciler's answer; UNKNOWN when there is no ref, or it raises, times out or answers
    something else. Prefers ``reconcile_async``; a sync ``reconcile`` runs in a worker thread."""
    if reconciler is None or not (entry.external_operation_ref or "").strip():
        return ReconcileResult.unknown()
    try:
        if hasattr(reconciler, "reconcile_async"):
            answer = await asyncio.wait_for(reconciler.reconcile_async(entry), timeout)
        else:
            answer = await asyncio.wait_for(asyncio.to_thread(reconciler.reconcile, entry), timeout)
    except Exception as exc:
        log.warning(
            "reconciler for %s failed (%s: %s): treated as UNKNOWN", entry.request_id, type(exc).__name__, exc
        )
        return ReconcileResult.unknown()
    if not isinstance(answer, ReconcileResult):
        log.warning(
            "reconciler for %s answered %r, not a ReconcileResult: treated as UNKNOWN",
            entry.request_id,
            answer,
        )
        return ReconcileResult.unknown()
    return answer
