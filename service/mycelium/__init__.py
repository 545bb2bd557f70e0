"""Mycelium hub: a coordination hub for AI agents where PostgreSQL enforces the invariants.

The transition ledger SDK's public names are importable from here (``from mycelium import ledger_sync``).
Each is imported on first use, so a program that needs one part of the package (the ``mycelium``
command, a hub process) does not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0.dev0"

#: every public name and the module that defines it
_EXPORTS = {
    "ToolTransitionBinding": "mycelium.ledger.binding",
    "ConfigError": "mycelium.ledger.config",
    "LedgerConfig": "mycelium.ledger.config",
    "MyceliumConfig": "mycelium.ledger.config",
    "load_config": "mycelium.ledger.config",
    "load_config_from_string": "mycelium.ledger.config",
    "get_ledger": "mycelium.ledger.decorators",
    "ledger": "mycelium.ledger.decorators",
    "ledger_sync": "mycelium.ledger.decorators",
    "LeaseValidity": "mycelium.ledger.envelope",
    "RetryPermission": "mycelium.ledger.envelope",
    "SideEffectBoundary": "mycelium.ledger.envelope",
    "SideEffectClass": "mycelium.ledger.envelope",
    "Spendability": "mycelium.ledger.envelope",
    "TerminalOutcome": "mycelium.ledger.envelope",
    "ToolCapability": "mycelium.ledger.envelope",
    "TransitionGate": "mycelium.ledger.envelope",
    "LedgerAlreadyResolvedError": "mycelium.ledger.errors",
    "LedgerError": "mycelium.ledger.errors",
    "LedgerHardBlockError": "mycelium.ledger.errors",
    "LedgerIdentityConflictError": "mycelium.ledger.errors",
    "LedgerLeaseExpiredError": "mycelium.ledger.errors",
    "LedgerOutcomeAlreadySetError": "mycelium.ledger.errors",
    "LedgerPendingError": "mycelium.ledger.errors",
    "LedgerPollTimeoutError": "mycelium.ledger.errors",
    "LedgerReleaseRefusedError": "mycelium.ledger.errors",
    "LedgerSchemaError": "mycelium.ledger.errors",
    "LedgerSoftBlockError": "mycelium.ledger.errors",
    "LedgerStorageUnavailableError": "mycelium.ledger.errors",
    "LedgerWorkerAliveError": "mycelium.ledger.errors",
    "MissingRequestIdentityError": "mycelium.ledger.errors",
    "TaskLedgerPendingError": "mycelium.ledger.errors",
    "ToolCapabilityDeclarationError": "mycelium.ledger.errors",
    "HubLedgerStorage": "mycelium.ledger.hub_http",
    "execution_scope": "mycelium.ledger.identity",
    "ActionLedger": "mycelium.ledger.ledger",
    "arecord_external_operation": "mycelium.ledger.ledger",
    "mark_crossed": "mycelium.ledger.ledger",
    "mark_maybe_crossed": "mycelium.ledger.ledger",
    "record_external_operation": "mycelium.ledger.ledger",
    "renew_lease": "mycelium.ledger.ledger",
    "side_effect": "mycelium.ledger.ledger",
    "LedgerStorage": "mycelium.ledger.storage",
    "PostgresLedgerStorage": "mycelium.ledger.postgres",
    "InMemoryLedgerStorage": "mycelium.ledger.local",
    "FileLedgerStorage": "mycelium.ledger.local",
    "RedisLedgerStorage": "mycelium.ledger.redis_store",
    "ReceiptLog": "mycelium.ledger.receipt_log",
    "ReceiptingStorage": "mycelium.ledger.receipt_log",
    "Reconciler": "mycelium.ledger.reconcile",
    "ReconcileResult": "mycelium.ledger.reconcile",
    "ReconcileStatus": "mycelium.ledger.reconcile",
    "task_ledger": "mycelium.ledger.tasks",
    "task_ledger_sync": "mycelium.ledger.tasks",
    "protect": "mycelium.guards.protect",
    "protect_sync": "mycelium.guards.protect",
    "Session": "mycelium.guards.session",
    "MessageValidator": "mycelium.guards.messages",
    "MessageValidationError": "mycelium.guards.messages",
    "HistoryGuard": "mycelium.guards.history",
    "HistoryTruncatedError": "mycelium.guards.history",
    "bounded": "mycelium.guards.boundary",
    "bounded_sync": "mycelium.guards.boundary",
    "ToolBoundaryError": "mycelium.guards.boundary",
    "ToolBoundaryExhaustedError": "mycelium.guards.boundary",
    "tool_error_message": "mycelium.guards.boundary",
    "ToolRegistry": "mycelium.guards.registry",
    "ToolRunner": "mycelium.guards.runner",
    "StateFlush": "mycelium.guards.state_flush",
    "StateFlushError": "mycelium.guards.state_flush",
    "StateSnapshot": "mycelium.guards.state_flush",
    "InMemoryStateFlushStorage": "mycelium.guards.state_flush",
    "FileStateFlushStorage": "mycelium.guards.state_flush",
}

__all__ = [
    "ActionLedger",
    "ConfigError",
    "FileLedgerStorage",
    "FileStateFlushStorage",
    "HistoryGuard",
    "HistoryTruncatedError",
    "HubLedgerStorage",
    "InMemoryLedgerStorage",
    "InMemoryStateFlushStorage",
    "LeaseValidity",
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
    "LedgerStorage",
    "LedgerStorageUnavailableError",
    "LedgerWorkerAliveError",
    "MessageValidationError",
    "MessageValidator",
    "MissingRequestIdentityError",
    "MyceliumConfig",
    "PostgresLedgerStorage",
    "ReceiptLog",
    "ReceiptingStorage",
    "ReconcileResult",
    "ReconcileStatus",
    "Reconciler",
    "RedisLedgerStorage",
    "RetryPermission",
    "Session",
    "SideEffectBoundary",
    "SideEffectClass",
    "Spendability",
    "StateFlush",
    "StateFlushError",
    "StateSnapshot",
    "TaskLedgerPendingError",
    "TerminalOutcome",
    "ToolBoundaryError",
    "ToolBoundaryExhaustedError",
    "ToolCapability",
    "ToolCapabilityDeclarationError",
    "ToolRegistry",
    "ToolRunner",
    "ToolTransitionBinding",
    "TransitionGate",
    "__version__",
    "arecord_external_operation",
    "bounded",
    "bounded_sync",
    "execution_scope",
    "get_ledger",
    "ledger",
    "ledger_sync",
    "load_config",
    "load_config_from_string",
    "mark_crossed",
    "mark_maybe_crossed",
    "protect",
    "protect_sync",
    "record_external_operation",
    "renew_lease",
    "side_effect",
    "task_ledger",
    "task_ledger_sync",
    "tool_error_message",
]

# ``mycelium.ledger`` is the decorator, as it always was, not the subpackage of that name. The
# import system binds a subpackage's name in its parent when the subpackage is first imported, so
# it is imported here, and that binding undone, before any other import could make it.
importlib.import_module("mycelium.ledger")
del globals()["ledger"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mycelium' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from mycelium.ledger.binding import ToolTransitionBinding
    from mycelium.ledger.config import (
        ConfigError,
        LedgerConfig,
        MyceliumConfig,
        load_config,
        load_config_from_string,
    )
    from mycelium.ledger.decorators import get_ledger, ledger, ledger_sync
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
        LedgerSoftBlockError,
        LedgerStorageUnavailableError,
        LedgerWorkerAliveError,
        MissingRequestIdentityError,
        TaskLedgerPendingError,
        ToolCapabilityDeclarationError,
    )
    from mycelium.ledger.hub_http import HubLedgerStorage
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
    from mycelium.ledger.postgres import PostgresLedgerStorage
    from mycelium.ledger.reconcile import Reconciler, ReconcileResult, ReconcileStatus
    from mycelium.ledger.storage import LedgerStorage
    from mycelium.ledger.tasks import task_ledger, task_ledger_sync
