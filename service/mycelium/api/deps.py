"""Shared dependencies and parameter markers for route modules.

Routes declare every input explicitly (Litestar's inferred styles are deprecated):
``hub: HubDep``, ``room: FromPath[str]``, ``data: JSONBody[Model]``, ``limit: Query(…)``.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from mycelium.hub import Hub

HubDep: TypeAlias = NamedDependency[Hub]


def Query(**constraints: Any) -> Any:
    """A query parameter with constraints: ``limit: Annotated[int, Query(ge=1)] = 10``."""
    return QueryParameter(**constraints)


async def provide_hub(state: State) -> Hub:
    hub: Hub = state.hub
    return hub


__all__ = ["Annotated", "HubDep", "Query", "provide_hub"]
