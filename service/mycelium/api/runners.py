"""Runners over HTTP: ``GET/POST /api/rooms/{room}/runners``, ``GET/DELETE …/runners/{handle}``,
``POST …/runners/{handle}/test|pause|resume``; their jobs: ``GET /api/rooms/{room}/jobs`` (newest
first; ``?handle=&state=&before=&limit=``), ``GET …/jobs/{id}`` (with the tails of its output),
``POST …/jobs/{id}/approve|deny``. Registering, removing, testing and deciding are an operator's
verbs behind the token gate."""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.params import FromPath, JSONBody

from mycelium.api.deps import VERBS, Annotated, Query, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.runners import (
    JobDecision,
    JobRead,
    JobState,
    RunnerCreate,
    RunnerRead,
    job_read,
    runner_read,
)


class RunnerController(Controller):
    path = "/api/rooms/{room:str}"
    dependencies = VERBS

    @get("/runners")
    async def runners(self, verbs: VerbsDep, room: FromPath[str]) -> list[RunnerRead]:
        return [runner_read(r) for r in await verbs.call(NOBODY, "list_runners", room=room)]

    @post("/runners", status_code=201)
    async def add(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[RunnerCreate]) -> RunnerRead:
        row = await verbs.call(
            Actor.declared(data.created_by, "person"), "add_runner", room=room, handle=data.handle,
            command=data.command, cwd=data.cwd, env=data.env, max_concurrent=data.max_concurrent,
            timeout_s=data.timeout_s, max_turns_per_room=data.max_turns_per_room, approval=data.approval,
            max_attempts=data.max_attempts, by=None,
        )
        return runner_read(row)

    @get("/runners/{handle:str}")
    async def runner(self, verbs: VerbsDep, room: FromPath[str], handle: FromPath[str]) -> RunnerRead:
        return runner_read(await verbs.call(NOBODY, "get_runner", room=room, handle=handle))

    @delete("/runners/{handle:str}", status_code=200)
    async def remove(self, verbs: VerbsDep, room: FromPath[str], handle: FromPath[str]) -> RunnerRead:
        return runner_read(await verbs.call(NOBODY, "remove_runner", room=room, handle=handle))

    @post("/runners/{handle:str}/test", status_code=202)
    async def test(self, verbs: VerbsDep, room: FromPath[str], handle: FromPath[str]) -> JobRead:
        """Start the runner once now (a job of kind ``test``); read the job for its end."""
        return job_read(await verbs.call(NOBODY, "test_runner", room=room, handle=handle))

    @post("/runners/{handle:str}/pause", status_code=200)
    async def pause(self, verbs: VerbsDep, room: FromPath[str], handle: FromPath[str]) -> RunnerRead:
        row = await verbs.call(NOBODY, "pause_runner", room=room, handle=handle, reason="paused by hand")
        return runner_read(row)

    @post("/runners/{handle:str}/resume", status_code=200)
    async def resume(self, verbs: VerbsDep, room: FromPath[str], handle: FromPath[str]) -> RunnerRead:
        return runner_read(await verbs.call(NOBODY, "pause_runner", room=room, handle=handle, reason=None))

    @get("/jobs")
    async def jobs(
        self, verbs: VerbsDep, room: FromPath[str], handle: Annotated[str | None, Query()] = None,
        job_state: Annotated[JobState | None, Query(name="state")] = None,
        before: Annotated[int | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> list[JobRead]:
        rows = await verbs.call(NOBODY, "list_runner_jobs", room=room, handle=handle, state=job_state,
                                before=before, limit=limit)
        return [job_read(r) for r in rows]

    @get("/jobs/{job_id:int}")
    async def job(self, verbs: VerbsDep, room: FromPath[str], job_id: FromPath[int]) -> JobRead:
        row = await verbs.call(NOBODY, "get_runner_job", room=room, id=job_id)
        if row is None:
            raise Refusal(404, "job_not_found", f"No runner job {job_id} in room {room!r}",
                          {"room": room, "id": job_id})
        return job_read(row)

    @post("/jobs/{job_id:int}/approve", status_code=200)
    async def approve(self, verbs: VerbsDep, room: FromPath[str], job_id: FromPath[int],
                      data: JSONBody[JobDecision]) -> JobRead:
        row = await verbs.call(Actor.declared(data.by, "person"), "decide_runner_job", room=room, id=job_id,
                               approve=True, by=None)
        return job_read(row)

    @post("/jobs/{job_id:int}/deny", status_code=200)
    async def deny(self, verbs: VerbsDep, room: FromPath[str], job_id: FromPath[int],
                   data: JSONBody[JobDecision]) -> JobRead:
        row = await verbs.call(Actor.declared(data.by, "person"), "decide_runner_job", room=room, id=job_id,
                               approve=False, by=None)
        return job_read(row)
