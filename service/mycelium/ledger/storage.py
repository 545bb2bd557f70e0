"""What a ledger store provides. Both stores call the same SQL verbs: one directly, one via the hub."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol

from mycelium.ledger.record import Claim, ClaimRequest, Transition


class LedgerStorage(Protocol):
    """An async store of transitions. Every decision happens in the database; a store only carries it."""

    async def claim(self, request: ClaimRequest, *, with_row: bool = True) -> Claim:
        """Claim under the row lock. ``with_row=False``: an answer of run may come without the row (a
        store that has it anyway may still send it)."""

    async def renew_lease(self, request_id: str, owner: str, fence: int, lease_ttl: float) -> Transition: ...

    async def advance_boundary(
        self, request_id: str, owner: str, fence: int, boundary: str
    ) -> Transition: ...

    async def record_external_operation(
        self, request_id: str, owner: str, fence: int, ref: str
    ) -> Transition: ...

    async def complete(self, request_id: str, owner: str, fence: int, result: Any) -> None:
        """Settle the caller's claim as COMPLETED (a command: the row is not sent back)."""

    async def fail(
        self, request_id: str, owner: str, fence: int, error: str | None, after_effect: bool | None = None
    ) -> Transition: ...

    async def mark_unknown(
        self, request_id: str, owner: str, fence: int, error: str | None
    ) -> Transition: ...

    async def mark_blocked(
        self, request_id: str, owner: str, fence: int, error: str | None
    ) -> Transition: ...

    async def apply_reconcile_result(
        self, request_id: str, fence: int, status: str, result: Any, by: str | None
    ) -> Transition: ...

    async def release(
        self,
        request_id: str,
        verified: str,
        by: str,
        reason: str,
        result: Any = None,
        expected_fence: int | None = None,
    ) -> Transition: ...

    async def get(self, request_id: str) -> Transition | None: ...

    def run_sync(self, coro: Any) -> Any:
        """Run one of the coroutines above from synchronous code (any thread) and wait for it."""
        ...

    def submit_sync(self, coro: Any) -> Future[Any]:
        """Start one of the coroutines above from synchronous code (any thread); do not wait."""
        ...

    async def aclose(self) -> None: ...

    def close(self) -> None: ...
