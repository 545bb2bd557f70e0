"""Board field writes: ``POST /api/rooms/{room}/fields`` and ``GET …/fields/{key}``.

A field write changes frontmatter only (a JSON null clears a field), bumps the version and leaves
the prose and the vector alone; lease fields are refused whole (422), a missing row is 404 and
nothing is created. All of it is decided by ``mycelium.write_fields``.
"""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.params import FromPath, JSONBody

from mycelium.api.deps import VERBS, VerbsDep
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.board import FieldsRead, FieldsWrite
from mycelium.verbs.memories import MemoryRead, memory_read


class FieldsController(Controller):
    path = "/api/rooms/{room:str}/fields"
    dependencies = VERBS

    @post("/", status_code=200)
    async def write(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[FieldsWrite]) -> MemoryRead:
        row = await verbs.call(Actor.declared(data.handle), "write_fields", room=room,
                               key=data.key.lstrip("/"), handle=data.handle, fields=data.fields)
        return memory_read(row)

    @get("/{key:path}")
    async def read(self, verbs: VerbsDep, room: FromPath[str], key: FromPath[str]) -> FieldsRead:
        key = key.lstrip("/")
        row = await verbs.call(NOBODY, "read_fields", room=room, key=key)
        return FieldsRead(room=room, key=key, version=row["version"], fields=row["fields"])
