"""Skills: a skill-shaped view of the ``skills/`` memory namespace.

A skill is the memory ``skills/<name>``: a SKILL.md-style body with its ``description`` in the
frontmatter. Writes go through ``mycelium.write_memory`` like any memory write, so a skill is
versioned, threaded, linked and searchable like the rest; the hub never runs a skill.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import HubDep
from mycelium.api.rooms import require_room
from mycelium.db.queries import q
from mycelium.errors import Refusal

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
PREFIX = "skills/"


class SkillCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128, pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=512)
    body: str
    tags: list[str] | None = None
    created_by: str = Field(min_length=1, max_length=200)
    meta: dict[str, Any] | None = None


class SkillRead(BaseModel):
    name: str
    key: str
    description: str
    body: str
    tags: list[str]
    meta: dict[str, Any]
    episode: str
    version: int
    created_by: str
    updated_by: str
    created_at: datetime
    updated_at: datetime


class SkillList(BaseModel):
    skills: list[SkillRead]
    total: int


def skill_read(row: Any) -> SkillRead:
    meta = dict(row["meta"])
    description = meta.pop("description", "")
    return SkillRead(
        name=row["key"].removeprefix(PREFIX), key=row["key"],
        description=description if isinstance(description, str) else str(description),
        body=row["body"], tags=list(row["tags"]), meta=meta, episode=row["episode"],
        version=row["version"], created_by=row["created_by"], updated_by=row["updated_by"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )


def _skill_key(room: str, name: str) -> str:
    """The memory key of a skill; a name no skill can have is simply not found."""
    if len(name) > 128 or not re.fullmatch(NAME_PATTERN, name):
        raise Refusal(404, "skill_not_found", f"no skill '{name}' in room '{room}'",
                      {"room": room, "name": name})
    return PREFIX + name


class SkillController(Controller):
    path = "/api/rooms/{room:str}/skills"

    @post("/", status_code=201)
    async def write(self, hub: HubDep, room: FromPath[str], data: JSONBody[SkillCreate]) -> SkillRead:
        """Create or update a skill (an upsert: version +1 on each write)."""
        await require_room(hub, room)
        meta = {**(data.meta or {}), "description": data.description}
        vector = None
        if hub.embedder is not None:
            vector = (await hub.embedder.aembed([data.body]))[0]
        row = await hub.db.fetchrow(
            q("write_memory"), room, PREFIX + data.name, {"text": data.body}, data.created_by, data.tags,
            meta, None, None, vector, True,
        )
        return skill_read(row)

    @get("/")
    async def list(self, hub: HubDep, room: FromPath[str]) -> SkillList:
        """A room's skills, newest-updated first."""
        await require_room(hub, room)
        skills = [skill_read(r) for r in await hub.db.fetch(q("list_skills"), room)]
        return SkillList(skills=skills, total=len(skills))

    @get("/{name:str}")
    async def get_one(self, hub: HubDep, room: FromPath[str], name: FromPath[str]) -> SkillRead:
        key = _skill_key(room, name)
        row = await hub.db.fetchrow(q("get_memory"), room, key)
        if row is None:
            await require_room(hub, room)
            raise Refusal(404, "skill_not_found", f"no skill '{name}' in room '{room}'",
                          {"room": room, "name": name})
        return skill_read(row)

    @delete("/{name:str}")
    async def delete_one(
        self, hub: HubDep, room: FromPath[str], name: FromPath[str], by: FromQuery[str | None] = None
    ) -> None:
        """Delete a skill; its history stays, like any memory's."""
        key = _skill_key(room, name)
        if await hub.db.fetchval(q("delete_skill"), room, key, by) is None:
            await require_room(hub, room)
            raise Refusal(404, "skill_not_found", f"no skill '{name}' in room '{room}'",
                          {"room": room, "name": name})
