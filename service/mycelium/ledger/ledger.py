"""``ActionLedger``: the claim loop around a tool body, and the marks a body makes while it runs.

The database decides every redispatch (claim_transition); this loop only carries out its answer:
run the body, return the stored result, wait for the worker holding the lease, ask a reconciler,
or raise. It exists once, as async code; synchronous tools run it on the store's private loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.envelope import SideEffectBoundary, SideEffectClass
from mycelium.ledger.errors import (
    LedgerError,
    LedgerHardBlockError,
    LedgerOutcomeAlreadySetError,
    LedgerPendingError,
    LedgerPollTimeoutError,
    LedgerSoftBlockError,
    LedgerStorageUnavailableError,
    TaskLedgerPendingError,
)
from mycelium.ledger.identity import CallIdentity
from mycelium.ledger.reconcile import ReconcileStatus, ask
from mycelium.ledger.record import Claim, ClaimRequest, Transition
from mycelium.ledger.storage import LedgerStorage

log = logging.getLogger("mycelium.ledger")

DEFAULT_LEASE_TTL = 3600.0
DEFAULT_POLL_INTERVAL = 0.05
DEFAULT_POLL_TIMEOUT = 300.0
MAX_POLL_INTERVAL = 0.5


def worker_owner() -> str:
    """This process as a lease owner. Threads share it; the fence tells their claims apart."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class ActiveTransition:
    """The transition a body is running under (what side_effect() and friends act on)."""

    ledger: ActionLedger
    request_id: str
    tool: str
    owner: str
    fence: int
    boundary: SideEffectBoundary = SideEffectBoundary.NOT_CROSSED
    ref: str | None = None

    @property
    def storage(self) -> LedgerStorage:
        return self.ledger.storage

    async def aadvance(self, boundary: SideEffectBoundary) -> None:
        if boundary.rank <= self.boundary.rank:
            return
        await self.storage.advance_boundary(self.request_id, self.owner, self.fence, boundary.value)
        self.boundary = boundary

    def advance(self, boundary: SideEffectBoundary) -> None:
        if boundary.rank <= self.boundary.rank:
            return
        self.storage.run_sync(
            self.storage.advance_boundary(self.request_id, self.owner, self.fence, boundary.value)
        )
        self.boundary = boundary

    async def arecord(self, ref: str) -> None:
        await self.storage.record_external_operation(self.request_id, self.owner, self.fence, str(ref))
        self.ref = str(ref)

    def record(self, ref: str) -> None:
        self.storage.run_sync(
            self.storage.record_external_operation(self.request_id, self.owner, self.fence, str(ref))
        )
        self.ref = str(ref)

    async def arenew(self, lease_ttl: float | None = None) -> Transition:
        return await self.storage.renew_lease(
            self.request_id, self.owner, self.fence, lease_ttl or self.ledger.lease_ttl
        )


_active: ContextVar[ActiveTransition | None] = ContextVar("mycelium_active_transition", default=None)


def active_transition() -> ActiveTransition | None:
    """The transition the current tool body runs under, if any."""
    return _active.get()


def _require_active(what: str) -> ActiveTransition | None:
    """The running transition; outside a ledgered body a UserWarning and None (the call does nothing)."""
    active = _active.get()
    if active is None:
        warnings.warn(
            f"{what}() outside a ledgered tool body does nothing (no transition to mark)",
            UserWarning,
            stacklevel=3,
        )
    return active


