"""Server-held participation: ``GET /api/rooms/{room}/await`` and ``POST /api/rooms/{room}/reply``.

A turn-based agent cannot keep a socket open between its turns, so the hub keeps its place: a
durable per-handle cursor in the database (``mycelium.take_next``) and a presence lease refreshed by
every call. ``await`` long-polls for the next message addressed to the handle; ``reply`` records the
agent's answer through the same thread write gate as ``/messages``, with its ``[[mycelium: …]]``
markers lifted into the payload and stripped from the prose.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, post
from litestar import get as get_route
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, Annotated, HubDep, Query, VerbsDep
from mycelium.conversations import digest as wake_digest
from mycelium.conversations.inbox import MAX_WAIT_SECONDS, await_next
from mycelium.core.envelope import topic_urn
from mycelium.verbs import Actor
from mycelium.verbs.messages import ReplyBody, message_read
from mycelium.verbs.messages import reply as record_reply


async def _disconnected(request: Request[Any, Any, Any]) -> None:
    """Complete when the client hangs up (the request body of a GET is empty, so receive() is ours)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


@get_route("/api/rooms/{room:str}/await", dependencies=VERBS)
async def await_message(
    request: Request[Any, Any, Any], hub: HubDep, verbs: VerbsDep, room: FromPath[str],
    handle: FromQuery[str],
    timeout: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0.0,
    episode: FromQuery[str | None] = None,
    digest: FromQuery[bool] = False,
) -> dict[str, Any]:
    """The next message addressed to ``handle`` (``timeout`` seconds at most; 0 = the maximum).

    ``digest=true`` adds the wake digest (``digest``, its text, and ``wake``, its facts): why it
    woke, what changed since its last turn, its tasks and the board, who asked, where to reply.
    An unknown room or a bad handle is refused by the first ``take_next``, before any waiting."""
    row = await await_next(hub, room, handle, episode=episode, timeout=timeout,
                           gone=lambda: _disconnected(request), verbs=verbs)
    me = handle.strip()
    if row is None:
        return {"room": room, "handle": me, "message": None}
    message = message_read(row)
    answer = {
        "room": room, "handle": me, "prompt": message.content, "sender": message.sender_handle,
        "episode": message.episode, "topic": topic_urn(room), "message_id": message.id,
        "message": message.model_dump(mode="json"),
    }
    if digest:
        wake = await verbs.call(Actor.declared(handle), "wake_digest", room=room, handle=handle,
                                message=row["id"])
        answer.update(digest=wake_digest.render(room, wake), wake=wake)
    return answer


@post("/api/rooms/{room:str}/reply", status_code=201, dependencies=VERBS)
async def reply(verbs: VerbsDep, room: FromPath[str], data: JSONBody[ReplyBody]) -> dict[str, Any]:
    """Record ``handle``'s answer; it lands in ``episode`` (or the room), never implicitly elsewhere."""
    return await record_reply(verbs, room, data.handle, data.text, data.episode)


ROUTES = [await_message, reply]
