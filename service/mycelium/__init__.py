"""Mycelium hub: a coordination hub for AI agents where PostgreSQL enforces the invariants.

The transition ledger SDK's public names are importable from here (``from mycelium import ledger_sync``).
Importing the package loads the ledger's core only: the two stores, ``PostgresLedgerStorage``
(asyncpg) and ``HubLedgerStorage`` (httpx), are imported when first named, and a decorated tool
imports its store at its first call. Nothing of the hub's server stack is imported here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0.dev0"

from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.config import LedgerConfig, load_config
from mycelium.ledger.decorators import ledger, ledger_sync
from mycelium.ledger.envelope import (
    RetryPermission,
    SideEffectBoundary,
    SideEffectClass,
    Spendability,
    TerminalOutcome,
    ToolCapability,
    TransitionGate,
)
from mycelium.ledger.errors import (
    LedgerAlreadyResolvedError,
    LedgerError,
    LedgerHardBlockError,
    LedgerIdentityConflictError,
    LedgerLeaseExpiredError,
    LedgerOutcomeAlreadySetError,
    LedgerPendingError,
    LedgerPollTimeoutError,
    LedgerReleaseRefusedError,
    LedgerSchemaError,
    LedgerSoftBlockError,
    LedgerStorageUnavailableError,
    LedgerWorkerAliveError,
    MissingRequestIdentityError,
    TaskLedgerPendingError,
    ToolCapabilityDeclarationError,
)
from mycelium.ledger.identity import execution_scope
from mycelium.ledger.ledger import (
    ActionLedger,
    arecord_external_operation,
    mark_crossed,
    mark_maybe_crossed,
    record_external_operation,
    renew_lease,
    side_effect,
)
from mycelium.ledger.reconcile import Reconciler, ReconcileResult, ReconcileStatus
from mycelium.ledger.tasks import task_ledger, task_ledger_sync

if TYPE_CHECKING:
    from mycelium.ledger.hub_http import HubLedgerStorage
    from mycelium.ledger.postgres import PostgresLedgerStorage

#: public names whose modules are imported on first use (name -> module)
_LAZY = {
    "HubLedgerStorage": "mycelium.ledger.hub_http",
    "PostgresLedgerStorage": "mycelium.ledger.postgres",
    "InMemoryLedgerStorage": "mycelium.ledger.local",
    "FileLedgerStorage": "mycelium.ledger.local",
    "RedisLedgerStorage": "mycelium.ledger.redis_store",
    "ReceiptLog": "mycelium.ledger.receipt_log",
    "ReceiptingStorage": "mycelium.ledger.receipt_log",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mycelium' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ActionLedger",
    "HubLedgerStorage",
    "LedgerAlreadyResolvedError",
    "LedgerConfig",
    "LedgerError",
    "LedgerHardBlockError",
    "LedgerIdentityConflictError",
    "LedgerLeaseExpiredError",
    "LedgerOutcomeAlreadySetError",
    "LedgerPendingError",
    "LedgerPollTimeoutError",
    "LedgerReleaseRefusedError",
    "LedgerSchemaError",
    "LedgerSoftBlockError",
    "LedgerStorageUnavailableError",
    "LedgerWorkerAliveError",
    "MissingRequestIdentityError",
    "PostgresLedgerStorage",
    "ReconcileResult",
    "ReconcileStatus",
    "Reconciler",
    "RetryPermission",
    "SideEffectBoundary",
    "SideEffectClass",
    "Spendability",
    "TaskLedgerPendingError",
    "TerminalOutcome",
    "ToolCapability",
    "ToolCapabilityDeclarationError",
    "ToolTransitionBinding",
    "TransitionGate",
    "__version__",
    "arecord_external_operation",
    "execution_scope",
    "ledger",
    "ledger_sync",
    "load_config",
    "mark_crossed",
    "mark_maybe_crossed",
    "record_external_operation",
    "renew_lease",
    "side_effect",
    "task_ledger",
    "task_ledger_sync",
]
