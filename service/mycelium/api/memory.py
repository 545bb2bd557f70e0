"""Memories: batch upsert, list (with ETag), get, delete, history and semantic search.

Routes follow the upstream hub: ``/api/rooms/{room}/memory`` and ``/memory/{key:path}``; the history
of a key lives on a sibling router (``/api/rooms/{room}/history/{key:path}``) because the key is a
catch-all path.
"""

from __future__ import annotations

import hashlib
from typing import Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, Annotated, HubDep, Offset, Query, VerbsDep, room_spelled
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor, Verbs
from mycelium.verbs.memories import (
    MemoryBatchCreate,
    MemoryHistory,
    MemoryRead,
    MemorySearch,
    SearchHit,
    SearchResults,
    memory_history,
    memory_read,
    text_to_embed,
    write_params,
)


def _strip(key: str) -> str:
    return key.lstrip("/")


class MemoryController(Controller):
    path = "/api/rooms/{room:str}/memory"
    dependencies = VERBS

    @post("/", status_code=201)
    async def write(
        self, hub: HubDep, verbs: VerbsDep, room: FromPath[str], data: JSONBody[MemoryBatchCreate]
    ) -> list[MemoryRead]:
        """Every item in one transaction, each written as the author it names."""
        vectors: list[Any] = [None] * len(data.items)
        wanted = [i for i, item in enumerate(data.items) if item.embed]
        if wanted and hub.embedder is not None:
            computed = await hub.embedder.aembed([text_to_embed(data.items[i]) for i in wanted])
            for i, vector in zip(wanted, computed, strict=True):
                vectors[i] = vector
        try:
            rows = await self._write_all(verbs, room, data, vectors)
        except Refusal as refusal:
            spelled = room_spelled(refusal, room)
            if spelled is None:
                raise
            rows = await self._write_all(verbs, spelled, data, vectors)
        return [memory_read(r) for r in rows]

    @staticmethod
    async def _write_all(verbs: Verbs, room: str, data: MemoryBatchCreate, vectors: list[Any]) -> list[Any]:
        rows = []
        async with verbs.transaction() as tx:
            for item, vector in zip(data.items, vectors, strict=True):
                rows.append(await tx.call(Actor.declared(item.created_by), "write_memory",
                                          **write_params(room, item, vector)))
        return rows

    @get("/")
    async def list(
        self, request: Request[Any, Any, Any], verbs: VerbsDep, room: FromPath[str],
        prefix: FromQuery[str] = "",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100, offset: Offset = 0,
    ) -> Response[list[MemoryRead]]:
        rows = await verbs.call(NOBODY, "list_memories", room=room, prefix=prefix, offset=offset, limit=limit)
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
    async def search(
        self, hub: HubDep, verbs: VerbsDep, room: FromPath[str], data: JSONBody[MemorySearch]
    ) -> SearchResults:
        vector = None
        if hub.embedder is not None:
            vector = (await hub.embedder.aembed([data.query]))[0]
        rows = await verbs.call(NOBODY, "search_memories", room=room, embedding=vector, query=data.query,
                                limit=data.limit, tags=data.tags_filter, min_similarity=data.min_similarity)
        hits = [SearchHit(memory=memory_read(r), similarity=r["similarity"]) for r in rows]
        return SearchResults(results=hits, total=len(hits))

    @get("/{key:path}")
    async def get_one(self, verbs: VerbsDep, room: FromPath[str], key: FromPath[str]) -> MemoryRead:
        return memory_read(await verbs.call(NOBODY, "get_memory", room=room, key=_strip(key)))

    @delete("/{key:path}")
    async def delete_one(
        self, verbs: VerbsDep, room: FromPath[str], key: FromPath[str], by: FromQuery[str | None] = None
    ) -> None:
        await verbs.call(Actor.declared(by), "delete_memory", room=room, key=_strip(key), by=by)


class HistoryController(Controller):
    path = "/api/rooms/{room:str}/history"
    dependencies = VERBS

    @get("/{key:path}")
    async def history(self, verbs: VerbsDep, room: FromPath[str], key: FromPath[str]) -> MemoryHistory:
        key = _strip(key)
        return memory_history(room, key, await verbs.call(NOBODY, "memory_history", room=room, key=key))
