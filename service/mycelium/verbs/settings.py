"""Hub and room settings: the request model and the answers every transport shares."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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


def setting_read(row: Any) -> SettingRead:
    return SettingRead(**row)


def settings_read(room: str, rows: list[Any]) -> SettingsRead:
    return SettingsRead(room=room or None, settings=[setting_read(r) for r in rows])
