"""Rooms: ``/api/rooms`` (create, list, get, patch, delete)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.db.queries import q
from mycelium.errors import Refusal
from mycelium.hub import Hub


class RoomCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=500)
    is_public: bool = True
    owner: str | None = None
    members: list[str] = Field(default_factory=list)
    created_by: str | None = None
    mas_id: str | None = None
    workspace_id: str | None = None


class RoomUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=500)
    is_public: bool | None = None
    members: list[str] | None = None
    owner: str | None = None
    by: str | None = None


class RoomRead(BaseModel):
    name: str
    title: str | None
    description: str | None
    is_public: bool
    owner: str | None
    members: list[str]
    created_by: str | None
    created_at: datetime
    updated_at: datetime


def room_read(row: Any) -> RoomRead:
    return RoomRead(**{k: row[k] for k in RoomRead.model_fields})


async def require_room(hub: Hub, room: str) -> None:
    if not await hub.db.fetchval(q("room_exists"), room):
        raise Refusal(404, "room_not_found", f"Room '{room}' not found", {"room": room})


class RoomController(Controller):
    path = "/api/rooms"

    @post("/")
    async def create_room(self, hub: HubDep, data: JSONBody[RoomCreate]) -> RoomRead:
        row = await hub.db.fetchrow(
            q("create_room"), data.name, data.title, data.description, data.is_public, data.owner,
            data.members, data.created_by,
        )
        return room_read(row)

    @get("/")
    async def list_rooms(
        self, hub: HubDep, viewer: FromQuery[str | None] = None, name: FromQuery[str | None] = None,
        skip: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    ) -> list[RoomRead]:
        rows = await hub.db.fetch(q("list_rooms"), viewer, name, skip, limit)
        return [room_read(r) for r in rows]

    @get("/{room:str}")
    async def get_room(self, hub: HubDep, room: FromPath[str]) -> RoomRead:
        row = await hub.db.fetchrow(q("get_room"), room)
        if row is None:
            raise Refusal(404, "room_not_found", f"Room '{room}' not found", {"room": room})
        return room_read(row)

    @patch("/{room:str}")
    async def update_room(self, hub: HubDep, room: FromPath[str], data: JSONBody[RoomUpdate]) -> RoomRead:
        patch_fields = data.model_dump(exclude_unset=True, exclude={"by"})
        row = await hub.db.fetchrow(q("update_room"), room, patch_fields, data.by)
        return room_read(row)

    @delete("/{room:str}")
    async def delete_room(self, hub: HubDep, room: FromPath[str]) -> None:
        await hub.db.execute(q("delete_room"), room)
