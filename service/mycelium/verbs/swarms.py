"""Swarms: the request model and the answers every transport shares (HTTP, the CLI). The rules are
the database's (sql/swarms.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SwarmCreate(BaseModel):
    """A swarm: a goal and a team (the first member leads; ``@`` before a handle is optional)."""

    model_config = ConfigDict(extra="forbid")
    goal: str = Field(min_length=1, max_length=20_000)
    team: list[str] = Field(min_length=1, max_length=32)
    title: str | None = Field(default=None, max_length=200)
    conductor: str = Field(default="conductor", min_length=1, max_length=200)
    created_by: str = Field(min_length=1, max_length=200)

    @field_validator("team", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):  # "@ann @bob" or "ann,bob"
            return [h for h in value.replace(",", " ").split() if h]
        return value

    @field_validator("team")
    @classmethod
    def _bare(cls, value: list[str]) -> list[str]:
        return [h.removeprefix("@") for h in value]


class SwarmRead(BaseModel):
    room: str
    key: str
    title: str | None
    goal: str
    lead: str
    team: list[str]
    conductor: str
    created_by: str
    created_at: datetime
    status: str
    run_state: str | None
    parts: int
    parts_settled: int


def swarm_read(row: Any) -> SwarmRead:
    got = dict(row)
    return SwarmRead(**{k: got[k] for k in SwarmRead.model_fields if k in got})
