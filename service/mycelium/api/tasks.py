"""Tasks: file a board row (``POST /api/rooms/{room}/tasks``), list the board, find one row.

A task is a row in ``work/`` and its thread, one to one; the database files it (slug, status,
kind, parent check, the ``filed`` notice) in ``mycelium.create_task``. The list and the single
row come from the ``board_rows`` view: status, lease, what the row waits on and where it needs
attention, all derived by the database at read time.
"""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, Annotated, Offset, Query, VerbsDep
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.board import BoardRow, Filter, TaskCreate, attention_of, board_row
from mycelium.verbs.memories import MemoryRead, memory_read


class TaskController(Controller):
    path = "/api/rooms/{room:str}/tasks"
    dependencies = VERBS

    @post("/", status_code=201)
    async def create(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[TaskCreate]) -> MemoryRead:
        row = await verbs.call(Actor.declared(data.handle), "create_task", room=room, title=data.title,
                               handle=data.handle, key=data.key, assignee=data.assignee, parent=data.parent,
                               depends_on=data.depends_on)
        return memory_read(row)

    @get("/")
    async def board(
        self, verbs: VerbsDep, room: FromPath[str], filter: FromQuery[Filter] = "all",
        namespace: FromQuery[str | None] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200, offset: Offset = 0,
    ) -> list[BoardRow]:
        rows = await verbs.call(NOBODY, "board_rows", room=room, attention=attention_of(filter),
                                namespace=namespace, limit=limit, offset=offset)
        return [board_row(r) for r in rows]

    @get("/{ref:path}")
    async def row(self, verbs: VerbsDep, room: FromPath[str], ref: FromPath[str]) -> BoardRow:
        return board_row(await verbs.call(NOBODY, "board_row", room=room, ref=ref.lstrip("/")))
