"""Hub and room settings (``mycelium.config``), read and written over HTTP.

The catalogue of settings, their types and bounds lives in the database (sql/settings.sql), so a
value written here, by another replica or from psql is checked the same way and every replica reads
the same value. A room's own value overrides the hub-wide one; clearing it falls back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Controller, delete, get, put
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import HubDep
from mycelium.api.rooms import require_room
from mycelium.db.queries import q
from mycelium.hub import Hub


class SettingBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: Any = Field(description="the new value; null clears it")
    handle: str | None = Field(default=None, max_length=200)


class SettingRead(BaseModel):
    name: str
    value: Any
    source: str = Field(description="where the value in force comes from: room, hub or default")
    hub_value: Any = None
    room_value: Any = None
    value_type: str
    default_value: Any
    min_value: float | None = None
    max_value: float | None = None
    description: str
    updated_by: str | None = None
    updated_at: datetime | None = None


class SettingsRead(BaseModel):
    room: str | None = Field(description="the room these apply to; null for the hub-wide values")
    settings: list[SettingRead]


def _read(row: Any) -> SettingRead:
    return SettingRead(**row)


async def _write(hub: Hub, name: str, value: Any, room: str, by: str | None) -> SettingRead:
    rows = await hub.db.fetch(q("write_setting"), name, value, room, by)
    return _read(rows[0])


async def _all(hub: Hub, room: str) -> SettingsRead:
    rows = await hub.db.fetch(q("settings_of"), room)
    return SettingsRead(room=room or None, settings=[_read(r) for r in rows])


class HubSettingsController(Controller):
    path = "/api/config"

    @get("/")
    async def read_all(self, hub: HubDep) -> SettingsRead:
        return await _all(hub, "")

    @put("/{name:str}")
    async def write(self, hub: HubDep, name: FromPath[str], data: JSONBody[SettingBody]) -> SettingRead:
        return await _write(hub, name, data.value, "", data.handle)

    @delete("/{name:str}", status_code=200)
    async def clear(self, hub: HubDep, name: FromPath[str], by: FromQuery[str | None] = None) -> SettingRead:
        return await _write(hub, name, None, "", by)


class RoomSettingsController(Controller):
    path = "/api/rooms/{room:str}/config"

    @get("/")
    async def read_all(self, hub: HubDep, room: FromPath[str]) -> SettingsRead:
        await require_room(hub, room)
        return await _all(hub, room)

    @put("/{name:str}")
    async def write(self, hub: HubDep, room: FromPath[str], name: FromPath[str],
                    data: JSONBody[SettingBody]) -> SettingRead:
        return await _write(hub, name, data.value, room, data.handle)

    @delete("/{name:str}", status_code=200)
    async def clear(self, hub: HubDep, room: FromPath[str], name: FromPath[str],
                    by: FromQuery[str | None] = None) -> SettingRead:
        return await _write(hub, name, None, room, by)


ROUTES: list[Any] = [HubSettingsController, RoomSettingsController]
