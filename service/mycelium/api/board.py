"""Board verbs (block, unblock, dismiss, promote) and the dependency gate setting.

The verbs are SQL functions over field writes (sql/board.sql); their notices come from the
database's triggers, so the same verb typed in psql raises the same notice. The gate lives in
``mycelium.config`` (per room, else hub-wide; off by default), so every replica obeys one setting.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, get, post, put
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import HubDep
from mycelium.api.rooms import require_room
from mycelium.api.tasks import BoardRow, board_row
from mycelium.db.hinted import write_row
from mycelium.db.queries import q
from mycelium.errors import Refusal
from mycelium.hub import Hub


class VerbBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    handle: str = Field(min_length=1, max_length=200)
    on: str | None = Field(default=None, max_length=500)
    url: str | None = Field(default=None, max_length=2000)


class GateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool | None
    handle: str | None = Field(default=None, max_length=200)


class GateRead(BaseModel):
    room: str
    dependency_gate: bool
    room_setting: bool | None
    hub_setting: bool | None


async def gate_read(hub: Hub, room: str) -> GateRead:
    row = await hub.db.fetchrow(q("dependency_gate"), room)
    return GateRead(room=room, dependency_gate=row["dependency_gate"], room_setting=row["room_setting"],
                    hub_setting=row["hub_setting"])


class BoardController(Controller):
    path = "/api/rooms/{room:str}/board"

    @post("/{verb:str}", status_code=200)
    async def verb(self, hub: HubDep, room: FromPath[str], verb: FromPath[str],
                   data: JSONBody[VerbBody]) -> BoardRow:
        key = data.key.lstrip("/")
        if verb == "block":
            await write_row(hub, q("block_row"), room, key, data.handle, data.on)
        elif verb == "unblock":
            await write_row(hub, q("unblock_row"), room, key, data.handle)
        elif verb == "dismiss":
            await write_row(hub, q("dismiss_row"), room, key, data.handle)
        elif verb == "promote":
            await write_row(hub, q("promote_row"), room, key, data.handle, data.url)
        else:
            raise Refusal(404, "unknown_verb",
                          f"the board has no verb '{verb}' (block, unblock, dismiss, promote)",
                          {"verb": verb})
        return board_row(await hub.db.fetchrow(q("board_row"), room, key))

    @get("/gate")
    async def gate(self, hub: HubDep, room: FromPath[str]) -> GateRead:
        await require_room(hub, room)
        return await gate_read(hub, room)

    @put("/gate")
    async def set_gate(self, hub: HubDep, room: FromPath[str], data: JSONBody[GateBody]) -> GateRead:
        await hub.db.fetchval(q("set_dependency_gate"), data.enabled, room, data.handle)
        return await gate_read(hub, room)


@put("/api/board/gate")
async def set_hub_gate(hub: HubDep, data: JSONBody[GateBody]) -> GateRead:
    """The hub-wide gate (rooms without their own setting follow it)."""
    await hub.db.fetchval(q("set_dependency_gate"), data.enabled, "", data.handle)
    return await gate_read(hub, "")


ROUTES: list[Any] = [BoardController, set_hub_gate]
