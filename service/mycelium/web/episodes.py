"""The pages about engine runs: a room's episodes, and one episode with its flow, trace, outcome and
its slice of the thread (a task's page shows the runs of its thread in its flow panel)."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.params import FromPath
from litestar.response import Template

from mycelium.api.deps import VerbsDep
from mycelium.verbs import NOBODY
from mycelium.web import reads
from mycelium.web.pages import page


@get("/room/{name:str}/episodes")
async def episodes(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str]) -> Template:
    """Every run of the room, newest first: flow, kind, where it ran, outcome, step and metrics."""
    now = await verbs.call(NOBODY, "room_clock", room=name)
    the_room = await reads.room(verbs, name)
    head: int = await verbs.call(NOBODY, "timeline_head", room=name)
    found = await reads.engine_runs(verbs, name)
    return page("episodes.html", request, room=the_room, now=now, runs=found, head=head)


@get("/room/{name:str}/episodes-parts")
async def episodes_part(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str]) -> Template:
    """The episodes list alone, for the page's script to refresh."""
    now = await verbs.call(NOBODY, "room_clock", room=name)
    the_room = await reads.room(verbs, name)
    found = await reads.engine_runs(verbs, name)
    return page("_episodes_parts.html", request, room=the_room, now=now, runs=found)


@get("/room/{name:str}/episode/{short_id:str}")
async def episode(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
                  short_id: FromPath[str]) -> Template:
    return page("episode.html", request, **await reads.episode_page(verbs, name, short_id))


@get("/room/{name:str}/episode-parts/{short_id:str}")
async def episode_part(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str],
                       short_id: FromPath[str]) -> Template:
    """The episode page's run and messages alone, for the script to refresh."""
    return page("_episode_parts.html", request, **await reads.episode_page(verbs, name, short_id))


ROUTES: list[Any] = [episodes, episodes_part, episode, episode_part]
