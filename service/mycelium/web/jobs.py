"""The pages about a room's runners: the runners with their limits and the latest jobs (every agent
process the hub started, or will, or chose not to), and one job with what ran, how it ended and the
tails of its output."""

from __future__ import annotations

import shlex
from typing import Any

from litestar import Request, get
from litestar.params import FromPath
from litestar.response import Template

from mycelium.api.deps import Annotated, Query, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY
from mycelium.verbs.runners import JOB_STATES
from mycelium.web import reads
from mycelium.web.pages import page

LISTED = 100
#: ``?state=``: the name ``state`` is Litestar's own keyword (the app's state), so it is renamed.
StateQuery = Annotated[str | None, Query(name="state")]


def took(ms: float | None) -> str:
    """A job's duration: ``850 ms``, ``12.3 s``, ``4m 05s``; empty while it has none."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    return f"{minutes}m {seconds:02d}s"


def argv(command: list[str] | None) -> str:
    """A command as one shell line (quoted as a shell would read it back; never run by one)."""
    return shlex.join(command) if command else ""


def job_view(row: Any) -> dict[str, Any]:
    got = dict(row.items())
    return {**got, "line": argv(got.get("command")), "took": took(got.get("duration_ms"))}


def turn_view(row: Any) -> dict[str, Any]:
    """A worker's turn: its summon, and what its answer ran (command, seconds) when it has one."""
    got = dict(row.items())
    answer = got.get("answer") or {}
    seconds = answer.get("seconds")
    return {**got, "ran": answer.get("command") or answer.get("model") or "",
            "took": "" if seconds is None else took(float(seconds) * 1000)}


@get("/room/{name:str}/runners")
async def runners(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
                  job_state: StateQuery = None) -> Template:
    """The room's runners and its latest jobs, newest first (``?state=`` one state of them)."""
    if job_state is not None and job_state not in JOB_STATES:
        raise Refusal(422, "invalid_request", f"state: {job_state!r} is not one of {', '.join(JOB_STATES)}",
                      {"field": "state"})
    the_room = await reads.room(verbs, name)
    now = await verbs.call(NOBODY, "room_clock", room=name)
    found = [{**dict(r.items()), "line": argv(r["command"])}
             for r in await verbs.call(NOBODY, "list_runners", room=name)]
    jobs = await verbs.call(NOBODY, "list_runner_jobs", room=name, handle=None, state=job_state, before=None,
                            limit=LISTED)
    swarms = await verbs.call(NOBODY, "list_swarms", room=name)
    turns = [turn_view(t) for t in await verbs.call(NOBODY, "list_worker_turns", room=name, limit=LISTED)]
    return page("runners.html", request, room=the_room, now=now, runners=found,
                jobs=[job_view(j) for j in jobs], state=job_state, states=JOB_STATES, listed=LISTED,
                swarms=swarms, turns=turns)


@get("/room/{name:str}/jobs/{job_id:int}")
async def job(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
              job_id: FromPath[int]) -> Template:
    """One job: what ran, when, how it ended, who approved it, and the tails of its output."""
    the_room = await reads.room(verbs, name)
    row = await verbs.call(NOBODY, "get_runner_job", room=name, id=job_id)
    if row is None:
        raise Refusal(404, "job_not_found", f"No runner job {job_id} in room {name!r}",
                      {"room": name, "id": job_id})
    now = await verbs.call(NOBODY, "room_clock", room=name)
    return page("runner_job.html", request, room=the_room, now=now, j=job_view(row))


ROUTES: list[Any] = [runners, job]
