"""Links: the answers every transport shares (the database builds the documents; these models
describe them)."""

from __future__ import annotations

from pydantic import BaseModel


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
