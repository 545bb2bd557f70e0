"""Tasks: file a board row (``POST /api/rooms/{room}/tasks``), list the board, find one row.

A task is a row in ``work/`` and its thread, one to one; the database files it (slug, status,
kind, parent check, the ``filed`` notice) in ``mycelium.create_task``. The list and the single
row come from the ``board_rows`` view: status, lease, what the row waits on and where it needs
attention, all derived by the database at read time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.api.memory import MemoryRead, memory_read
from mycelium.api.rooms import require_room
from mycelium.db.hinted import write_row
from mycelium.db.queries import q
from mycelium.errors import Refusal


class TaskCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=500)
    handle: str = Field(min_length=1, max_length=200)
    key: str | None = Field(default=None, max_length=512)
    assignee: str | None = Field(default=None, max_length=200)
    parent: str | None = Field(default=None, max_length=512)


class BoardRow(BaseModel):
    room: str
    key: str
    namespace: str
    title: str | None
    status: str | None
    kind: str | None
    priority: str | None
    assignee: str | None
    blocked_by: str | None
    parent: str | None
    episode: str
    short_id: str
    version: int
    created_by: str
    updated_by: str
    created_at: datetime
    updated_at: datetime
    assignment: str | None
    owner: str | None
    claimed_at: datetime | None
    ttl_minutes: int | None
    expires_at: datetime | None
    freshness: str | None
    waiting_on: list[str]
    attention: str


def board_row(row: Any) -> BoardRow:
    return BoardRow(**{k: row[k] for k in BoardRow.model_fields})


Filter = Literal["needs-you", "needs_you", "in-flight", "in_flight", "resolved", "all"]


class TaskController(Controller):
    path = "/api/rooms/{room:str}/tasks"

    @post("/", status_code=201)
    async def create(self, hub: HubDep, room: FromPath[str], data: JSONBody[TaskCreate]) -> MemoryRead:
        row = await write_row(hub, q("create_task"), room, data.title, data.handle, data.key,
                              data.assignee, data.parent)
        return memory_read(row)

    @get("/")
    async def board(
        self, hub: HubDep, room: FromPath[str], filter: FromQuery[Filter] = "all",
        namespace: FromQuery[str | None] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200, offset: Annotated[int, Query(ge=0)] = 0,
    ) -> list[BoardRow]:
        await require_room(hub, room)
        attention = None if filter == "all" else filter.replace("-", "_")
        rows = await hub.db.fetch(q("board_rows"), room, attention, namespace, limit, offset)
        return [board_row(r) for r in rows]

    @get("/{ref:path}")
    async def row(self, hub: HubDep, room: FromPath[str], ref: FromPath[str]) -> BoardRow:
        ref = ref.lstrip("/")
        found = await hub.db.fetchrow(q("board_row"), room, ref)
        if found is None:
            await require_room(hub, room)
            raise Refusal(404, "row_not_found",
                          f"no board row '{ref}' in room '{room}' (by key or thread id)",
                          {"room": room, "ref": ref})
        return board_row(found)
