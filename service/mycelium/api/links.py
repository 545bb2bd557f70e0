"""Links: one memory's links both ways, the room's link graph, its integrity, and transclusion.

The database parses every memory's links when it is written (``sql/links.sql``) and resolves them
when they are read, so these routes only ask it. They sit on a sibling router (``/links``) because
``/memory/{key:path}`` is a catch-all.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, MediaType, Response, get
from litestar.params import FromPath

from mycelium.api.deps import VERBS, Annotated, Query, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY
from mycelium.verbs.links import ExpandedMemory, LinkGraph, LinkIntegrity, MemoryLinks

KeyQuery = Annotated[str, Query(min_length=1, max_length=512)]


def _json(document: str) -> Response[Any]:
    return Response(document.encode(), media_type=MediaType.JSON)


class LinksController(Controller):
    path = "/api/rooms/{room:str}/links"
    dependencies = VERBS

    @get("/")
    async def links_of(self, verbs: VerbsDep, room: FromPath[str], key: KeyQuery) -> MemoryLinks:
        """What ``key`` links to, and which memories of the room link to it."""
        found = await verbs.call(NOBODY, "memory_links_of", room=room, key=key.lstrip("/"))
        return MemoryLinks.model_validate(found)

    @get("/graph")
    async def graph(self, verbs: VerbsDep, room: FromPath[str]) -> Response[LinkGraph]:
        """The whole room's graph; the database builds the document and it is sent as it is."""
        return _json(await verbs.call(NOBODY, "link_graph", room=room))

    @get("/integrity")
    async def integrity(self, verbs: VerbsDep, room: FromPath[str]) -> Response[LinkIntegrity]:
        return _json(await verbs.call(NOBODY, "link_integrity", room=room))

    @get("/expand")
    async def expand(self, verbs: VerbsDep, room: FromPath[str], key: KeyQuery) -> ExpandedMemory:
        """The body with its ``![[…]]`` markers expanded; failures stay verbatim and are reported."""
        key = key.lstrip("/")
        result = ExpandedMemory.model_validate(await verbs.call(NOBODY, "expand_memory", room=room, key=key))
        if not result.found:
            raise Refusal(404, "memory_not_found", f"no memory '{key}' in room '{room}'",
                          {"room": room, "key": key})
        return result


ROUTES = [LinksController]
