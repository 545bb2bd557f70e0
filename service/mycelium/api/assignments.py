"""Assignments: leases on ``work/`` rows (claim, release, resolve, renew, read, watch).

Each verb is one SQL function (sql/assignments.sql) that decides under the row lock, so two hub
replicas and a person in psql obey the same rules; the routes only shape bodies. The watch waits on
the process's one listener and the clock (mycelium.board.watch).
"""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from mycelium.api.deps import VERBS, Annotated, HubDep, Query, VerbsDep
from mycelium.board.watch import MAX_WAIT_S, watch_lease
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.board import (
    AssignmentRead,
    AssignmentWatch,
    ClaimBody,
    ReleaseBody,
    RenewBody,
    RenewResult,
    ResolveBody,
    assignment_read,
    renew_result,
)


class AssignmentController(Controller):
    path = "/api/rooms/{room:str}/assignments"
    dependencies = VERBS

    @post("/claim", status_code=200)
    async def claim(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[ClaimBody]) -> AssignmentRead:
        row = await verbs.call(Actor.declared(data.handle), "claim_task", room=room, key=data.key,
                               handle=data.handle, ttl_minutes=data.ttl_minutes, force=data.force)
        return assignment_read(row)

    @post("/release", status_code=200)
    async def release(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[ReleaseBody]
                      ) -> AssignmentRead:
        row = await verbs.call(Actor.declared(data.handle), "release_task", room=room, key=data.key,
                               handle=data.handle, note=data.note)
        return assignment_read(row)

    @post("/resolve", status_code=200)
    async def resolve(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[ResolveBody]
                      ) -> AssignmentRead:
        row = await verbs.call(Actor.declared(data.handle), "resolve_task", room=room, key=data.key,
                               handle=data.handle)
        return assignment_read(row)

    @post("/renew", status_code=200)
    async def renew(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[RenewBody]) -> RenewResult:
        rows = await verbs.call(Actor.declared(data.handle), "renew_tasks", room=room, handle=data.handle)
        return renew_result(room, data.handle, rows)

    @get("/await")
    async def watch(
        self, hub: HubDep, verbs: VerbsDep, room: FromPath[str], key: FromQuery[str],
        since: FromQuery[str | None] = None, timeout: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 30.0,
    ) -> AssignmentWatch:
        seen = await watch_lease(hub, room, key.lstrip("/"), since, timeout, verbs)
        read = assignment_read(seen.read).model_dump()
        return AssignmentWatch(**read, since=seen.since, changed=seen.changed)

    @get("/{key:path}")
    async def read(self, verbs: VerbsDep, room: FromPath[str], key: FromPath[str]) -> AssignmentRead:
        return assignment_read(await verbs.call(NOBODY, "read_assignment", room=room, key=key.lstrip("/")))
