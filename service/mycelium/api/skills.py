"""Skills: a skill-shaped view of the ``skills/`` memory namespace.

A skill is the memory ``skills/<name>``: a SKILL.md-style body with its ``description`` in the
frontmatter. Writes go through ``mycelium.write_memory`` like any memory write, so a skill is
versioned, threaded, linked and searchable like the rest; the hub never runs a skill.
"""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, HubDep, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.memories import (
    SKILL_PREFIX,
    SkillCreate,
    SkillList,
    SkillRead,
    skill_key,
    skill_not_found,
    skill_read,
)


class SkillController(Controller):
    path = "/api/rooms/{room:str}/skills"
    dependencies = VERBS

    @post("/", status_code=201)
    async def write(self, hub: HubDep, verbs: VerbsDep, room: FromPath[str], data: JSONBody[SkillCreate]
                    ) -> SkillRead:
        """Create or update a skill (an upsert: version +1 on each write)."""
        meta = {**(data.meta or {}), "description": data.description}
        vector = None
        if hub.embedder is not None:
            vector = (await hub.embedder.aembed([data.body]))[0]
        row = await verbs.call(
            Actor.declared(data.created_by), "write_memory", room=room, key=SKILL_PREFIX + data.name,
            value={"text": data.body}, created_by=data.created_by, tags=data.tags, meta=meta,
            content_text=None, base_version=None, embedding=vector, embed=True,
        )
        return skill_read(row)

    @get("/")
    async def list(self, verbs: VerbsDep, room: FromPath[str]) -> SkillList:
        """A room's skills, newest-updated first."""
        skills = [skill_read(r) for r in await verbs.call(NOBODY, "list_skills", room=room)]
        return SkillList(skills=skills, total=len(skills))

    @get("/{name:str}")
    async def get_one(self, verbs: VerbsDep, room: FromPath[str], name: FromPath[str]) -> SkillRead:
        try:
            return skill_read(await verbs.call(NOBODY, "get_memory", room=room, key=skill_key(room, name)))
        except Refusal as refused:
            raise _as_skill(refused, room, name) from None

    @delete("/{name:str}")
    async def delete_one(
        self, verbs: VerbsDep, room: FromPath[str], name: FromPath[str], by: FromQuery[str | None] = None
    ) -> None:
        """Delete a skill; its history stays, like any memory's."""
        try:
            await verbs.call(Actor.declared(by), "delete_memory", room=room, key=skill_key(room, name), by=by)
        except Refusal as refused:
            raise _as_skill(refused, room, name) from None


def _as_skill(refused: Refusal, room: str, name: str) -> Refusal:
    """A skill that is not there is a skill, not a memory, that is not found."""
    return skill_not_found(room, name) if refused.error == "memory_not_found" else refused
