"""The patterns a person loads from the web app: ``/patterns`` lists the packs' patterns, each with
a form that loads it into a new room (paused, or started at once); a room loaded from a pattern
shows it on its page, with the form that starts it while it is paused. The forms go through the
same loading and starting as ``POST /api/rooms/{room}/patterns/{name}`` and ``…/pattern/run``."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from mycelium.api.deps import HubDep, VerbsDep
from mycelium.errors import Refusal
from mycelium.patterns import load as patterns
from mycelium.patterns.pack import PatternProblems
from mycelium.web.actions import done, form_of, room_path
from mycelium.web.pages import page


@get("/patterns")
async def listing(request: Request[Any, Any, Any], hub: HubDep) -> Template:
    found = await asyncio.to_thread(patterns.catalogue, hub.settings.patterns_dir)
    return page("patterns.html", request, patterns=[p for p in found if not isinstance(p, PatternProblems)],
                broken=[p for p in found if isinstance(p, PatternProblems)])


def _handle(form: dict[str, str]) -> str:
    handle = form.get("handle", "")
    if not handle:
        raise Refusal(422, "invalid_request", "handle: say who loads it", {"field": "handle"})
    return handle


@post("/patterns/{name:str}/load")
async def load(request: Request[Any, Any, Any], hub: HubDep, verbs: VerbsDep, name: FromPath[str]
               ) -> Redirect:
    form = await form_of(request)
    handle = _handle(form)
    room = form.get("room", "")
    if not room:
        raise Refusal(422, "invalid_request", "room: name the new room", {"field": "room"})
    found = await asyncio.to_thread(patterns.find, hub.settings.patterns_dir, name)
    await patterns.load(verbs, found, room, handle, True if form.get("private") else None)
    if form.get("run"):
        await patterns.start(verbs, room, handle)
    return done(room_path(room), handle)


@post("/room/{name:str}/pattern/run")
async def run(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str]) -> Redirect:
    form = await form_of(request)
    handle = _handle(form)
    await patterns.start(verbs, name, handle)
    return done(room_path(name), handle)


ROUTES = [listing, load, run]
