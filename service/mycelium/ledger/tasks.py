"""``@task_ledger`` / ``@task_ledger_sync``: a framework retry of a whole task returns its result.

A task is a transition of kind ``task`` under a lease, gated like a tool: completed → the stored
result; running elsewhere under a live lease → ``TaskLedgerPendingError`` (or wait, ``wait=True``);
failed, or crashed and expired → run again (the default class is idempotent_mutate: the tools inside
a task have their own ledger). Completion and failure are fenced, so a stale worker cannot overwrite
the result of the one that took over.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.decorators import LEDGER_ATTR, _Resolver
from mycelium.ledger.envelope import SideEffectClass
from mycelium.ledger.identity import (
    KEY_SCHEMA,
    CallIdentity,
    bound_arguments,
    canonical,
    canonical_json,
    sha256_hex,
)

TASK_KWARGS = ("task_id", "run_id")


def task_request_id(
    task: str, arguments: dict[str, Any], task_id: Any, run_id: Any, id_from: Sequence[str] | None
) -> str:
    """task_id verbatim > ``task:run_id`` > ``task:f1=v1:f2=v2`` from id_from > ``task:<hash of args>``."""
    if task_id is not None:
        if not isinstance(task_id, str) or not task_id.strip():
            raise ValueError("task_id must be a non-empty string")
        return task_id
    if run_id:
        return f"{task}:{run_id}"
    if id_from:
        present = [(f, arguments[f]) for f in id_from if arguments.get(f) is not None]
        if present:
            return task + ":" + ":".join(f"{f}={v}" for f, v in present)
    return f"{task}:{sha256_hex(canonical_json(canonical(arguments)))}"


def task_identity(
    fn: Callable[..., Any],
    task: str,
    binding: ToolTransitionBinding,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    id_from: Sequence[str] | None,
) -> CallIdentity:
    task_id, run_id = kwargs.get("task_id"), kwargs.get("run_id")
    body_kwargs = {k: v for k, v in kwargs.items() if k not in TASK_KWARGS}
    arguments = bound_arguments(fn, args, body_kwargs)
    request_id = task_request_id(task, arguments, task_id, run_id, id_from)
    key = sha256_hex(
        canonical_json(
            {
                "schema": KEY_SCHEMA,
                "task": task,
                "request_id": request_id,
                "agent_id": binding.agent_id,
                "policy_version": binding.policy_version,
            }
        )
    )
    return CallIdentity(
        request_id,
        key,
        sha256_hex(canonical_json(canonical(arguments))),
        {},
        None,
        None,
        tuple(args),
        body_kwargs,
    )


def _task_decorator(is_async: bool, fn: Callable[..., Any] | None, options: dict[str, Any]) -> Any:
    id_from = options.pop("id_from", None)
    wait = bool(options.pop("wait", False))
    cls = SideEffectClass.parse(options.pop("side_effect_class", SideEffectClass.IDEMPOTENT_MUTATE))
    binding = options.pop("transition_binding", None) or ToolTransitionBinding.for_tool(side_effect_class=cls)
    resolve = _Resolver(
        options.pop("action_ledger", None),
        options.pop("storage", None),
        {
            k: options.pop(k)
            for k in list(options)
            if k in {"lease_ttl", "lease_renew_interval", "poll_interval", "poll_timeout"}
        },
    )
    if options:
        raise TypeError(f"unexpected task ledger option(s): {', '.join(sorted(options))}")

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        task = f.__name__
        if is_async != inspect.iscoroutinefunction(f):
            raise TypeError(f"{task}: use @task_ledger for async functions and @task_ledger_sync otherwise")

        if is_async:

            @functools.wraps(f)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                led = resolve()
                b = binding.with_agent(led.agent_id, led.policy_version)
                ident = task_identity(f, task, b, args, kwargs, id_from)
                return await led.run_async(f, task, b, ident, kind="task", wait=wait)

            setattr(run_async, LEDGER_ATTR, resolve)
            return run_async

        @functools.wraps(f)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            led = resolve()
            b = binding.with_agent(led.agent_id, led.policy_version)
            ident = task_identity(f, task, b, args, kwargs, id_from)
            return led.run_sync(f, task, b, ident, kind="task", wait=wait)

        setattr(run_sync, LEDGER_ATTR, resolve)
        return run_sync

    return decorate(fn) if fn is not None else decorate


def task_ledger(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Ledger an async task. Options: ``id_from=[…]``, ``wait``, ``side_effect_class``, ``storage``,
    ``action_ledger``, ``lease_ttl``, ``lease_renew_interval``, ``poll_interval``, ``poll_timeout``."""
    return _task_decorator(True, fn, options)


def task_ledger_sync(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Ledger a synchronous task (same options as :func:`task_ledger`)."""
    return _task_decorator(False, fn, options)
