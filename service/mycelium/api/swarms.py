"""Swarms over HTTP: ``POST /api/rooms/{room}/swarms`` (file the task, make the team workers, start
the conductor's ``swarm`` flow: 201 with what was made), ``GET …/swarms`` (newest first, each with
its task's status, its run's state and its parts) and ``GET …/swarms/{key}``."""

from __future__ import annotations

from typing import Any

from litestar import Controller, get, post
from litestar.params import FromPath, JSONBody

from mycelium.api.deps import VERBS, VerbsDep
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.swarms import SwarmCreate, SwarmRead, swarm_read


class SwarmController(Controller):
    path = "/api/rooms/{room:str}/swarms"
    dependencies = VERBS

    @post("/", status_code=201)
    async def start(
        self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[SwarmCreate]
    ) -> dict[str, Any]:
        made: dict[str, Any] = await verbs.call(
            Actor.declared(data.created_by, "person"), "start_swarm", room=room, goal=data.goal,
            team=data.team, by=None, title=data.title, conductor=data.conductor,
        )
        return made

    @get("/")
    async def swarms(self, verbs: VerbsDep, room: FromPath[str]) -> list[SwarmRead]:
        return [swarm_read(r) for r in await verbs.call(NOBODY, "list_swarms", room=room)]

    @get("/{key:path}")
    async def swarm(self, verbs: VerbsDep, room: FromPath[str], key: FromPath[str]) -> SwarmRead:
        return swarm_read(await verbs.call(NOBODY, "get_swarm", room=room, key=key.lstrip("/")))
