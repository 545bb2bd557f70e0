"""Messages: post, list (newest first, backward cursor), amend, search — ``/api/rooms/{room}/messages``.

Every write goes through ``mycelium.post_message`` / ``amend_message``, so the thread write gate
(floors, frozen rosters, unknown threads) and the reserved senders are refused here exactly as from
``psql``. A chat message is an ``exchange`` with payload type ``message``; reads fold amendments into
the newest text (``mycelium.verbs.messages``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, Annotated, Offset, Query, VerbsDep
from mycelium.conversations import search
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.messages import (
    MessageAmend,
    MessageCreate,
    MessageRead,
    aware,
    message_read,
    parse_before,
)


class MessageController(Controller):
    path = "/api/rooms/{room:str}/messages"
    dependencies = VERBS

    @post("/", status_code=201)
    async def post_message(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[MessageCreate]
                           ) -> MessageRead:
        row = await verbs.call(Actor.declared(data.sender_handle), "post_message", **data.post_params(room))
        return message_read(row)

    @get("/")
    async def list_messages(
        self, verbs: VerbsDep, room: FromPath[str],
        limit: Annotated[int, Query(ge=1, le=500)] = 50, offset: Offset = 0,
        sender: FromQuery[str | None] = None, message_type: FromQuery[str | None] = None,
        kind: FromQuery[str | None] = None, status: FromQuery[str | None] = None,
        since: FromQuery[datetime | None] = None, before: FromQuery[str | None] = None,
        episode: FromQuery[str | None] = None,
    ) -> list[MessageRead]:
        before_position, before_time = parse_before(before)
        rows = await verbs.call(
            NOBODY, "list_messages", room=room, sender=sender, message_type=message_type, kind=kind,
            status=status, since=aware(since) if since else None, before_position=before_position,
            before_time=before_time, episode=episode, offset=offset, limit=limit,
        )
        return [message_read(r) for r in rows]

    @post("/{message_id:str}/amend", status_code=201)
    async def amend(
        self, verbs: VerbsDep, room: FromPath[str], message_id: FromPath[str], data: JSONBody[MessageAmend]
    ) -> MessageRead:
        try:
            uid = UUID(message_id)
        except ValueError:
            await verbs.call(NOBODY, "room_known", room=room)
            raise Refusal(404, "message_not_found", f"no message {message_id} in room {room!r}",
                          {"room": room, "id": message_id}) from None
        row = await verbs.call(Actor.declared(data.sender_handle), "amend_message", room=room, id=uid,
                               content=data.content, sender=data.sender_handle)
        return message_read(row)

    @get("/search")
    async def search(
        self, verbs: VerbsDep, room: FromPath[str], q: Annotated[str, Query(max_length=2000)] = "",
        limit: Annotated[int, Query(ge=1, le=200)] = 20, cursor: FromQuery[str | None] = None,
        context: Annotated[int, Query(ge=0, le=5)] = 0,
    ) -> dict[str, Any]:
        result = await search.search_messages(verbs, room, q, limit=limit, cursor=cursor, context=context)
        return result.body(message_read)
