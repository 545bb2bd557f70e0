"""A handle's events across its rooms, and memory subscriptions.

``GET /api/events?handle=…`` streams (server-sent events) what concerns a handle in every room it
can see, in one order (``id`` = the event's, so a reconnecting client resumes with ``Last-Event-ID``
or ``?after=``; without either, from now on): ``message`` (a message that is a turn for it: a
mention, an addressed message, with the message) and ``memory`` (a memory version written or
deleted under a prefix it follows). ``POST /api/rooms/{room}/subscriptions`` (``handle``,
``prefix``) follows a prefix, ``GET …/subscriptions[?handle=]`` lists, ``DELETE
…/subscriptions?handle=&prefix=`` stops. Behind the token gate an agent streams its own events
only. The rows and the rules are the database's (sql/events.sql); a stream waits on the process's
one listener and re-reads the table after each hint, so open streams hold no connection.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

from litestar import Controller, Request, delete, get, post
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody
from litestar.response import ServerSentEvent, ServerSentEventMessage
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import VERBS, Annotated, HubDep, Query, VerbsDep
from mycelium.auth.middleware import principal_in
from mycelium.conversations.wakes import wait_for
from mycelium.db.listener import Listener
from mycelium.errors import Refusal
from mycelium.hub import Hub
from mycelium.verbs import NOBODY, Actor, Verbs
from mycelium.verbs.messages import message_read

CHANNEL = "mycelium_events"
KEEPALIVE_SECONDS = 15.0
BATCH = 200


class _Hints:
    """The process's event hints by handle (one per listener): a stream waits on its handle's."""

    def __init__(self, listener: Listener) -> None:
        self.by_handle: dict[str, set[asyncio.Event]] = defaultdict(set)
        listener.on(CHANNEL, self._on_hint)
        self._standing = listener.event(CHANNEL)  # (so a reconnect re-runs the callback: wake all)

    def _on_hint(self, _channel: str, handle: str) -> None:
        targets = self.by_handle.values() if not handle else [self.by_handle.get(handle, set())]
        for events in list(targets):
            for event in list(events):
                event.set()


_HINTS: weakref.WeakKeyDictionary[Listener, _Hints] = weakref.WeakKeyDictionary()


async def _hints_of(hub: Hub) -> _Hints:
    listener = hub.wakes
    hints = _HINTS.get(listener)
    if hints is None:
        hints = _HINTS[listener] = _Hints(listener)
        await listener.listen(CHANNEL)
    return hints


def event_body(row: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": row["id"], "kind": row["kind"], "room": row["room"],
                            "handle": row["handle"], "at": row["at"].isoformat()}
    if row["kind"] == "message":
        body["position"] = row["position"]
        body["message"] = (message_read(row["message"]).model_dump(mode="json")
                           if row["message"] is not None else None)
    else:
        body.update(key=row["key"], version=row["version"], op=row["op"], prefix=row["prefix"])
    return body


async def handle_events(hub: Hub, verbs: Verbs, handle: str, after: int
                        ) -> AsyncIterator[ServerSentEventMessage]:
    hints = await _hints_of(hub)
    event = asyncio.Event()
    hints.by_handle[handle].add(event)
    try:
        while True:
            event.clear()
            rows = await verbs.call(NOBODY, "handle_events_after", handle=handle, after=after, limit=BATCH)
            for row in rows:
                after = row["id"]
                data = json.dumps(event_body(row))
                yield ServerSentEventMessage(data=data, event=row["kind"], id=str(after))
            if len(rows) == BATCH:
                continue
            if not await wait_for(event, KEEPALIVE_SECONDS):
                yield ServerSentEventMessage(comment="keepalive")
    finally:
        hints.by_handle[handle].discard(event)
        if not hints.by_handle[handle]:
            hints.by_handle.pop(handle, None)


def _own(request: Request[Any, Any, Any], handle: str) -> str:
    """The handle a caller may follow: behind the gate, an agent's own (an operator's: any)."""
    wanted = handle.strip().lstrip("@").lower()
    if not wanted:
        raise Refusal(422, "missing_handle", "give the handle whose events to follow (handle)",
                      {"field": "handle"})
    principal = principal_in(request.scope)
    if principal is not None and principal.role != "operator" and principal.handle != wanted:
        raise Refusal(403, "not_your_events",
                      f"@{principal.handle} may follow its own events, not @{wanted}'s")
    return wanted


@get("/api/events", dependencies=VERBS)
async def events(
    request: Request[Any, Any, Any], hub: HubDep, verbs: VerbsDep, handle: FromQuery[str] = "",
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, HeaderParameter(name="last-event-id")] = None,
) -> ServerSentEvent:
    who = _own(request, handle)
    start: Any = after
    if start is None and last_event_id and last_event_id.strip().isdigit():
        start = int(last_event_id.strip())
    if start is None:
        start = await verbs.call(NOBODY, "handle_events_head", handle=who)
    return ServerSentEvent(handle_events(hub, verbs, who, int(start)))


class Subscribe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: str = Field(min_length=1, max_length=200)
    prefix: str = Field(default="", max_length=512)


class Subscription(BaseModel):
    room: str
    handle: str
    prefix: str
    created_at: Any


class SubscriptionController(Controller):
    path = "/api/rooms/{room:str}/subscriptions"
    dependencies = VERBS

    @post("/", status_code=201)
    async def subscribe(self, request: Request[Any, Any, Any], verbs: VerbsDep, room: FromPath[str],
                        data: JSONBody[Subscribe]) -> Subscription:
        who = _own(request, data.handle)
        row = await verbs.call(Actor.declared(who), "subscribe_memory", room=room, handle=who,
                               prefix=data.prefix)
        return Subscription(**dict(row))

    @get("/")
    async def subscriptions(self, verbs: VerbsDep, room: FromPath[str], handle: FromQuery[str | None] = None
                            ) -> list[Subscription]:
        rows = await verbs.call(NOBODY, "memory_subscriptions", room=room, handle=handle)
        return [Subscription(**dict(r)) for r in rows]

    @delete("/", status_code=200)
    async def unsubscribe(self, request: Request[Any, Any, Any], verbs: VerbsDep, room: FromPath[str],
                          handle: FromQuery[str] = "", prefix: FromQuery[str] = "") -> Subscription:
        who = _own(request, handle)
        row = await verbs.call(Actor.declared(who), "unsubscribe_memory", room=room, handle=who,
                               prefix=prefix)
        return Subscription(**dict(row))


ROUTES = [events, SubscriptionController]
