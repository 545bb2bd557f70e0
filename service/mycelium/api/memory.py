"""Memories: batch upsert, list (with ETag), get, delete, history and semantic search.

Routes follow the upstream hub: ``/api/rooms/{room}/memory`` and ``/memory/{key:path}``; the history
of a key lives on a sibling router (``/api/rooms/{room}/history/{key:path}``) because the key is a
catch-all path.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import yaml
from litestar import Controller, Request, Response, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.api.rooms import require_room
from mycelium.db.queries import q
from mycelium.errors import Refusal


class MemoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    value: dict[str, Any] | str
    tags: list[str] | None = None
    content_text: str | None = None
    embed: bool = True
    created_by: str = Field(min_length=1, max_length=200)
    base_version: int | None = Field(default=None, ge=0)
    meta: dict[str, Any] | None = None


class MemoryBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[MemoryCreate] = Field(min_length=1, max_length=100)


class MemoryRead(BaseModel):
    room_name: str
    key: str
    value: dict[str, Any]
    content_text: str | None
    tags: list[str]
    meta: dict[str, Any]
    episode: str
    version: int
    created_by: str
    updated_by: str
    created_at: datetime
    updated_at: datetime
    embedded: bool


class MemorySearch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=10_000)
    limit: int = Field(default=10, ge=1, le=100)
    tags_filter: list[str] | None = None
    min_similarity: float = Field(default=0.0, ge=0.0, le=1.0)


class SearchHit(BaseModel):
    memory: MemoryRead
    similarity: float | None


class SearchResults(BaseModel):
    results: list[SearchHit]
    total: int


class MemoryVersion(BaseModel):
    version: int
    op: str
    episode: str
    value: dict[str, Any] | None
    meta: dict[str, Any] | None
    tags: list[str] | None
    content_text: str | None
    written_by: str
    written_at: datetime


class MemoryHistory(BaseModel):
    room_name: str
    key: str
    versions: list[MemoryVersion]


def memory_read(row: Any) -> MemoryRead:
    return MemoryRead(
        room_name=row["room"], key=row["key"], value=row["value"], content_text=row["content_text"],
        tags=list(row["tags"]), meta=row["meta"], episode=row["episode"], version=row["version"],
        created_by=row["created_by"], updated_by=row["updated_by"], created_at=row["created_at"],
        updated_at=row["updated_at"], embedded=row["embedding"] is not None,
    )


def text_to_embed(item: MemoryCreate) -> str:
    """What a memory's vector is computed from: content_text, else its prose, else its fields."""
    if item.content_text is not None:
        return item.content_text
    if isinstance(item.value, str):
        return item.value
    text = item.value.get("text")
    if text is not None:
        return str(text)
    return yaml.safe_dump(item.value, sort_keys=False, allow_unicode=True)


def _strip(key: str) -> str:
    return key.lstrip("/")


class MemoryController(Controller):
    path = "/api/rooms/{room:str}/memory"

    @post("/", status_code=201)
    async def write(
        self, hub: HubDep, room: FromPath[str], data: JSONBody[MemoryBatchCreate]
    ) -> list[MemoryRead]:
        await require_room(hub, room)
        vectors: list[Any] = [None] * len(data.items)
        wanted = [i for i, item in enumerate(data.items) if item.embed]
        if wanted and hub.embedder is not None:
            computed = await hub.embedder.aembed([text_to_embed(data.items[i]) for i in wanted])
            for i, vector in zip(wanted, computed, strict=True):
                vectors[i] = vector
        rows = []
        async with hub.db.acquire() as conn, conn.transaction():
            for item, vector in zip(data.items, vectors, strict=True):
                rows.append(await conn.fetchrow(
                    q("write_memory"), room, item.key, item.value, item.created_by, item.tags, item.meta,
                    item.content_text, item.base_version, vector, item.embed,
                ))
        return [memory_read(r) for r in rows]

    @get("/")
    async def list(
        self, request: Request[Any, Any, Any], hub: HubDep, room: FromPath[str],
        prefix: FromQuery[str] = "",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100, offset: Annotated[int, Query(ge=0)] = 0,
    ) -> Response[list[MemoryRead]]:
        await require_room(hub, room)
        rows = await hub.db.fetch(q("list_memories"), room, prefix, offset, limit)
        total = rows[0]["total"] if rows else 0
        digest = hashlib.sha256()
        digest.update(f"{room}|{prefix}|{offset}|{limit}|{total}".encode())
        for r in rows:
            digest.update(f"|{r['key']}@{r['version']}:{r['episode']}:{r['embedding'] is not None}".encode())
        etag = f'"{digest.hexdigest()[:32]}"'
        headers = {"ETag": etag, "X-Total-Count": str(total)}
        if request.headers.get("if-none-match") == etag:
            return Response(None, status_code=304, headers=headers)  # type: ignore[arg-type]
        return Response([memory_read(r) for r in rows], headers=headers)

    @post("/search", status_code=200)
    async def search(self, hub: HubDep, room: FromPath[str], data: JSONBody[MemorySearch]) -> SearchResults:
        await require_room(hub, room)
        vector = None
        if hub.embedder is not None:
            vector = (await hub.embedder.aembed([data.query]))[0]
        rows = await hub.db.fetch(
            q("search_memories"), room, vector, data.query, data.limit, data.tags_filter, data.min_similarity
        )
        hits = [SearchHit(memory=memory_read(r), similarity=r["similarity"]) for r in rows]
        return SearchResults(results=hits, total=len(hits))

    @get("/{key:path}")
    async def get_one(self, hub: HubDep, room: FromPath[str], key: FromPath[str]) -> MemoryRead:
        key = _strip(key)
        row = await hub.db.fetchrow(q("get_memory"), room, key)
        if row is None:
            await require_room(hub, room)
            raise Refusal(404, "memory_not_found", f"no memory '{key}' in room '{room}'",
                          {"room": room, "key": key})
        return memory_read(row)

    @delete("/{key:path}")
    async def delete_one(
        self, hub: HubDep, room: FromPath[str], key: FromPath[str], by: FromQuery[str | None] = None
    ) -> None:
        await hub.db.execute(q("delete_memory"), room, _strip(key), by)


class HistoryController(Controller):
    path = "/api/rooms/{room:str}/history"

    @get("/{key:path}")
    async def history(self, hub: HubDep, room: FromPath[str], key: FromPath[str]) -> MemoryHistory:
        key = _strip(key)
        rows = await hub.db.fetch(q("memory_history"), room, key)
        if not rows:
            await require_room(hub, room)
            raise Refusal(404, "memory_not_found", f"no memory '{key}' in room '{room}' has ever existed",
                          {"room": room, "key": key})
        versions = [MemoryVersion(**{k: r[k] for k in MemoryVersion.model_fields}) for r in rows]
        return MemoryHistory(room_name=room, key=key, versions=versions)
