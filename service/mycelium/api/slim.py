"""A room's SLIM channel over HTTP: who is on it, and asking to be on it (the moderator then invites
the member's SLIM name) or to leave it. The channel itself is SLIM's: see mycelium.slim."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, delete, get, post
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import VERBS, HubDep, VerbsDep
from mycelium.slim import wire
from mycelium.verbs import NOBODY, Actor


class SlimJoin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: Annotated[str, Field(min_length=1, max_length=200)]


def _channel(hub: Any, room: str) -> dict[str, Any]:
    settings = hub.settings
    return {"room": room, "enabled": settings.slim == "on", "endpoint": settings.slim_endpoint,
            "identity": settings.slim_identity, "channel": wire.channel_name(room),
            "moderator": wire.moderator_name(room)}


class SlimController(Controller):
    path = "/api/rooms/{room:str}/slim"
    dependencies = VERBS

    @get("/")
    async def channel(self, hub: HubDep, verbs: VerbsDep, room: FromPath[str]) -> dict[str, Any]:
        """The room's channel: where it is, how far it has published, who is on it."""
        members = await verbs.call(NOBODY, "slim_roster", room=room)
        row = await verbs.call(NOBODY, "slim_channel", room=room)
        head = await verbs.call(NOBODY, "timeline_head", room=room)
        return {**_channel(hub, room), "head": head,
                "published": row["published"] if row else 0, "publisher": row["publisher"] if row else None,
                "members": [{"handle": m["handle"], "name": wire.member_name(room, m["handle"]),
                             "joined_at": m["joined_at"]} for m in members]}

    @post("/members", status_code=201)
    async def join(self, hub: HubDep, verbs: VerbsDep, room: FromPath[str],
                   data: JSONBody[SlimJoin]) -> dict[str, Any]:
        """Be on the channel as ``handle``: the moderator invites ``mycelium/<room>/<handle>``, which
        must be listening on the node (a private room admits its members only: 403)."""
        row = await verbs.call(Actor.declared(data.handle), "slim_join", room=room, handle=data.handle)
        return {**_channel(hub, room), "handle": row["handle"], "joined_at": row["joined_at"],
                "name": wire.member_name(room, row["handle"])}

    @delete("/members/{handle:str}", status_code=200)
    async def leave(self, verbs: VerbsDep, room: FromPath[str], handle: FromPath[str]) -> dict[str, Any]:
        left = await verbs.call(Actor.declared(handle), "slim_leave", room=room, handle=handle)
        return {"room": room, "handle": handle, "left": bool(left)}


ROUTES = [SlimController]
