"""Links: one memory's links both ways, the room's link graph, its integrity, and transclusion.

The database parses every memory's links when it is written (``sql/links.sql``) and resolves them
when they are read, so these routes only ask it. They sit on a sibling router (``/links``) because
``/memory/{key:path}`` is a catch-all.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, MediaType, Response, get
from litestar.params import FromPath
from pydantic import BaseModel

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.db.queries import q
from mycelium.errors import Refusal

KeyQuery = Annotated[str, Query(min_length=1, max_length=512)]


class LinkRead(BaseModel):
    """One link as it resolves now; ``source`` is set on backlinks and in integrity reports."""

    target: str
    kind: str
    anchor: str | None
    label: str | None
    relation: str | None
    raw: str
    cross_room: str | None
    resolved: bool
    error: str | None
    source: str | None = None


class MemoryLinks(BaseModel):
    key: str
    found: bool
    outbound: list[LinkRead]
    backlinks: list[LinkRead]


class GraphNode(BaseModel):
    key: str
    expandable: bool
    outbound: int
    inbound: int


class GraphEdge(BaseModel):
    source: str
    target: str
    kind: str
    anchor: str | None
    relation: str | None
    cross_room: str | None
    resolved: bool
    error: str | None


class LinkGraph(BaseModel):
    nodes: list[GraphNode]
    edges: list[GraphEdge]


class LinkIntegrity(BaseModel):
    broken: list[LinkRead]
    orphans: list[str]
    roots: list[str]
    leaves: list[str]
    total_memories: int
    total_links: int


class Expansion(BaseModel):
    target: str
    anchor: str | None
    raw: str
    expanded: bool
    error: str | None


class ExpandedMemory(BaseModel):
    key: str
    rendered: str
    expansions: list[Expansion]
    found: bool


def _json(document: str) -> Response[Any]:
    return Response(document.encode(), media_type=MediaType.JSON)


class LinksController(Controller):
    path = "/api/rooms/{room:str}/links"

    @get("/")
    async def links_of(self, hub: HubDep, room: FromPath[str], key: KeyQuery) -> MemoryLinks:
        """What ``key`` links to, and which memories of the room link to it."""
        return MemoryLinks.model_validate(await hub.db.fetchval(q("memory_links_of"), room, key.lstrip("/")))

    @get("/graph")
    async def graph(self, hub: HubDep, room: FromPath[str]) -> Response[LinkGraph]:
        """The whole room's graph; the database builds the document and it is sent as it is."""
        return _json(await hub.db.fetchval(q("link_graph"), room))

    @get("/integrity")
    async def integrity(self, hub: HubDep, room: FromPath[str]) -> Response[LinkIntegrity]:
        return _json(await hub.db.fetchval(q("link_integrity"), room))

    @get("/expand")
    async def expand(self, hub: HubDep, room: FromPath[str], key: KeyQuery) -> ExpandedMemory:
        """The body with its ``![[…]]`` markers expanded; failures stay verbatim and are reported."""
        key = key.lstrip("/")
        result = ExpandedMemory.model_validate(await hub.db.fetchval(q("expand_memory"), room, key))
        if not result.found:
            raise Refusal(404, "memory_not_found", f"no memory '{key}' in room '{room}'",
                          {"room": room, "key": key})
        return result


ROUTES = [LinksController]
