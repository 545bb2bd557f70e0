"""Patterns over HTTP: ``GET /api/patterns`` (the packs: each pattern's summary, a broken one with
its problems), ``GET /api/patterns/{name}`` (one, with its spec and files), ``POST
/api/rooms/{room}/patterns/{name}`` (load it into the new room ``room``, paused: 201 with what was
recorded; ``run: true`` starts it too), ``GET /api/rooms/{room}/pattern`` (what the room was loaded
from, and whether it started) and ``POST /api/rooms/{room}/pattern/run`` (start it, once)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from litestar import Controller, get, post
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import VERBS, HubDep, VerbsDep
from mycelium.patterns import load as patterns
from mycelium.patterns.pack import PatternProblems
from mycelium.verbs import NOBODY


class PatternLoad(BaseModel):
    model_config = ConfigDict(extra="forbid")
    created_by: str = Field(min_length=1, max_length=200)
    private: bool | None = None
    """Override the pattern's own room.private."""
    run: bool = False
    """Start it at once (else it waits for ``…/pattern/run``)."""


class PatternRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(min_length=1, max_length=200)


class RoomPattern(BaseModel):
    room: str
    pattern: str
    digest: str
    task: str | None
    summons: list[dict[str, Any]]
    loaded_by: str
    loaded_at: datetime
    started_by: str | None
    started_at: datetime | None
    state: str


def room_pattern(row: Any) -> RoomPattern:
    got = dict(row)
    got["state"] = "started" if got["started_at"] else "paused"
    return RoomPattern(**{k: got[k] for k in RoomPattern.model_fields})


def _listed(found: Any) -> dict[str, Any]:
    if isinstance(found, PatternProblems):
        return {"name": found.name, "valid": False, "problems": found.problems}
    return {**found.summary(), "valid": True}


class PatternController(Controller):
    path = "/api/patterns"

    @get("/")
    async def patterns(self, hub: HubDep) -> list[dict[str, Any]]:
        found = await asyncio.to_thread(patterns.catalogue, hub.settings.patterns_dir)
        return [_listed(p) for p in found]

    @get("/{name:str}")
    async def pattern(self, hub: HubDep, name: FromPath[str]) -> dict[str, Any]:
        found = await asyncio.to_thread(patterns.find, hub.settings.patterns_dir, name)
        return {**found.detail(), "valid": True}


class RoomPatternController(Controller):
    path = "/api/rooms/{room:str}"
    dependencies = VERBS

    @post("/patterns/{name:str}", status_code=201)
    async def load(self, hub: HubDep, verbs: VerbsDep, room: FromPath[str], name: FromPath[str],
                   data: JSONBody[PatternLoad]) -> RoomPattern:
        found = await asyncio.to_thread(patterns.find, hub.settings.patterns_dir, name)
        row = await patterns.load(verbs, found, room, data.created_by, data.private)
        if data.run:
            row = await patterns.start(verbs, room, data.created_by)
        return room_pattern(row)

    @get("/pattern")
    async def loaded(self, verbs: VerbsDep, room: FromPath[str]) -> RoomPattern:
        return room_pattern(await verbs.call(NOBODY, "room_pattern", room=room))

    @post("/pattern/run", status_code=201)
    async def run(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[PatternRun]) -> RoomPattern:
        return room_pattern(await patterns.start(verbs, room, data.by))
