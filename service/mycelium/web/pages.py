"""The pages a person reads about rooms: the rooms, a room, a task, memories, search. Each is one or a
few verb calls (``reads``) rendered by a template; the room's parts are also served alone, for the
page's script to refresh them when the stream says the room moved."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from litestar import Request, get
from litestar.params import FromPath, FromQuery
from litestar.response import Template

from mycelium.api.deps import Annotated, HubDep, Query, VerbsDep
from mycelium.auth.middleware import principal_in
from mycelium.conversations import search
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.memories import memory_history, memory_read
from mycelium.verbs.messages import message_read
from mycelium.verbs.rooms import room_read
from mycelium.web import reads, views

HANDLE_COOKIE = "mycelium_handle"


def handle_of(request: Request[Any, Any, Any]) -> str:
    """Who this browser writes as: the signed-in principal on a gated hub, else the handle it last
    wrote as (declared, not verified)."""
    principal = principal_in(request.scope)
    if principal is not None:
        return principal.handle
    return request.cookies.get(HANDLE_COOKIE, "")[:200]


def identity(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """Who the page's forms write as (``me``), and whether that is the signed-in principal of a
    gated hub (``gated``: the forms then have no handle field, and the writes are the principal's)."""
    return {"me": handle_of(request), "gated": principal_in(request.scope) is not None}


def page(name: str, request: Request[Any, Any, Any], status: int = 200, **context: Any) -> Template:
    return Template(template_name=name, status_code=status, context={**identity(request), **context})


@get("/")
async def rooms(request: Request[Any, Any, Any], verbs: VerbsDep) -> Template:
    """The rooms this browser's handle may see (the public ones, and private ones it belongs to)."""
    listed = await verbs.call(Actor.declared(handle_of(request), "person"), "list_rooms", name=None, skip=0,
                              limit=1000)
    return page("rooms.html", request, rooms=[room_read(r) for r in listed], now=datetime.now(UTC))


RowsQuery = Annotated[int, Query(ge=1, le=reads.BOARD_LIMIT)]


@get("/room/{name:str}")
async def room(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
               rows: RowsQuery = reads.COLUMN_ROWS) -> Template:
    """The room: its board (``rows`` per column), timeline, members and forms."""
    return page("room.html", request, **await reads.room_page(verbs, name, rows))


#: ``only=talk``: the parts what was said changes (the room's timeline; a task's thread and flow
#: panel), read without the board, for the script's refresh after a message that is not a notice.
OnlyQuery = Annotated[Literal["talk"] | None, Query()]


@get("/room/{name:str}/parts")
async def room_parts(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
                     rows: RowsQuery = reads.COLUMN_ROWS, only: OnlyQuery = None) -> Template:
    """The room page's live parts (board, timeline, members) alone, for its script to swap in."""
    if only == "talk":
        return page("_room_parts.html", request, parts={"timeline"}, **await reads.room_talk(verbs, name))
    return page("_room_parts.html", request, parts={"board", "timeline", "members"},
                **await reads.room_page(verbs, name, rows))


@get("/room/{name:str}/task/{key:path}")
async def task(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
               key: FromPath[str]) -> Template:
    return page("task.html", request, **await reads.task_page(verbs, name, key.lstrip("/")))


@get("/room/{name:str}/task-parts/{key:path}")
async def task_part(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
                    key: FromPath[str], only: OnlyQuery = None) -> Template:
    """The task page's row, thread and flow panel alone, for the script to refresh."""
    if only == "talk":
        return page("_task_parts.html", request, parts={"thread", "flow"},
                    **await reads.task_talk(verbs, name, key.lstrip("/")))
    return page("_task_parts.html", request, parts={"row", "thread", "flow"},
                **await reads.task_page(verbs, name, key.lstrip("/")))


@get("/room/{name:str}/memories")
async def memories(
    request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str], prefix: FromQuery[str] = "",
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Template:
    the_room = await reads.room(verbs, name)
    now = await verbs.call(NOBODY, "room_clock", room=name)
    rows = await verbs.call(NOBODY, "list_memories", room=name, prefix=prefix, offset=offset, limit=100)
    every = await verbs.call(NOBODY, "list_memories", room=name, prefix="", offset=0, limit=1000)
    total = rows[0]["total"] if rows else 0
    return page("memories.html", request, room=the_room, now=now, prefix=prefix, offset=offset, total=total,
                memories=[memory_read(r) for r in rows],
                namespaces=views.namespaces(r["key"] for r in every))


@get("/room/{name:str}/memory/{key:path}")
async def memory(
    request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str], key: FromPath[str],
    a: Annotated[int | None, Query(ge=0)] = None, b: Annotated[int | None, Query(ge=0)] = None,
) -> Template:
    key = key.lstrip("/")
    the_room = await reads.room(verbs, name)
    now = await verbs.call(NOBODY, "room_clock", room=name)
    history = memory_history(name, key, await verbs.call(NOBODY, "memory_history", room=name, key=key))
    current = next((v for v in reversed(history.versions) if v.op != "delete"), None)
    found = await verbs.call(NOBODY, "memory_links_of", room=name, key=key)
    expanded = await verbs.call(NOBODY, "expand_memory", room=name, key=key)
    live = history.versions[-1].op != "delete"
    versions = {v.version: v for v in history.versions}
    diff: list[tuple[str, str]] = []
    if a is not None and b is not None:
        if a not in versions or b not in versions:
            raise Refusal(404, "version_not_found", f"'{key}' has no version {a if a not in versions else b}",
                          {"key": key})
        diff = views.version_diff(views.body_text(versions[a].value), views.body_text(versions[b].value),
                                  f"v{a}", f"v{b}")
    text = views.body_text(current.value if current else None)
    body = expanded.get("rendered") if expanded.get("found") else text
    return page("memory.html", request, room=the_room, now=now, key=key, live=live, history=history,
                current=current, body=body, links=found,
                board_namespaces=views.BOARD_NAMESPACES, expansions=expanded.get("expansions", []), a=a, b=b,
                diff=diff, text=text)


@get("/room/{name:str}/search")
async def search_page(
    request: Request[Any, Any, Any], hub: HubDep, verbs: VerbsDep, name: FromPath[str],
    q: Annotated[str, Query(max_length=2000)] = "", what: FromQuery[str] = "messages",
    cursor: FromQuery[str | None] = None,
) -> Template:
    the_room = await reads.room(verbs, name)
    now = await verbs.call(NOBODY, "room_clock", room=name)
    result: dict[str, Any] | None = None
    found: list[Any] = []
    if q.strip() and what == "memories":
        vector = (await hub.embedder.aembed([q]))[0] if hub.embedder is not None else None
        rows = await verbs.call(NOBODY, "search_memories", room=name, embedding=vector, query=q, limit=30,
                                tags=None, min_similarity=0.0)
        found = [(memory_read(r), r["similarity"]) for r in rows]
    elif q.strip():
        result = (await search.search_messages(verbs, name, q, limit=30, cursor=cursor)).body(message_read)
    return page("search.html", request, room=the_room, now=now, q=q, what=what, result=result, found=found)


ROUTES: list[Any] = [rooms, room, room_parts, task, task_part, memories, memory, search_page]
