"""The board: tasks, leases, fields, board verbs and the dependency gate; the request models and the
answers every transport shares."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_TTL_MINUTES = 30

Filter = Literal["needs-you", "needs_you", "in-flight", "in_flight", "resolved", "all"]
BoardVerb = Literal["block", "unblock", "dismiss", "promote"]
RowKey = Annotated[str, Field(min_length=1, max_length=512)]


class TaskCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=500)
    handle: str = Field(min_length=1, max_length=200)
    key: str | None = Field(default=None, max_length=512)
    assignee: str | None = Field(default=None, max_length=200)
    parent: str | None = Field(default=None, max_length=512)
    depends_on: list[RowKey] | None = Field(default=None, max_length=100)


class BoardRow(BaseModel):
    room: str
    key: str
    namespace: str
    title: str | None
    status: str | None
    kind: str | None
    priority: str | None
    assignee: str | None
    blocked_by: str | None
    parent: str | None
    episode: str
    short_id: str
    version: int
    created_by: str
    updated_by: str
    created_at: datetime
    updated_at: datetime
    assignment: str | None
    owner: str | None
    claimed_at: datetime | None
    ttl_minutes: int | None
    expires_at: datetime | None
    freshness: str | None
    waiting_on: list[str]
    attention: str


def board_row(row: Any) -> BoardRow:
    return BoardRow(**{k: row[k] for k in BoardRow.model_fields})


def attention_of(choice: Filter) -> str | None:
    """The board_rows attention a filter selects (None: every row)."""
    return None if choice == "all" else choice.replace("-", "_")


# -- leases ----------------------------------------------------------------------------------------

class ClaimBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    handle: str = Field(min_length=1, max_length=200)
    ttl_minutes: int = Field(default=DEFAULT_TTL_MINUTES, ge=1, le=100_000)
    force: bool = False


class ReleaseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    handle: str = Field(min_length=1, max_length=200)
    note: str | None = Field(default=None, max_length=2000)
    force: bool = False


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    handle: str = Field(min_length=1, max_length=200)


class RenewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: str = Field(min_length=1, max_length=200)


class AssignmentRead(BaseModel):
    room: str
    key: str
    title: str | None
    episode: str
    assignment: str
    waiting_on: list[str]
    owner: str | None
    claimed_at: datetime | None
    ttl_minutes: int | None
    expires_at: datetime | None
    freshness: str | None
    version: int
    lease_version: int
    assignment_note: str | None
    assignment_note_by: str | None


class AssignmentWatch(AssignmentRead):
    since: str
    changed: bool


class Renewed(BaseModel):
    key: str
    claimed_at: datetime
    ttl_minutes: int


class RenewResult(BaseModel):
    room: str
    handle: str
    renewed: list[Renewed]


def assignment_read(row: Any) -> AssignmentRead:
    return AssignmentRead(**{k: row[k] for k in AssignmentRead.model_fields})


def renew_result(room: str, handle: str, rows: list[Any]) -> RenewResult:
    return RenewResult(room=room, handle=handle,
                       renewed=[Renewed(key=r["key"], claimed_at=r["claimed_at"],
                                        ttl_minutes=r["ttl_minutes"]) for r in rows])


# -- fields, board verbs, the gate -----------------------------------------------------------------

class FieldsWrite(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    handle: str = Field(min_length=1, max_length=200)
    fields: dict[str, Any]


class FieldsRead(BaseModel):
    room: str
    key: str
    version: int
    fields: dict[str, Any]


class VerbBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    handle: str = Field(min_length=1, max_length=200)
    on: str | None = Field(default=None, max_length=500)
    url: str | None = Field(default=None, max_length=2000)


def board_verb_params(verb: BoardVerb, body: VerbBody) -> dict[str, Any]:
    """The parameters of the SQL verb ``<verb>_row`` for a board verb's body."""
    params: dict[str, Any] = {"key": body.key.lstrip("/"), "handle": body.handle}
    if verb == "block":
        params["on"] = body.on
    elif verb == "promote":
        params["url"] = body.url
    return params


class GateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool | None
    handle: str | None = Field(default=None, max_length=200)


class GateRead(BaseModel):
    room: str
    dependency_gate: bool
    room_setting: bool | None
    hub_setting: bool | None


def gate_read(room: str, row: Any) -> GateRead:
    return GateRead(room=room, dependency_gate=row["dependency_gate"], room_setting=row["room_setting"],
                    hub_setting=row["hub_setting"])
