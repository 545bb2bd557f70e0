"""LangGraph: a redispatched tool call keeps its identity with no change to the tool.

``instrument_langgraph_tool(fn)`` returns a wrapper whose signature adds a hidden keyword-only
``runtime: ToolRuntime`` parameter. LangGraph's ``ToolNode`` (and ``create_agent``) treat that
parameter as injected — the model never sees it — and pass the call's runtime; the wrapper removes
it and maps it into the transition key: ``tool_call_id`` becomes the dispatch id (passed to a
ledgered tool as ``tool_call_id``), and the thread (``execution_info.thread_id``, else
``configurable.thread_id``), the platform's run id and the node (``metadata.langgraph_node``) become
the execution scope. Ids the caller passes explicitly win. Called without a runtime (outside
LangGraph), the tool runs as before.

Without LangGraph installed nothing can inject a runtime, so the tool is returned unchanged.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from mycelium.ledger.decorators import LEDGER_ATTR
from mycelium.ledger.identity import execution_scope

F = TypeVar("F", bound=Callable[..., Any])
MARK = "_mycelium_langgraph_integration"
_EXPLICIT = ("request_id", "tool_call_id")


class LangGraphIntegrationError(RuntimeError):
    """The integration cannot be applied to this function."""


def available() -> bool:
    return importlib.util.find_spec("langgraph") is not None


def runtime_identity(runtime: Any) -> tuple[str | None, dict[str, str]]:
    """(tool_call_id, {thread_id, run_id, node}) from a LangGraph ``ToolRuntime``."""
    config = getattr(runtime, "config", None)
    config = config if isinstance(config, dict) else {}
    configurable = config.get("configurable") if isinstance(config.get("configurable"), dict) else {}
    metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None) or configurable.get("thread_id") or metadata.get("thread_id")
    run = getattr(info, "run_id", None) or configurable.get("run_id")
    node = metadata.get("langgraph_node")
    call_id = getattr(runtime, "tool_call_id", None)
    scope = {"thread_id": str(thread or ""), "run_id": str(run or ""), "node": str(node or "")}
    return (str(call_id) if call_id else None), scope


def _signature(fn: Callable[..., Any], runtime_type: type) -> tuple[inspect.Signature, dict[str, Any]]:
    sig = inspect.signature(fn)
    if "runtime" in sig.parameters:
        raise LangGraphIntegrationError(
            f"tool {fn.__name__!r} already has a 'runtime' parameter; the LangGraph integration adds "
            "its own under that name (turn integrations.langgraph off for it, or rename the parameter)"
        )
    hidden = inspect.Parameter("runtime", inspect.Parameter.KEYWORD_ONLY, annotation=runtime_type)
    params = list(sig.parameters.values())
    at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    params.insert(at, hidden)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable string annotations: keep them as written
        hints = dict(getattr(fn, "__annotations__", {}))
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) if p.name != "runtime" else p
              for p in params]
    return sig.replace(parameters=params), {**hints, "runtime": runtime_type}


def instrument_langgraph_tool(fn: F) -> F:
    """Add the hidden ``runtime`` parameter and map it into the call's identity (see the module)."""
    if getattr(fn, MARK, False) or not available():
        return fn
    from langgraph.prebuilt import ToolRuntime

    signature, annotations = _signature(fn, ToolRuntime)
    ledgered = bool(getattr(fn, LEDGER_ATTR, False))

    def identity(kwargs: dict[str, Any]) -> dict[str, str] | None:
        runtime = kwargs.pop("runtime", None)
        if runtime is None:
            return None
        call_id, scope = runtime_identity(runtime)
        if ledgered and call_id and not any(kwargs.get(k) for k in _EXPLICIT):
            kwargs["tool_call_id"] = call_id
        return scope

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            scope = identity(kwargs)
            if scope is None:
                return await fn(*args, **kwargs)
            with execution_scope(**scope):
                return await fn(*args, **kwargs)

    else:

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            scope = identity(kwargs)
            if scope is None:
                return fn(*args, **kwargs)
            with execution_scope(**scope):
                return fn(*args, **kwargs)

    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    wrapper.__annotations__ = annotations
    setattr(wrapper, MARK, True)
    return wrapper  # type: ignore[return-value]
