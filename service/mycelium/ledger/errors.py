"""The ledger's exceptions: what a caller (or its agent loop) can tell apart and act on."""

from __future__ import annotations

from typing import Any


class LedgerError(Exception):
    """Base of every ledger error. ``details`` carries the transition's state when known."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class LedgerHardBlockError(LedgerError):
    """A side-effecting redispatch is unsafe: stop; a reconciler or a human must decide."""


class LedgerSoftBlockError(LedgerError):
    """A read-only transition is ambiguous and the tool asked to defer (defer_read_only_unknown)."""


class LedgerPollTimeoutError(LedgerError):
    """Another worker held the transition longer than poll_timeout; its lease is still live."""


class LedgerPendingError(LedgerError):
    """The transition is in flight elsewhere (raised where the caller asked not to wait)."""


class TaskLedgerPendingError(LedgerPendingError):
    """A task with this id is running elsewhere under a live lease."""


class LedgerOutcomeAlreadySetError(LedgerError):
    """A compare-and-swap lost: the row moved on (another fence, owner or outcome). Like HTTP 409."""


class LedgerLeaseExpiredError(LedgerOutcomeAlreadySetError):
    """The lease lapsed: renewing, or entering the side-effect boundary, is refused."""


class LedgerIdentityConflictError(LedgerError):
    """An explicit request id was reused for a different call (tool, scope or arguments)."""


class LedgerReleaseRefusedError(LedgerError):
    """An operator release does not apply to the transition as it stands."""


class LedgerAlreadyResolvedError(LedgerError):
    """The transition was already released; a release is one-shot."""


class LedgerWorkerAliveError(LedgerError):
    """A death assertion was refused: the worker's heartbeat is recent."""


class LedgerNotFoundError(LedgerError):
    """No transition with that request id."""


class LedgerStorageUnavailableError(LedgerError):
    """The ledger's store could not be reached or failed; the original error is ``__cause__``."""


class LedgerSchemaError(LedgerStorageUnavailableError):
    """The store's database lacks the hub's schema (or holds an older one) and it was not installed:
    the message says why and names the command that installs or upgrades it."""


class ToolCapabilityDeclarationError(ValueError):
    """A declared capability is looser than the class and its mechanisms can ever justify."""


class MissingRequestIdentityError(LedgerError):
    """The binding asks for a request id from an argument the call does not carry."""


_BY_CODE: dict[str, type[LedgerError]] = {
    "fence_lost": LedgerOutcomeAlreadySetError,
    "not_in_flight": LedgerOutcomeAlreadySetError,
    "transition_moved": LedgerOutcomeAlreadySetError,
    "boundary_crossed": LedgerOutcomeAlreadySetError,
    "lease_expired": LedgerLeaseExpiredError,
    "identity_conflict": LedgerIdentityConflictError,
    "release_refused": LedgerReleaseRefusedError,
    "already_resolved": LedgerAlreadyResolvedError,
    "worker_alive": LedgerWorkerAliveError,
    "transition_not_found": LedgerNotFoundError,
}


def ledger_error(code: str, message: str, details: dict[str, Any] | None = None) -> LedgerError:
    """The ledger exception for a refusal code of the database (or the hub's HTTP body)."""
    return _BY_CODE.get(code, LedgerError)(message, {"error": code, **(details or {})})
