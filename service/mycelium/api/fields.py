"""Board field writes: ``POST /api/rooms/{room}/fields`` and ``GET …/fields/{key}``.

A field write changes frontmatter only (a JSON null clears a field), bumps the version and leaves
the prose and the vector alone; lease fields are refused whole (422), a missing row is 404 and
nothing is created. All of it is decided by ``mycelium.write_fields``.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, get, post
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import HubDep
from mycelium.api.memory import MemoryRead, memory_read
from mycelium.db.hinted import write_row
from mycelium.db.queries import q


class FieldsWrite(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    handle: str = Field(min_length=1, max_length=200)
    fields: dict[str, Any]


class FieldsRead(BaseModel):
    room: str
    key: str
    version: int
    fields: dict[str, Any]


class FieldsController(Controller):
    path = "/api/rooms/{room:str}/fields"

    @post("/", status_code=200)
    async def write(self, hub: HubDep, room: FromPath[str], data: JSONBody[FieldsWrite]) -> MemoryRead:
        row = await write_row(hub, q("write_fields"), room, data.key.lstrip("/"), data.handle, data.fields)
        return memory_read(row)

    @get("/{key:path}")
    async def read(self, hub: HubDep, room: FromPath[str], key: FromPath[str]) -> FieldsRead:
        key = key.lstrip("/")
        row = await hub.db.fetchrow(q("read_fields"), room, key)
        return FieldsRead(room=room, key=key, version=row["version"], fields=row["fields"])