class ActionLedger:
    """Runs ledgered calls against one store, with one set of lease and polling settings. Without a
    store, the process's default one (``MYCELIUM_LEDGER_URL``, else memory: see ledger.stores)."""

    def __init__(
        self,
        storage: LedgerStorage | None = None,
        *,
        agent_id: str = "",
        policy_version: str = "",
        lease_ttl: float = DEFAULT_LEASE_TTL,
        lease_renew_interval: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        poll_timeout: float = DEFAULT_POLL_TIMEOUT,
        reconciler: Any = None,
        reconcile_timeout: float = 10.0,
        presumed_dead_after: float | None = None,
    ) -> None:
        if lease_ttl < 0 or (lease_renew_interval is not None and lease_renew_interval < 0):
            raise ValueError("lease_ttl and lease_renew_interval are seconds >= 0")
        if storage is None:
            from mycelium.ledger.stores import default_storage

            storage = default_storage()
        self.storage = storage
        self.agent_id = agent_id
        self.policy_version = policy_version
        self.lease_ttl = lease_ttl
        self.lease_renew_interval = lease_renew_interval
        self.poll_interval = poll_interval
        self.poll_timeout = poll_timeout
        self.reconciler = reconciler
        self.reconcile_timeout = reconcile_timeout
        self.presumed_dead_after = presumed_dead_after
        self.owner = worker_owner()
        self._renewals: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Renewals] = (
            weakref.WeakKeyDictionary()
        )

    # -- claiming ----------------------------------------------------------------------------------

    def claim_request(
        self,
        tool: str,
        binding: ToolTransitionBinding,
        ident: CallIdentity,
        *,
        reconciler: Any,
        defer: bool,
        kind: str = "tool",
    ) -> ClaimRequest:
        return ClaimRequest(
            request_id=ident.request_id,
            transition_key=ident.transition_key,
            tool=tool,
            owner=self.owner,
            side_effect_class=binding.side_effect_class.value,
            agent_id=binding.agent_id or self.agent_id,
            policy_version=binding.policy_version or self.policy_version,
            lease_ttl=self.lease_ttl,
            spendability=binding.spendability.value,
            retry_permission=binding.retry_permission.value,
            capability=binding.effective_capability(has_reconciler=reconciler is not None).value,
            kind=kind,
            scope=ident.scope,
            dispatch_id=ident.dispatch_id,
            args_hash=ident.args_hash,
            key_param=binding.provider_idempotency_key_param,
            key_ttl=binding.provider_idempotency_key_ttl,
            incoming_key=ident.provider_key,
            has_reconciler=reconciler is not None,
            defer_read_unknown=defer,
            presumed_dead_after=self.presumed_dead_after,
        )

    async def acquire(self, request: ClaimRequest, *, reconciler: Any = None, wait: bool = True) -> Claim:
        """Claim until the database answers run or return; wait, reconcile or raise on the way."""
        reconciled_at: int | None = None
        deadline: float | None = None
        interval = self.poll_interval
        while True:
            claim = await self.storage.claim(replace_reconciled(request, reconciled_at), with_row=False)
            if claim.action in ("run", "return"):
                return claim
            row = claim.transition
            if claim.action == "poll":
                if not wait:
                    pending = TaskLedgerPendingError if request.kind == "task" else LedgerPendingError
                    raise pending(
                        f"{row.tool!r} {row.request_id!r} is in flight elsewhere "
                        f"(owner {row.owner}, fence {row.fence})",
                        row.to_json(),
                    )
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + self.poll_timeout
                if now >= deadline:
                    raise LedgerPollTimeoutError(
                        f"{row.tool!r} request {row.request_id!r} stayed in flight under owner "
                        f"{row.owner} for more than {self.poll_timeout:g}s; its lease is live, "
                        "so it was left alone",
                        row.to_json(),
                    )
                await asyncio.sleep(min(interval, max(0.0, deadline - now)))
                interval = min(interval * 1.5, MAX_POLL_INTERVAL)
                reconciled_at = None
                continue
            if claim.action == "reconcile":
                answer = await ask(reconciler, row, self.reconcile_timeout)
                try:
                    settled = await self.storage.apply_reconcile_result(
                        row.request_id,
                        row.fence,
                        answer.status.value,
                        answer.result,
                        type(reconciler).__name__,
                    )
                except LedgerOutcomeAlreadySetError:
                    continue  # the row moved while we asked: gate it again
                if answer.status is ReconcileStatus.COMPLETED:
                    return Claim(claim.gate, "return", claim.repaired, settled)
                reconciled_at = row.fence if answer.status is ReconcileStatus.UNKNOWN else None
                continue
            if claim.action == "soft_block":
                raise LedgerSoftBlockError(
                    f"read-only {row.describe()}; deferred (defer_read_only_unknown=True)", row.to_json()
                )
            raise LedgerHardBlockError(hard_block_message(row), row.to_json())

    # -- running -----------------------------------------------------------------------------------

    def _renew_interval(self) -> float:
        if self.lease_ttl <= 0:
            return 0.0
        interval = self.lease_ttl / 3 if self.lease_renew_interval is None else self.lease_renew_interval
        return max(interval, 0.01) if interval > 0 else 0.0

    async def _keep_renewing(self, active: ActiveTransition) -> None:
        """Renew now, then every interval, until cancelled (the first renewal is due when it starts)."""
        interval = self._renew_interval()
        while True:
            try:
                await active.arenew()
            except LedgerStorageUnavailableError as exc:
                log.warning("lease renewal of %s failed (%s); retrying", active.request_id, exc)
            except LedgerError as exc:
                log.warning(
                    "lease renewal of %s stopped: %s (the body keeps running)", active.request_id, exc
                )
                return
            await asyncio.sleep(interval)

    async def _settle(self, active: ActiveTransition, outcome: BaseException | None, result: Any) -> None:
        """Record how the body ended. A failure is classified by the stored boundary, in the database."""
        s = self.storage
        if outcome is None:
            try:
                await s.complete(active.request_id, active.owner, active.fence, result)
            except LedgerOutcomeAlreadySetError as exc:
                log.warning(
                    "%s was resolved elsewhere (%s); this run's result is discarded from the ledger",
                    active.request_id,
                    exc,
                )
            return
        try:
            await s.fail(
                active.request_id,
                active.owner,
                active.fence,
                f"{type(outcome).__name__}: {outcome}"[:8000],
                None,
            )
        except LedgerError as exc:
            log.warning("could not record the failure of %s: %s", active.request_id, exc)

    async def run_async(
        self,
        fn: Callable[..., Awaitable[Any]],
        tool: str,
        binding: ToolTransitionBinding,
        ident: CallIdentity,
        *,
        reconciler: Any = None,
        defer: bool = False,
        kind: str = "tool",
        wait: bool = True,
    ) -> Any:
        request = self.claim_request(tool, binding, ident, reconciler=reconciler, defer=defer, kind=kind)
        claim = await self.acquire(request, reconciler=reconciler, wait=wait)
        if claim.action == "return":
            return claim.transition.result
        active = ActiveTransition(self, ident.request_id, tool, self.owner, claim.fence)
        self._keep(active)
        token = _active.set(active)
        try:
            result = await fn(*ident.body_args, **ident.body_kwargs)
        except BaseException as exc:
            await self._let_go(active, exc, None)
            raise
        finally:
            _active.reset(token)
        await self._let_go(active, None, result)
        return result

    def run_sync(
        self,
        fn: Callable[..., Any],
        tool: str,
        binding: ToolTransitionBinding,
        ident: CallIdentity,
        *,
        reconciler: Any = None,
        defer: bool = False,
        kind: str = "tool",
        wait: bool = True,
    ) -> Any:
        s = self.storage
        request = self.claim_request(tool, binding, ident, reconciler=reconciler, defer=defer, kind=kind)
        # two trips to the store's loop per call: claim (and start keeping the lease), then let go
        started = s.submit_sync(self._claim_and_keep(request, tool, reconciler, wait))
        try:
            claim, active = started.result()
        except BaseException as exc:
            # Interrupted while waiting (Ctrl-C): the claim goes on on the store's loop; if it ends
            # holding the lease, let go of it as a failure before the body ran, never renew it on.
            started.add_done_callback(partial(self._abandon, exc))
            raise
        if active is None:
            return claim.transition.result
        token = _active.set(active)
        try:
            result = fn(*ident.body_args, **ident.body_kwargs)
        except BaseException as exc:
            s.run_sync(self._let_go(active, exc, None))
            raise
        finally:
            _active.reset(token)
        s.run_sync(self._let_go(active, None, result))
        return result

    def _abandon(self, exc: BaseException, started: Future[tuple[Claim, ActiveTransition | None]]) -> None:
        """Let go of a claim whose synchronous caller stopped waiting for it (see run_sync)."""
        if started.cancelled() or started.exception() is not None:
            return
        _claim, active = started.result()
        if active is not None:
            self.storage.submit_sync(self._let_go(active, exc, None))

    async def _claim_and_keep(
        self, request: ClaimRequest, tool: str, reconciler: Any, wait: bool
    ) -> tuple[Claim, ActiveTransition | None]:
        claim = await self.acquire(request, reconciler=reconciler, wait=wait)
        if claim.action == "return":
            return claim, None
        active = ActiveTransition(self, request.request_id, tool, self.owner, claim.fence)
        self._keep(active)
        return claim, active

    def _keep(self, active: ActiveTransition) -> None:
        """Renew the lease of this body from one interval on (on the running loop) until _let_go."""
        interval = self._renew_interval()
        if interval:
            loop = asyncio.get_running_loop()
            renewals = self._renewals.get(loop)
            if renewals is None:
                renewals = self._renewals[loop] = _Renewals(self)
            renewals.add(active, interval)

    async def _let_go(self, active: ActiveTransition, outcome: BaseException | None, result: Any) -> None:
        """Stop renewing the body's lease, then record how it ended."""
        renewals = self._renewals.get(asyncio.get_running_loop())
        if renewals is not None:
            renewals.stop(active)
        await self._settle(active, outcome, result)


