"""``@ledger`` / ``@ledger_sync``: wrap a tool so each logical call's side effect happens once."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.envelope import SideEffectClass
from mycelium.ledger.identity import identify
from mycelium.ledger.ledger import ActionLedger
from mycelium.ledger.storage import LedgerStorage
from mycelium.ledger.stores import shared_ledger

F = TypeVar("F", bound=Callable[..., Any])

# A tool with no transition binding keeps the v1.2 contract: a duplicate while the first call is in
# flight raises LedgerPendingError at once (no waiting), a call that failed before any side-effect mark
# runs again, a completed one returns its result. A body that marked its side effect and then failed,
# or whose lease lapsed past the mark, is still hard-blocked (never run twice blind).
UNCLASSIFIED = ToolTransitionBinding.for_tool(side_effect_class=SideEffectClass.IDEMPOTENT_MUTATE)

#: set on a ledgered function: what finds its ActionLedger (get_ledger)
LEDGER_ATTR = "__mycelium_ledger__"


class _Resolver:
    """Finds the ActionLedger a wrapped tool uses, at its first call (so importing stays cheap)."""

    def __init__(
        self, action_ledger: ActionLedger | None, storage: LedgerStorage | None, overrides: dict[str, Any]
    ) -> None:
        self._given = action_ledger
        self._storage = storage
        self._overrides = {k: v for k, v in overrides.items() if v is not None}
        self._made: ActionLedger | None = None

    def __call__(self) -> ActionLedger:
        if self._given is not None:
            return self._given
        if self._made is None:
            base = shared_ledger() if self._storage is None else None
            storage = self._storage or (base.storage if base else None)
            assert storage is not None
            if self._overrides or self._storage is not None:
                settings = {"agent_id": "", "policy_version": ""}
                if base is not None:
                    settings = {"agent_id": base.agent_id, "policy_version": base.policy_version}
                self._made = ActionLedger(storage, **{**settings, **self._overrides})
            else:
                assert base is not None
                self._made = base
        return self._made


def _wrap(
    fn: Callable[..., Any],
    *,
    is_async: bool,
    binding: ToolTransitionBinding | None,
    reconciler: Any,
    defer: bool,
    resolve: _Resolver,
    kind: str = "tool",
) -> Callable[..., Any]:
    tool = fn.__name__
    chosen = binding or UNCLASSIFIED
    wait = binding is not None
    filled: dict[tuple[str, str], ToolTransitionBinding] = {}

    def bound_for(led: ActionLedger) -> ToolTransitionBinding:
        """The binding with the ledger's agent and policy (made once per pair, not per call)."""
        pair = (led.agent_id, led.policy_version)
        b = filled.get(pair)
        if b is None:
            b = filled[pair] = chosen.with_agent(*pair)
        return b

    if is_async:

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            led = resolve()
            b = bound_for(led)
            ident = identify(fn, tool, b, args, kwargs)
            return await led.run_async(
                fn, tool, b, ident, reconciler=reconciler or led.reconciler, defer=defer, kind=kind, wait=wait
            )

        setattr(run_async, LEDGER_ATTR, resolve)
        return run_async

    @functools.wraps(fn)
    def run_sync(*args: Any, **kwargs: Any) -> Any:
        led = resolve()
        b = bound_for(led)
        ident = identify(fn, tool, b, args, kwargs)
        return led.run_sync(
            fn, tool, b, ident, reconciler=reconciler or led.reconciler, defer=defer, kind=kind, wait=wait
        )

    setattr(run_sync, LEDGER_ATTR, resolve)
    return run_sync


def _decorator(is_async: bool, fn: Callable[..., Any] | None, kwargs: dict[str, Any]) -> Any:
    binding = kwargs.pop("transition_binding", None)
    reconciler = kwargs.pop("reconciler", None)
    defer = bool(kwargs.pop("defer_read_only_unknown", False))
    storage = kwargs.pop("storage", None)
    action_ledger = kwargs.pop("action_ledger", None)
    allowed = {
        "lease_ttl",
        "lease_renew_interval",
        "poll_interval",
        "poll_timeout",
        "presumed_dead_after",
        "reconcile_timeout",
    }
    unknown = set(kwargs) - allowed
    if unknown:
        raise TypeError(f"unexpected ledger option(s): {', '.join(sorted(unknown))}")
    resolve = _Resolver(action_ledger, storage, kwargs)

    def decorate(f: F) -> F:
        if is_async and not inspect.iscoroutinefunction(f):
            raise TypeError(f"@ledger wraps async functions; use @ledger_sync for {f.__name__}")
        if not is_async and inspect.iscoroutinefunction(f):
            raise TypeError(f"@ledger_sync wraps plain functions; use @ledger for async {f.__name__}")
        return _wrap(
            f, is_async=is_async, binding=binding, reconciler=reconciler, defer=defer, resolve=resolve
        )  # type: ignore[return-value]

    return decorate(fn) if fn is not None else decorate


def get_ledger(fn: Callable[..., Any]) -> ActionLedger | None:
    """The ActionLedger a ``@ledger`` / ``@task_ledger`` function (or its sync twin) records on (the
    process's shared one unless the decorator named a ledger or storage); None for any other function."""
    resolve = getattr(fn, LEDGER_ATTR, None)
    return resolve() if isinstance(resolve, _Resolver) else None


def ledger(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Ledger an async tool: ``@ledger()`` or ``@ledger(transition_binding=…, reconciler=…)``.

    Options: ``storage`` or ``action_ledger``, ``transition_binding``, ``reconciler``,
    ``defer_read_only_unknown``, ``lease_ttl``, ``lease_renew_interval`` (0 disables auto-renew),
    ``poll_interval``, ``poll_timeout``, ``presumed_dead_after``, ``reconcile_timeout``.
    """
    return _decorator(True, fn, options)


def ledger_sync(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Ledger a synchronous tool (same options as :func:`ledger`)."""
    return _decorator(False, fn, options)
