"""Messages and replies: the request models and the answers every transport shares.

A chat message is an ``exchange`` with payload type ``message`` whose payload holds the upstream
``message_type`` and event ``metadata``; reads fold amendments into the newest text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mycelium.core import markers
from mycelium.errors import Refusal
from mycelium.verbs.actor import Actor
from mycelium.verbs.gateway import Verbs

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

    def post_params(self, room: str) -> dict[str, Any]:
        """The parameters of ``post_message`` for this message."""
        payload: dict[str, Any] = {"message_type": self.message_type}
        if self.metadata is not None:
            payload["metadata"] = self.metadata.model_dump(mode="json")
        return {"room": room, "sender": self.sender_handle, "content": self.content, "episode": self.episode,
                "recipients": [self.recipient_handle] if self.recipient_handle else [], "kind": "exchange",
                "subkind": None, "payload_type": "message", "payload": payload, "parents": [],
                "sender_role": "agent"}


class MessageAmend(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=100_000)
    sender_handle: str | None = Field(default=None, max_length=200)


class ReplyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=100_000)
    episode: str | None = Field(default=None, max_length=500)


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


async def reply(verbs: Verbs, room: str, handle: str, text: str, episode: str | None) -> dict[str, Any]:
    """``handle``'s answer recorded as ``/reply`` records it (its ``[[mycelium: …]]`` markers lifted
    into the payload, stripped from the prose), on whichever surface it came: HTTP or a room's SLIM
    channel. Refused by the database as any write is."""
    lifted, prose = markers.lift_reply(text)
    row = await verbs.call(Actor.declared(handle), "reply", room=room, handle=handle, text=prose,
                           data=lifted, episode=episode)
    return reply_read(room, row)


def reply_read(room: str, row: Any) -> dict[str, Any]:
    return {"room": room, "handle": row["sender"], "message_id": str(row["id"]), "position": row["position"],
            "episode": row["episode"], "parents": [str(p) for p in row["parents"]]}


def aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def parse_before(raw: str | None) -> tuple[int | None, datetime | None]:
    """``before`` is a position (the backward cursor) or an ISO time."""
    if raw is None or not raw.strip():
        return None, None
    text = raw.strip()
    if text.isdigit():
        return int(text), None
    try:
        return None, aware(datetime.fromisoformat(text))
    except ValueError:
        raise Refusal(422, "invalid_request", f"before: {raw!r} is neither a position nor an ISO time",
                      {"field": "before"}) from None
