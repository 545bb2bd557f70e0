"""Engines, the room's agents, summons by name, flows and episodes.

``POST /api/rooms/{room}/engines`` registers an engine (upstream's ``agents/<handle>`` manifest is
written with it); ``GET …/agents`` lists the room's members with kind and presence; ``POST
…/engines/{handle}/invoke`` and ``POST …/coordinate`` summon an engine by posting the mention the
database records as a summon; ``GET …/protocols`` lists the room's flows then the built-ins; ``GET
…/episodes`` and ``…/episodes/{short_id}`` answer in upstream's shapes.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, get, post
from litestar.params import FromPath, JSONBody

from mycelium.api.deps import VERBS, Annotated, Query, VerbsDep
from mycelium.engines.flows import BUILT_IN, FlowError, parse_protocol
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.engines import (
    AgentRead,
    Coordinate,
    EngineCreate,
    EngineInvoke,
    EpisodeDetailRead,
    EpisodeListResponse,
    agent_read,
    engine_read,
    episode_detail,
    episode_summary,
)
from mycelium.verbs.messages import MessageRead, message_read


class EngineController(Controller):
    path = "/api/rooms/{room:str}"
    dependencies = VERBS

    @post("/engines", status_code=201)
    async def create(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[EngineCreate]) -> AgentRead:
        row = await verbs.call(
            Actor.declared(data.created_by, "person"),
            "create_engine",
            room=room,
            handle=data.handle,
            kind=data.kind,
            description=data.description,
            by=None,
        )
        return engine_read(row)

    @get("/engines")
    async def engines(self, verbs: VerbsDep, room: FromPath[str]) -> list[AgentRead]:
        return [engine_read(r) for r in await verbs.call(NOBODY, "list_engines", room=room)]

    @get("/agents")
    async def agents(self, verbs: VerbsDep, room: FromPath[str]) -> list[AgentRead]:
        return [agent_read(r) for r in await verbs.call(NOBODY, "room_agents", room=room)]

    @post("/engines/{handle:str}/invoke", status_code=201)
    async def invoke(
        self, verbs: VerbsDep, room: FromPath[str], handle: FromPath[str], data: JSONBody[EngineInvoke]
    ) -> MessageRead:
        row = await verbs.call(
            Actor.declared(data.sender_handle),
            "invoke_engine",
            room=room,
            engine=handle,
            text=data.text,
            episode=data.episode,
            by=None,
        )
        return message_read(row)

    @post("/coordinate", status_code=201)
    async def coordinate(
        self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[Coordinate]
    ) -> MessageRead:
        row = await verbs.call(
            Actor.declared(data.sender_handle),
            "coordinate",
            room=room,
            key=data.key,
            engine=data.engine,
            text=data.text,
            by=None,
        )
        return message_read(row)

    @get("/protocols")
    async def protocols(self, verbs: VerbsDep, room: FromPath[str]) -> list[dict[str, Any]]:
        await verbs.call(NOBODY, "timeline_head", room=room)  # 404 without the room
        out: list[dict[str, Any]] = []
        for row in await verbs.call(NOBODY, "room_protocols", room=room):
            try:
                flow = parse_protocol(row["body"], row["name"])
            except FlowError as exc:
                out.append({"name": row["name"], "source": "room", "valid": False, "problem": str(exc)})
                continue
            out.append({"name": flow.name, "source": "room", "valid": True, **flow.as_dict()})
        out += [{"source": "built-in", "valid": True, **p.as_dict()} for p in BUILT_IN.values()]
        return out

    @get("/episodes")
    async def episodes(
        self, verbs: VerbsDep, room: FromPath[str], limit: Annotated[int, Query(ge=1, le=500)] = 50
    ) -> EpisodeListResponse:
        rows = await verbs.call(NOBODY, "list_episodes", room=room, limit=limit)
        return EpisodeListResponse(episodes=[episode_summary(r) for r in rows])

    @get("/episodes/{short_id:str}")
    async def episode(
        self, verbs: VerbsDep, room: FromPath[str], short_id: FromPath[str]
    ) -> EpisodeDetailRead:
        row = await verbs.call(NOBODY, "get_episode", room=room, short_id=short_id)
        if row is None:
            await verbs.call(NOBODY, "timeline_head", room=room)  # 404 room_not_found first
            raise Refusal(
                404,
                "episode_not_found",
                f"No episode {short_id!r} in room {room!r}",
                {"room": room, "short_id": short_id},
            )
        messages = await verbs.call(NOBODY, "episode_messages", room=room, short_id=short_id)
        return episode_detail(row, messages)
