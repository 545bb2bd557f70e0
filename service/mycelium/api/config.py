"""Hub and room settings (``mycelium.config``), read and written over HTTP.

The catalogue of settings, their types and bounds lives in the database (sql/settings.sql), so a
value written here, by another replica or from psql is checked the same way and every replica reads
the same value. A room's own value overrides the hub-wide one; clearing it falls back.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, delete, get, put
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, VerbsDep
from mycelium.verbs import NOBODY, Actor, Verbs
from mycelium.verbs.settings import SettingBody, SettingRead, SettingsRead, setting_read, settings_read


async def _write(verbs: Verbs, name: str, value: Any, room: str, by: str | None) -> SettingRead:
    row = await verbs.call(Actor.declared(by), "write_setting", name=name, value=value, room=room, handle=by)
    return setting_read(row)


async def _all(verbs: Verbs, room: str) -> SettingsRead:
    return settings_read(room, await verbs.call(NOBODY, "settings_of", room=room))


class HubSettingsController(Controller):
    path = "/api/config"
    dependencies = VERBS

    @get("/")
    async def read_all(self, verbs: VerbsDep) -> SettingsRead:
        return await _all(verbs, "")

    @put("/{name:str}")
    async def write(self, verbs: VerbsDep, name: FromPath[str], data: JSONBody[SettingBody]) -> SettingRead:
        return await _write(verbs, name, data.value, "", data.handle)

    @delete("/{name:str}", status_code=200)
    async def clear(self, verbs: VerbsDep, name: FromPath[str], by: FromQuery[str | None] = None
                    ) -> SettingRead:
        return await _write(verbs, name, None, "", by)


class RoomSettingsController(Controller):
    path = "/api/rooms/{room:str}/config"
    dependencies = VERBS

    @get("/")
    async def read_all(self, verbs: VerbsDep, room: FromPath[str]) -> SettingsRead:
        return await _all(verbs, room)

    @put("/{name:str}")
    async def write(self, verbs: VerbsDep, room: FromPath[str], name: FromPath[str],
                    data: JSONBody[SettingBody]) -> SettingRead:
        return await _write(verbs, name, data.value, room, data.handle)

    @delete("/{name:str}", status_code=200)
    async def clear(self, verbs: VerbsDep, room: FromPath[str], name: FromPath[str],
                    by: FromQuery[str | None] = None) -> SettingRead:
        return await _write(verbs, name, None, room, by)


ROUTES: list[Any] = [HubSettingsController, RoomSettingsController]
