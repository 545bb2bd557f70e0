"""Who a call is: its request id (the ledger's row) and its transition key (what the call means).

The key hashes scope + tool + canonical arguments + class + agent + policy (+ the dispatch id when the
framework gave one). Arguments are bound to the function's signature first, so ``charge(10)``,
``charge(amount=10)`` and ``charge(amount=10.0)`` are one call; mutable resolution metadata (lease,
owner, fence) and the provider idempotency key never enter it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.errors import MissingRequestIdentityError

KEY_SCHEMA = "mycelium-hub.transition/v1"

# Bookkeeping keyword arguments: read by the ledger, never passed to the tool body.
LEDGER_KWARG_KEYS = frozenset(
    {
        "request_id",
        "tool_call_id",
        "thread_id",
        "run_id",
        "node",
        "state_ref",
        "decision_id",
        "parent_request_id",
        "handoff_id",
    }
)
SCOPE_FIELDS = ("thread_id", "run_id", "node")

_scope: ContextVar[dict[str, str] | None] = ContextVar("mycelium_execution_scope", default=None)


@contextlib.contextmanager
def execution_scope(*, thread_id: str = "", run_id: str = "", node: str = "") -> Iterator[None]:
    """Calls made inside share this scope (it enters their transition keys)."""
    outer = _scope.get() or {}
    inner = {
        **outer,
        **{k: v for k, v in (("thread_id", thread_id), ("run_id", run_id), ("node", node)) if v},
    }
    token = _scope.set(inner)
    try:
        yield
    finally:
        _scope.reset(token)


def canonical(value: Any) -> Any:
    """A JSON-ready, spelling-independent form: 10.0 → 10, tuples → lists, sets sorted, keys as text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            return int(value)
        return repr(value) if not math.isfinite(value) else value
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [canonical(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if hasattr(value, "model_dump"):
        return canonical(value.model_dump())
    return str(value)


# One encoder for every call (json.dumps with options builds a new one each time); same bytes.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CallIdentity:
    request_id: str
    transition_key: str
    args_hash: str
    scope: dict[str, str]
    dispatch_id: str | None
    provider_key: str | None
    body_args: tuple[Any, ...]
    body_kwargs: dict[str, Any]


@functools.lru_cache(maxsize=1024)
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


@functools.lru_cache(maxsize=1024)
def _plain_parameters(fn: Callable[..., Any]) -> tuple[tuple[str, Any], ...] | None:
    """Each parameter's name and default when all are plain (positional or keyword; no ``*args``,
    ``**kwargs``, keyword-only or positional-only ones): the usual tool, bound without inspect."""
    try:
        params = _signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return None
    return tuple((p.name, p.default) for p in params)


def bound_arguments(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults applied (positional and keyword spellings agree)."""
    plain = _plain_parameters(fn)
    if plain is not None and len(args) <= len(plain):
        out = {name: value for (name, _), value in zip(plain, args, strict=False)}
        taken = 0
        for name, default in plain[len(args):]:
            if name in kwargs:
                out[name] = kwargs[name]
                taken += 1
            elif default is not inspect.Parameter.empty:
                out[name] = default
            else:
                break  # a required argument is missing: inspect's answer below
        else:
            if taken == len(kwargs):  # no unknown keyword, none given twice
                return out
    try:
        bound = _signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {"args": list(args), "kwargs": dict(kwargs)}
    bound.apply_defaults()
    return dict(bound.arguments)


def identify(
    fn: Callable[..., Any],
    tool: str,
    binding: ToolTransitionBinding,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> CallIdentity:
    """Split bookkeeping kwargs off a call and derive its request id and transition key."""
    meta = {k: kwargs[k] for k in kwargs if k in LEDGER_KWARG_KEYS}
    body_kwargs = {k: v for k, v in kwargs.items() if k not in LEDGER_KWARG_KEYS}

    scope = {f: "" for f in SCOPE_FIELDS}
    scope.update(_scope.get() or {})
    arguments = bound_arguments(fn, args, body_kwargs)
    for kwarg, field in binding.scope_from.items():
        if arguments.get(kwarg) not in (None, ""):
            scope[field] = str(arguments[kwarg])
    for field in SCOPE_FIELDS:
        if meta.get(field):
            scope[field] = str(meta[field])

    provider_key = None
    fingerprinted = dict(arguments)
    if binding.provider_idempotency_key_param:
        raw = fingerprinted.pop(binding.provider_idempotency_key_param, None)
        provider_key = None if raw in (None, "") else str(raw)

    explicit = meta.get("request_id")
    if explicit is not None and (not isinstance(explicit, str) or not explicit.strip()):
        raise ValueError("request_id must be a non-empty string")
    dispatch_id = meta.get("tool_call_id") or explicit or None

    args_hash = sha256_hex(canonical_json(canonical(fingerprinted)))
    preimage: dict[str, Any] = {
        "schema": KEY_SCHEMA,
        "scope": scope,
        "tool": tool,
        "args_fingerprint": args_hash,
        "side_effect_class": binding.side_effect_class.value,
        "agent_id": binding.agent_id,
        "policy_version": binding.policy_version,
    }
    if dispatch_id:
        preimage["dispatch_id"] = str(dispatch_id)
    transition_key = sha256_hex(canonical_json(preimage))

    if explicit is not None:
        request_id = explicit
    elif binding.request_id_from:
        value = arguments.get(binding.request_id_from)
        if value is None or str(value).strip() == "":
            raise MissingRequestIdentityError(
                f"{tool}: request_id_from={binding.request_id_from!r} but the call carries no such value"
            )
        request_id = f"{tool}:{binding.request_id_from}:{str(value).strip()}"
    else:
        request_id = transition_key
    return CallIdentity(
        request_id,
        transition_key,
        args_hash,
        scope,
        str(dispatch_id) if dispatch_id else None,
        provider_key,
        tuple(args),
        body_kwargs,
    )
