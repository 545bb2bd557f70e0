"""Rooms: the request models and the answer every transport shares."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
