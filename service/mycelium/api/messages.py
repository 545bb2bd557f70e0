"""Messages: post, list (newest first, backward cursor), amend, search — ``/api/rooms/{room}/messages``.

Every write goes through ``mycelium.post_message`` / ``amend_message``, so the thread write gate
(floors, frozen rosters, unknown threads) refuses here exactly as it refuses a ``psql`` INSERT.
A chat message is an ``exchange`` with payload type ``message`` whose payload holds the upstream
``message_type`` and event ``metadata``; reads fold amendments into the newest text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.api.rooms import require_room
from mycelium.conversations import search
from mycelium.core.handles import same_handle
from mycelium.db.hinted import write_row
from mycelium.db.queries import q
from mycelium.errors import Refusal
from mycelium.hub import Hub

MESSAGE_TYPES = ("announce", "direct", "broadcast", "delegate", "event")
EVENT_STATUSES = ("open", "in_progress", "resolved")


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["pr", "commit", "issue", "page", "message"]
    ref: str = Field(min_length=1, max_length=500)
    url: str | None = Field(default=None, max_length=2000)


class EventMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(min_length=1, max_length=100)
    ttl_seconds: float | None = Field(default=None, gt=0)
    status: Literal["open", "in_progress", "resolved"] | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    provenance: list[Provenance] = Field(default_factory=list)
    correlation_id: str | None = Field(default=None, max_length=200)


class MessageCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sender_handle: str = Field(min_length=1, max_length=200)
    recipient_handle: str | None = Field(default=None, max_length=200)
    message_type: Literal["announce", "direct", "broadcast", "delegate", "event"] = "broadcast"
    content: str = Field(min_length=1, max_length=100_000)
    metadata: EventMetadata | None = None
    episode: str | None = Field(default=None, max_length=500)

    @model_validator(mode="after")
    def _event_has_metadata(self) -> MessageCreate:
        if self.message_type == "event" and self.metadata is None:
            raise ValueError("an event message needs metadata (at least its kind)")
        return self


class MessageAmend(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=100_000)
    sender_handle: str | None = Field(default=None, max_length=200)


class MessageRead(BaseModel):
    id: str
    room_name: str
    position: int
    coordination_session_id: str | None = None
    sender_handle: str
    sender_role: str
    recipient_handle: str | None
    recipients: list[str]
    message_type: str
    content: str
    metadata: dict[str, Any] | None
    episode: str
    kind: str
    subkind: str | None
    payload_type: str
    payload: dict[str, Any]
    parents: list[str]
    mentions: list[str]
    silent_mentions: list[str]
    edited_at: datetime | None
    created_at: datetime


def message_read(row: Any) -> MessageRead:
    """A timeline row (or a bare messages row) as the API shows it."""
    payload = row["payload"] or {}
    recipients = list(row["recipients"])
    text = row["text"] if "text" in row.keys() else row["content"]  # noqa: SIM118 (asyncpg Record)
    edited = row["edited_at"] if "edited_at" in row.keys() else None  # noqa: SIM118
    metadata = payload.get("metadata")
    return MessageRead(
        id=str(row["id"]), room_name=row["room"], position=row["position"],
        sender_handle=row["sender"], sender_role=row["sender_role"],
        recipient_handle=recipients[0] if recipients else None, recipients=recipients,
        message_type=str(payload.get("message_type") or row["payload_type"]), content=text,
        metadata=metadata if isinstance(metadata, dict) else None, episode=row["episode"], kind=row["kind"],
        subkind=row["subkind"], payload_type=row["payload_type"], payload=payload,
        parents=[str(p) for p in row["parents"]], mentions=list(row["mentions"]),
        silent_mentions=list(row["silent_mentions"]), edited_at=edited, created_at=row["created_at"],
    )


def refuse_reserved(handle: str, field: str) -> None:
    """``system`` is the hub's own actor: no client writes as it."""
    if same_handle(handle, "system"):
        raise Refusal(403, "reserved_handle", f"{field}: @system is the hub itself; write as yourself",
                      {"field": field})


async def episode_urn(hub: Hub, room: str, ref: str | None) -> str | None:
    """A thread reference (URN, short id, ``live``) as the URN the timeline stores; None stays None."""
    if ref is None or not ref.strip():
        return None
    urn: str = await hub.db.fetchval(q("episode_ref"), room, ref)
    return urn


def parse_before(raw: str | None) -> tuple[int | None, datetime | None]:
    """``before`` is a position (the backward cursor) or an ISO time."""
    if raw is None or not raw.strip():
        return None, None
    text = raw.strip()
    if text.isdigit():
        return int(text), None
    try:
        return None, _aware(datetime.fromisoformat(text))
    except ValueError:
        raise Refusal(422, "invalid_request", f"before: {raw!r} is neither a position nor an ISO time",
                      {"field": "before"}) from None


def _aware(moment: datetime) -> datetime:
    from datetime import UTC

    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


class MessageController(Controller):
    path = "/api/rooms/{room:str}/messages"

    @post("/", status_code=201)
    async def post_message(
        self, hub: HubDep, room: FromPath[str], data: JSONBody[MessageCreate]
    ) -> MessageRead:
        refuse_reserved(data.sender_handle, "sender_handle")
        payload: dict[str, Any] = {"message_type": data.message_type}
        if data.metadata is not None:
            payload["metadata"] = data.metadata.model_dump(mode="json")
        recipients = [data.recipient_handle] if data.recipient_handle else []
        row = await write_row(
            hub, q("post_message"), room, data.sender_handle, data.content, data.episode, recipients,
            "exchange", None, "message", payload, [], "agent",
        )
        return message_read(row)

    @get("/")
    async def list_messages(
        self, hub: HubDep, room: FromPath[str],
        limit: Annotated[int, Query(ge=1, le=500)] = 50, offset: Annotated[int, Query(ge=0)] = 0,
        sender: FromQuery[str | None] = None, message_type: FromQuery[str | None] = None,
        kind: FromQuery[str | None] = None, status: FromQuery[str | None] = None,
        since: FromQuery[datetime | None] = None, before: FromQuery[str | None] = None,
        episode: FromQuery[str | None] = None,
    ) -> list[MessageRead]:
        await require_room(hub, room)
        before_position, before_time = parse_before(before)
        rows = await hub.db.fetch(
            q("list_messages"), room, sender, message_type, kind, status,
            _aware(since) if since else None, before_position, before_time,
            await episode_urn(hub, room, episode), offset, limit,
        )
        return [message_read(r) for r in rows]

    @post("/{message_id:str}/amend", status_code=201)
    async def amend(
        self, hub: HubDep, room: FromPath[str], message_id: FromPath[str], data: JSONBody[MessageAmend]
    ) -> MessageRead:
        try:
            uid = UUID(message_id)
        except ValueError:
            await require_room(hub, room)
            raise Refusal(404, "message_not_found", f"no message {message_id} in room {room!r}",
                          {"room": room, "id": message_id}) from None
        row = await write_row(hub, q("amend_message"), room, uid, data.content, data.sender_handle)
        return message_read(row)

    @get("/search")
    async def search(
        self, hub: HubDep, room: FromPath[str], q_: Annotated[str, Query(name="q", max_length=2000)] = "",
        limit: Annotated[int, Query(ge=1, le=200)] = 20, cursor: FromQuery[str | None] = None,
        context: Annotated[int, Query(ge=0, le=5)] = 0,
    ) -> dict[str, Any]:
        await require_room(hub, room)
        result = await search.search_messages(hub, room, q_, limit=limit, cursor=cursor, context=context)
        return result.body(message_read)
