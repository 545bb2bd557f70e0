"""Shared dependencies and parameter markers for route modules.

Routes declare every input explicitly (Litestar's inferred styles are deprecated):
``verbs: VerbsDep``, ``room: FromPath[str]``, ``data: JSONBody[Model]``, ``limit: Query(…)``. A route
reaches the database only through the verb gateway (``verbs``); a controller or route that uses it
declares ``dependencies=VERBS``. ``hub`` is there for what is not the database (the embedder, the
settings).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.params import QueryParameter

from mycelium.auth.middleware import principal_in
from mycelium.hub import Hub
from mycelium.verbs import Verbs, verbs_of

HubDep: TypeAlias = NamedDependency[Hub]
VerbsDep: TypeAlias = NamedDependency[Verbs]


def Query(**constraints: Any) -> Any:
    """A query parameter with constraints: ``limit: Annotated[int, Query(ge=1)] = 10``."""
    return QueryParameter(**constraints)


async def provide_hub(state: State) -> Hub:
    hub: Hub = state.hub
    return hub


async def provide_verbs(state: State, request: Request[Any, Any, Any]) -> Verbs:
    """The gateway, carrying the principal the token gate verified for this request (if it is on)."""
    return verbs_of(state.hub, principal_in(request.scope))


VERBS: dict[str, Provide] = {"verbs": Provide(provide_verbs)}

__all__ = ["VERBS", "Annotated", "HubDep", "Query", "VerbsDep", "provide_hub", "provide_verbs"]
