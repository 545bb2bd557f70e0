"""Rooms: ``/api/rooms`` (create, list, get, patch, delete)."""

from __future__ import annotations

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, Annotated, Offset, Query, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.rooms import RoomCreate, RoomRead, RoomUpdate, room_read


class RoomController(Controller):
    path = "/api/rooms"
    dependencies = VERBS

    @post("/")
    async def create_room(self, verbs: VerbsDep, data: JSONBody[RoomCreate]) -> RoomRead:
        row = await verbs.call(
            Actor.declared(data.created_by), "create_room", name=data.name, title=data.title,
            description=data.description, is_public=data.is_public, owner=data.owner, members=data.members,
            created_by=data.created_by,
        )
        return room_read(row)

    @get("/")
    async def list_rooms(
        self, verbs: VerbsDep, viewer: FromQuery[str | None] = None, name: FromQuery[str | None] = None,
        skip: Offset = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    ) -> list[RoomRead]:
        rows = await verbs.call(Actor.declared(viewer), "list_rooms", name=name, skip=skip, limit=limit)
        return [room_read(r) for r in rows]

    @get("/{room:str}")
    async def get_room(self, verbs: VerbsDep, room: FromPath[str]) -> RoomRead:
        row = await verbs.call(NOBODY, "get_room", room=room)
        if row is None:
            raise Refusal(404, "room_not_found", f"Room '{room}' not found", {"room": room})
        return room_read(row)

    @patch("/{room:str}")
    async def update_room(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[RoomUpdate]) -> RoomRead:
        patch_fields = data.model_dump(exclude_unset=True, exclude={"by"})
        row = await verbs.call(Actor.declared(data.by), "update_room", room=room, patch=patch_fields,
                               by=data.by)
        return room_read(row)

    @delete("/{room:str}")
    async def delete_room(self, verbs: VerbsDep, room: FromPath[str]) -> None:
        await verbs.call(NOBODY, "delete_room", room=room)

