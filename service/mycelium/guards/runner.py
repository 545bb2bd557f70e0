"""``ToolRunner``: run ``@bounded`` tools with the allow-list and the retry rules.

* An input, allow-list or scope failure is the model's to fix: ``run_with_llm_retry`` appends the
  error as the tool's result, asks the model again (``invoke_llm``) and reads the new arguments
  (``parse_tool_kwargs``), up to ``max_llm_retries`` times.
* An output failure is the tool's: it is called again, up to ``max_tool_retries`` attempts in all;
  when they all fail, the model is asked as above.
* When the retries are used up, :class:`ToolBoundaryExhaustedError` carries the last error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from mycelium.guards.boundary import (
    OUTPUT_VIOLATION,
    ToolBoundaryError,
    ToolBoundaryExhaustedError,
    tool_error_message,
)
from mycelium.guards.registry import ToolRegistry


def _latest_call_id(messages: list[Any], tool: str, fallback: str) -> str:
    """The id of the model's most recent call to ``tool`` (the next error answers that call)."""
    for msg in reversed(messages):
        calls = msg.get("tool_calls") if isinstance(msg, dict) else getattr(msg, "tool_calls", None)
        for tc in reversed(calls or []):
            name = tc.get("name") if isinstance(tc, dict) else getattr(tc, "name", None)
            if name is None and isinstance(tc, dict):
                name = (tc.get("function") or {}).get("name")
            ident = tc.get("id") if isinstance(tc, dict) else getattr(tc, "id", None)
            if name == tool and ident:
                return str(ident)
        if calls:
            break
    return fallback


def _extend(messages: list[Any], reply: Any) -> list[Any]:
    """The model's answer: a whole new message list, or one message to append."""
    if isinstance(reply, list):
        return list(reply)
    return [*messages, reply]


class ToolRunner:
    def __init__(self, registry: ToolRegistry | None = None, *, max_llm_retries: int = 2,
                 max_tool_retries: int = 3) -> None:
        if max_llm_retries < 0 or max_tool_retries < 1:
            raise ValueError("max_llm_retries must be >= 0 and max_tool_retries >= 1")
        self._registry = registry
        self._max_llm_retries = max_llm_retries
        self._max_tool_retries = max_tool_retries

    def _allowed(self, fn: Callable[..., Any]) -> None:
        if self._registry is not None:
            self._registry.validate_call(fn.__name__)

    async def call(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """The allow-list, then the tool, called again on an output failure (async or sync tools)."""
        self._allowed(func)
        for attempt in range(1, self._max_tool_retries + 1):
            try:
                result = func(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result
            except ToolBoundaryError as exc:
                if exc.violation != OUTPUT_VIOLATION or attempt == self._max_tool_retries:
                    raise
        raise AssertionError("unreachable")

    def call_sync(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`call` for synchronous tools."""
        self._allowed(func)
        for attempt in range(1, self._max_tool_retries + 1):
            try:
                return func(*args, **kwargs)
            except ToolBoundaryError as exc:
                if exc.violation != OUTPUT_VIOLATION or attempt == self._max_tool_retries:
                    raise
        raise AssertionError("unreachable")

    async def run_with_llm_retry(
        self,
        func: Callable[..., Any],
        /,
        *,
        messages: list[Any],
        tool_call_id: str,
        kwargs: dict[str, Any],
        invoke_llm: Callable[[list[Any]], Any],
        parse_tool_kwargs: Callable[[list[Any], str], dict[str, Any]],
    ) -> tuple[Any, list[Any]]:
        """(result, messages): the messages include each refused call's error and the model's replies."""
        current, args, call_id = list(messages), dict(kwargs), tool_call_id
        for llm_attempt in range(self._max_llm_retries + 1):
            try:
                return await self.call(func, **args), current
            except ToolBoundaryError as exc:
                last = exc
                current.append(tool_error_message(call_id, exc.llm_message))
                if llm_attempt == self._max_llm_retries:
                    break
                reply = invoke_llm(current)
                current = _extend(current, await reply if inspect.isawaitable(reply) else reply)
                args = parse_tool_kwargs(current, func.__name__)
                call_id = _latest_call_id(current, func.__name__, call_id)
        raise ToolBoundaryExhaustedError(
            f"tool {func.__name__!r} still failed after {self._max_llm_retries} LLM retries: {last}",
            last_error=last,
        ) from last

    def run_with_llm_retry_sync(
        self,
        func: Callable[..., Any],
        /,
        *,
        messages: list[Any],
        tool_call_id: str,
        kwargs: dict[str, Any],
        invoke_llm: Callable[[list[Any]], Any],
        parse_tool_kwargs: Callable[[list[Any], str], dict[str, Any]],
    ) -> tuple[Any, list[Any]]:
        """:meth:`run_with_llm_retry` for synchronous tools and models."""
        current, args, call_id = list(messages), dict(kwargs), tool_call_id
        for llm_attempt in range(self._max_llm_retries + 1):
            try:
                return self.call_sync(func, **args), current
            except ToolBoundaryError as exc:
                last = exc
                current.append(tool_error_message(call_id, exc.llm_message))
                if llm_attempt == self._max_llm_retries:
                    break
                current = _extend(current, invoke_llm(current))
                args = parse_tool_kwargs(current, func.__name__)
                call_id = _latest_call_id(current, func.__name__, call_id)
        raise ToolBoundaryExhaustedError(
            f"tool {func.__name__!r} still failed after {self._max_llm_retries} LLM retries: {last}",
            last_error=last,
        ) from last
