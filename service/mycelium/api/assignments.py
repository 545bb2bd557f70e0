"""Assignments: leases on ``work/`` rows (claim, release, resolve, renew, read, watch).

Each verb is one SQL function (sql/assignments.sql) that decides under the row lock, so two hub
replicas and a person in psql obey the same rules; the routes only shape bodies. The watch waits on
the process's one listener and the clock (mycelium.board.watch).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import Annotated, HubDep, Query
from mycelium.board.watch import MAX_WAIT_S, watch_lease
from mycelium.db.hinted import write_row, write_rows
from mycelium.db.queries import q

DEFAULT_TTL_MINUTES = 30


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


class AssignmentController(Controller):
    path = "/api/rooms/{room:str}/assignments"

    @post("/claim", status_code=200)
    async def claim(self, hub: HubDep, room: FromPath[str], data: JSONBody[ClaimBody]) -> AssignmentRead:
        row = await write_row(hub, q("claim"), room, data.key, data.handle, data.ttl_minutes, data.force)
        return assignment_read(row)

    @post("/release", status_code=200)
    async def release(self, hub: HubDep, room: FromPath[str], data: JSONBody[ReleaseBody]) -> AssignmentRead:
        row = await write_row(hub, q("release"), room, data.key, data.handle, data.note)
        return assignment_read(row)

    @post("/resolve", status_code=200)
    async def resolve(self, hub: HubDep, room: FromPath[str], data: JSONBody[ResolveBody]) -> AssignmentRead:
        row = await write_row(hub, q("resolve"), room, data.key, data.handle)
        return assignment_read(row)

    @post("/renew", status_code=200)
    async def renew(self, hub: HubDep, room: FromPath[str], data: JSONBody[RenewBody]) -> RenewResult:
        rows = await write_rows(hub, q("renew"), room, data.handle)
        return RenewResult(room=room, handle=data.handle,
                           renewed=[Renewed(key=r["key"], claimed_at=r["claimed_at"],
                                            ttl_minutes=r["ttl_minutes"]) for r in rows])

    @get("/await")
    async def watch(
        self, hub: HubDep, room: FromPath[str], key: FromQuery[str], since: FromQuery[str | None] = None,
        timeout: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 30.0,
    ) -> AssignmentWatch:
        seen = await watch_lease(hub, room, key.lstrip("/"), since, timeout)
        read = assignment_read(seen.read).model_dump()
        return AssignmentWatch(**read, since=seen.since, changed=seen.changed)

    @get("/{key:path}")
    async def read(self, hub: HubDep, room: FromPath[str], key: FromPath[str]) -> AssignmentRead:
        row = await hub.db.fetchrow(q("read_assignment"), room, key.lstrip("/"))
        return assignment_read(row)
