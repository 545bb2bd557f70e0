"""``GET /api/rooms/{room}/messages/stream``: the room's timeline as server-sent events.

Each event is one message (``id`` = its position, so a reconnecting client resumes with
``Last-Event-ID`` or ``?after=``). The stream waits on the process's one listener like every other
waiter and re-reads the table after each hint, so a thousand open streams hold no connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from litestar import get
from litestar.params import FromPath, HeaderParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from mycelium.api.deps import VERBS, Annotated, HubDep, Query, VerbsDep
from mycelium.conversations.wakes import wait_for, waiters_of
from mycelium.hub import Hub
from mycelium.verbs import NOBODY, Verbs, verbs_of
from mycelium.verbs.messages import message_read

#: Send a comment this often so proxies keep an idle stream open.
KEEPALIVE_SECONDS = 15.0
BATCH = 200


async def timeline_events(hub: Hub, room: str, after: int, verbs: Verbs | None = None
                          ) -> AsyncIterator[ServerSentEventMessage]:
    waiters = await waiters_of(hub)
    verbs = verbs or verbs_of(hub)
    event = waiters.for_room(room)
    try:
        while True:
            event.clear()
            rows = await verbs.call(NOBODY, "messages_after", room=room, after=after, limit=BATCH)
            for row in rows:
                after = row["position"]
                body = message_read(row).model_dump(mode="json")
                yield ServerSentEventMessage(data=json.dumps(body), event="message", id=str(after))
            if len(rows) == BATCH:
                continue
            if not await wait_for(event, KEEPALIVE_SECONDS):
                yield ServerSentEventMessage(comment="keepalive")
    finally:
        waiters.drop_room(room, event)


@get("/api/rooms/{room:str}/messages/stream", dependencies=VERBS)
async def stream(
    hub: HubDep, verbs: VerbsDep, room: FromPath[str],
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, HeaderParameter(name="last-event-id")] = None,
) -> ServerSentEvent:
    """Messages after ``after`` (or ``Last-Event-ID``); without either, from now on. An unknown room
    is refused (404) before the stream opens."""
    start: Any = after
    if start is None and last_event_id and last_event_id.strip().isdigit():
        start = int(last_event_id.strip())
    head = await verbs.call(NOBODY, "timeline_head", room=room)
    if start is None:
        start = head
    return ServerSentEvent(timeline_events(hub, room, int(start), verbs))


ROUTES = [stream]