class _Renewals:
    """Keeps the leases of one ledger's running bodies on one event loop. A body is renewed from one
    interval after its start; nearly every body ends before that, so a body costs an entry in a dict
    and no timer or task of its own: one timer, set for the earliest renewal due, serves them all (a
    timer per call, even cancelled, stays in the loop's heap and is paid for by every later timer)."""

    def __init__(self, ledger: ActionLedger) -> None:
        self._ledger = ledger  # not the loop: it is this object's key in a weak mapping
        self._due: dict[int, tuple[float, ActiveTransition]] = {}
        self._renewing: dict[int, asyncio.Task[None]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, active: ActiveTransition, interval: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + interval
        self._due[id(active)] = (due, active)
        if self._timer is None or self._timer.when() > due:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(due, self._fire)

    def stop(self, active: ActiveTransition) -> None:
        if self._due.pop(id(active), None) is None:
            task = self._renewing.pop(id(active), None)
            if task is not None:
                task.cancel()

    def _fire(self) -> None:
        """Start renewing every body whose first renewal is due; set the timer for the next one."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now, later = loop.time(), None
        for key, (due, active) in list(self._due.items()):
            if due > now:
                later = due if later is None else min(later, due)
                continue
            del self._due[key]
            self._renewing[key] = loop.create_task(self._ledger._keep_renewing(active))
        if later is not None:
            self._timer = loop.call_at(later, self._fire)


def replace_reconciled(request: ClaimRequest, fence: int | None) -> ClaimRequest:
    """The request, telling the database whether the reconciler already answered UNKNOWN."""
    return (
        request
        if request.reconciled == (fence is not None)
        else replace(request, reconciled=fence is not None)
    )


def hard_block_message(row: Transition) -> str:
    kind = "Read-only" if row.side_effect_class == SideEffectClass.READ.value else "Side-effecting"
    text = f"{kind} {row.describe()}"
    if row.error:
        text += f": {row.error}"
    return text + "; manual reconciliation required (reconcile it, or `mycelium transitions release`)"


# -- what a body calls ---------------------------------------------------------------------------


class side_effect:
    """Mark the external call: ``maybe_crossed`` durably before it, ``crossed`` after a clean exit.

    A crash inside leaves the row ambiguous, so a redispatch hard-blocks instead of spending twice.
    Use ``async with side_effect():`` in async tools to keep the event loop free (``with`` works too).
    Outside a ledgered body it warns and marks nothing.
    """

    def __enter__(self) -> side_effect:
        self._active = _require_active("side_effect")
        if self._active is not None:
            self._active.advance(SideEffectBoundary.MAYBE_CROSSED)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self._active is not None:
            self._active.advance(SideEffectBoundary.CROSSED)

    async def __aenter__(self) -> side_effect:
        self._active = _require_active("side_effect")
        if self._active is not None:
            await self._active.aadvance(SideEffectBoundary.MAYBE_CROSSED)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self._active is not None:
            await self._active.aadvance(SideEffectBoundary.CROSSED)


def mark_maybe_crossed() -> None:
    """The external call may start now (written before it; a crash from here on is ambiguous)."""
    active = _require_active("mark_maybe_crossed")
    if active is not None:
        active.advance(SideEffectBoundary.MAYBE_CROSSED)


def mark_crossed() -> None:
    """The external effect has happened: a failure from here on is FAILED_AFTER_EFFECT."""
    active = _require_active("mark_crossed")
    if active is not None:
        active.advance(SideEffectBoundary.CROSSED)


def record_external_operation(ref: str) -> None:
    """Record the provider's handle (its id, or the idempotency key sent) on the transition."""
    active = _require_active("record_external_operation")
    if active is not None:
        active.record(ref)


async def arecord_external_operation(ref: str) -> None:
    active = _require_active("record_external_operation")
    if active is not None:
        await active.arecord(ref)


def renew_lease(lease_ttl: float | None = None) -> Transition | None:
    """Extend the running transition's lease now; outside a ledgered body it warns and does nothing."""
    active = _require_active("renew_lease")
    if active is None:
        return None
    return active.storage.run_sync(active.arenew(lease_ttl))
