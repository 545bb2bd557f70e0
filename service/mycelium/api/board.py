"""Board verbs (block, unblock, dismiss, promote) and the dependency gate setting.

The verbs are SQL functions over field writes (sql/board.sql); their notices come from the
database's triggers, so the same verb typed in psql raises the same notice. The gate lives in
``mycelium.config`` (per room, else hub-wide; off by default), so every replica obeys one setting.
"""

from __future__ import annotations

from typing import Any, get_args

from litestar import Controller, get, post, put
from litestar.params import FromPath, JSONBody

from mycelium.api.deps import VERBS, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor, Verbs
from mycelium.verbs.board import (
    BoardRow,
    BoardVerb,
    GateBody,
    GateRead,
    VerbBody,
    board_row,
    board_verb_params,
    gate_read,
)

VERB_NAMES: tuple[BoardVerb, ...] = get_args(BoardVerb)


class BoardController(Controller):
    path = "/api/rooms/{room:str}/board"
    dependencies = VERBS

    @post("/{verb:str}", status_code=200)
    async def verb(self, verbs: VerbsDep, room: FromPath[str], verb: FromPath[str],
                   data: JSONBody[VerbBody]) -> BoardRow:
        if verb not in VERB_NAMES:
            raise Refusal(404, "unknown_verb",
                          f"the board has no verb '{verb}' ({', '.join(VERB_NAMES)})", {"verb": verb})
        params = board_verb_params(verb, data)  # type: ignore[arg-type]
        await verbs.call(Actor.declared(data.handle), f"{verb}_row", room=room, **params)
        return board_row(await verbs.call(NOBODY, "board_row", room=room, ref=params["key"]))

    @get("/gate")
    async def gate(self, verbs: VerbsDep, room: FromPath[str]) -> GateRead:
        return await _gate(verbs, room)

    @put("/gate")
    async def set_gate(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[GateBody]) -> GateRead:
        return await _set_gate(verbs, room, data)


@put("/api/board/gate", dependencies=VERBS)
async def set_hub_gate(verbs: VerbsDep, data: JSONBody[GateBody]) -> GateRead:
    """The hub-wide gate (rooms without their own setting follow it)."""
    return await _set_gate(verbs, "", data)


async def _gate(verbs: Verbs, room: str) -> GateRead:
    return gate_read(room, await verbs.call(NOBODY, "dependency_gate", room=room))


async def _set_gate(verbs: Verbs, room: str, data: GateBody) -> GateRead:
    await verbs.call(Actor.declared(data.handle), "write_dependency_gate", enabled=data.enabled, room=room,
                     handle=data.handle)
    return await _gate(verbs, room)


ROUTES: list[Any] = [BoardController, set_hub_gate]
