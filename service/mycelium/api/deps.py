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
from mycelium.errors import Refusal
from mycelium.hub import Hub
from mycelium.verbs import Actor, Verbs

# the largest offset a page may start at (a larger one is refused naming the parameter, before the
# database would refuse it as an out-of-range argument)
MAX_OFFSET = 2**31 - 1

HubDep: TypeAlias = NamedDependency[Hub]
VerbsDep: TypeAlias = NamedDependency[Verbs]


def Query(**constraints: Any) -> Any:
    """A query parameter with constraints: ``limit: Annotated[int, Query(ge=1)] = 10``."""
    return QueryParameter(**constraints)


# where a page starts: ``offset: Offset = 0``
Offset: TypeAlias = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


async def provide_hub(state: State) -> Hub:
    hub: Hub = state.hub
    return hub


def room_spelled(refusal: Refusal, room: Any) -> str | None:
    """The stored spelling of ``room`` when ``refusal`` says the room exists spelled otherwise (case,
    Unicode form: mycelium.require_room names it), else None."""
    spelled = refusal.extra.get("spelled")
    if refusal.error != "room_not_found" or not isinstance(spelled, str) or refusal.extra.get("room") != room:
        return None
    return spelled if spelled != room else None


class RoomVerbs(Verbs):
    """The gateway as routes see it: a room named in another spelling of its name is the room. The
    database refuses the call naming the stored spelling, and the call is made again with it (a
    refused call wrote nothing), so a route naming the room as it is stored pays nothing."""

    __slots__ = ()

    async def call(self, actor: Actor, verb: str, /, **params: Any) -> Any:
        try:
            return await super().call(actor, verb, **params)
        except Refusal as refusal:
            spelled = room_spelled(refusal, params.get("room"))
            if spelled is None:
                raise
        return await super().call(actor, verb, **{**params, "room": spelled})


async def provide_verbs(state: State, request: Request[Any, Any, Any]) -> Verbs:
    """The gateway, carrying the principal the token gate verified for this request (if it is on)."""
    hub: Hub = state.hub
    listener = hub.listener
    return RoomVerbs(hub.db, listener.hint if listener is not None else None, principal_in(request.scope))


VERBS: dict[str, Provide] = {"verbs": Provide(provide_verbs)}

__all__ = ["MAX_OFFSET", "VERBS", "Annotated", "HubDep", "Offset", "Query", "RoomVerbs", "VerbsDep",
           "provide_hub", "provide_verbs", "room_spelled"]
