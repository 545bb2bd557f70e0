"""``ToolRegistry``: the tools this agent may call, checked before dispatch."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from mycelium.guards.boundary import ToolBoundaryError

F = TypeVar("F", bound=Callable[..., Any])


class ToolRegistry:
    """An allow-list of tool names: ``ToolRegistry(allowed=[...])`` and/or ``@registry.register``."""

    def __init__(self, allowed: Iterable[str] | None = None) -> None:
        if isinstance(allowed, str):
            raise TypeError("allowed is a list of tool names, not one string")
        self._allowed: set[str] = {str(name) for name in allowed or ()}

    @property
    def allowed_tools(self) -> frozenset[str]:
        return frozenset(self._allowed)

    def allow(self, tool_name: str) -> None:
        self._allowed.add(tool_name)

    def register(self, fn: F) -> F:
        """Allow a tool by its function name; returns the function unchanged."""
        self._allowed.add(fn.__name__)
        return fn

    def __contains__(self, tool_name: object) -> bool:
        return tool_name in self._allowed

    def validate_call(self, tool_name: str) -> None:
        """Raise :class:`ToolBoundaryError` (``not_in_allowlist``) for a tool not allowed."""
        if tool_name in self._allowed:
            return
        if self._allowed:
            listed = ", ".join(sorted(self._allowed))
            hint = f"Use one of the allowed tools: {listed}."
        else:
            listed = "(none configured)"
            hint = "Register the allowed tools on the ToolRegistry before dispatch."
        raise ToolBoundaryError(
            f"{tool_name}: not_in_allowlist",
            violation="not_in_allowlist",
            tool_name=tool_name,
            llm_message=(
                f"Tool {tool_name!r} is not available for this agent. Allowed tools: {listed}. {hint}"
            ),
            recovery_hint=hint,
        )
