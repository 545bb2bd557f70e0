"""What a person does from a page: plain HTML form POSTs, each checked by the API's own request model
and sent through the verb gateway, so the floor, the roster and every other rule refuse here exactly
as over the API. A write that lands redirects back (303); a refusal is a page with its message.

On an open hub the author is the handle the form declares, remembered in a cookie so the next form
is filled in; on a gated hub it is the signed-in principal (the forms have no handle field there).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar
from urllib.parse import quote

from litestar import Request, post
from litestar.datastructures import Cookie
from litestar.params import FromPath
from litestar.response import Redirect, Template
from pydantic import BaseModel, ValidationError

from mycelium.api.deps import HubDep, VerbsDep
from mycelium.auth.middleware import principal_in
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor, Verbs
from mycelium.verbs.board import ClaimBody, ReleaseBody, ResolveBody, TaskCreate
from mycelium.verbs.memories import MemoryCreate, memory_history, text_to_embed, write_params
from mycelium.verbs.messages import MessageCreate
from mycelium.verbs.rooms import RoomCreate
from mycelium.verbs.transitions import ReleaseBody as TransitionRelease
from mycelium.web import reads, views
from mycelium.web.pages import HANDLE_COOKIE, page

Model = TypeVar("Model", bound=BaseModel)
LOCAL_PATH = re.compile(r"^/(?![/\\])[^\s]*$")


async def form_of(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The submitted fields, trimmed; a blank field is absent. On a gated hub the author
    (``handle``) is the signed-in principal, whatever the form says (its pages send none)."""
    form = await request.form()
    out: dict[str, str] = {}
    for name, value in form.items():
        if isinstance(value, str) and value.strip():
            out[name] = value.strip() if name not in ("content", "text") else value
    principal = principal_in(request.scope)
    if principal is not None:
        out["handle"] = principal.handle
    return out


def checked(model: type[Model], **fields: Any) -> Model:
    """``model`` built from form fields, or a 422 refusal naming each problem."""
    try:
        return model(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        problems = [{"key": ".".join(str(p) for p in e["loc"]) or "form", "message": e["msg"]}
                    for e in exc.errors()]
        summary = "; ".join(f"{p['key']}: {p['message']}" for p in problems)
        raise Refusal(422, "invalid_request", summary, {"problems": problems}) from None


def back(form: dict[str, str], default: str) -> str:
    """Where to go after the write: the form's own page if it names a local one."""
    target = form.get("back", "")
    return target if LOCAL_PATH.match(target) else default


def done(target: str, handle: str | None) -> Redirect:
    cookies = [Cookie(key=HANDLE_COOKIE, value=handle, path="/", samesite="lax", max_age=365 * 86400)] \
        if handle else []
    return Redirect(path=target, status_code=303, cookies=cookies)


def room_path(name: str) -> str:
    return f"/room/{quote(name, safe='')}"


@post("/rooms")
async def create_room(request: Request[Any, Any, Any], verbs: VerbsDep) -> Redirect:
    form = await form_of(request)
    body = checked(RoomCreate, name=form.get("name", ""), title=form.get("title"),
                   description=form.get("description"), created_by=form.get("handle"))
    row = await verbs.call(Actor.declared(body.created_by, "person"), "create_room", name=body.name,
                           title=body.title, description=body.description, is_public=body.is_public,
                           owner=body.owner, members=body.members, created_by=body.created_by)
    return done(room_path(row["name"]), body.created_by)


#: ``/claim``, ``/release [note]``, ``/resolve`` in a task's thread (in the room: after the row's key).
COMMAND = re.compile(r"^/(claim|release|resolve)(?:\s+(.*))?$", re.S)


@post("/room/{name:str}/messages")
async def post_message(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str]) -> Redirect:
    """Post a message; a composer command (``/claim`` …) acts on the thread's row instead."""
    form = await form_of(request)
    body = checked(MessageCreate, sender_handle=form.get("handle", ""), content=form.get("content", ""),
                   episode=form.get("episode"))
    command = COMMAND.match(body.content.strip())
    if command is not None:
        await run_command(verbs, name, body, command.group(1), (command.group(2) or "").strip())
    else:
        await verbs.call(Actor.declared(body.sender_handle, "person"), "post_message",
                         **body.post_params(name))
    return done(back(form, room_path(name)), body.sender_handle)


async def run_command(verbs: Verbs, room: str, body: MessageCreate, action: str, rest: str) -> None:
    """A lease command from the composer: on the thread's row, or in the room on the key it names."""
    if body.episode:
        key = (await verbs.call(NOBODY, "board_row", room=room, ref=body.episode))["key"]
        note = rest
    else:
        key, _, note = rest.partition(" ")
        if not key:
            raise Refusal(422, "invalid_request", f"/{action} names a row here (/{action} work/…), or is "
                          "written in the row's thread", {"field": "content"})
    await lease_action(verbs, room, action, key, body.sender_handle, note.strip() or None)


async def lease_action(verbs: Verbs, room: str, action: str, key: str, handle: str, note: str | None) -> None:
    actor = Actor.declared(handle, "person")
    if action == "claim":
        claim = checked(ClaimBody, key=key, handle=handle)
        await verbs.call(actor, "claim_task", room=room, key=claim.key, handle=claim.handle,
                         ttl_minutes=claim.ttl_minutes, force=False)
    elif action == "release":
        release = checked(ReleaseBody, key=key, handle=handle, note=note)
        await verbs.call(actor, "release_task", room=room, key=release.key, handle=release.handle,
                         note=release.note, force=False)
    elif action == "resolve":
        resolve = checked(ResolveBody, key=key, handle=handle)
        await verbs.call(actor, "resolve_task", room=room, key=resolve.key, handle=resolve.handle)
    else:
        raise Refusal(422, "invalid_request", "action: one of claim, release, resolve", {"field": "action"})


@post("/room/{name:str}/tasks")
async def file_task(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str]) -> Redirect:
    """File a task with its dependencies, in one statement (all or nothing)."""
    form = await form_of(request)
    body = checked(TaskCreate, title=form.get("title", ""), handle=form.get("handle", ""),
                   assignee=form.get("assignee"), parent=form.get("parent"))
    depends = [d.strip() for d in re.split(r"[,\s]+", form.get("depends_on", "")) if d.strip()]
    await verbs.call(Actor.declared(body.handle, "person"), "create_task", room=name, title=body.title,
                     handle=body.handle, key=None, assignee=body.assignee, parent=body.parent,
                     depends_on=depends or None)
    return done(back(form, room_path(name)), body.handle)


@post("/room/{name:str}/lease")
async def lease(request: Request[Any, Any, Any], verbs: VerbsDep, name: FromPath[str]) -> Redirect:
    """Claim, release or resolve a ``work/`` row (``action``)."""
    form = await form_of(request)
    handle = form.get("handle", "")
    await lease_action(verbs, name, form.get("action", ""), form.get("key", ""), handle, form.get("note"))
    return done(back(form, room_path(name)), handle)


@post("/room/{name:str}/memory")
async def write_memory(request: Request[Any, Any, Any], hub: HubDep, verbs: VerbsDep,
                       name: FromPath[str]) -> Redirect | Template:
    """Write a memory at the version the writer read; a stale write shows the current text and the
    difference instead of landing."""
    form = await form_of(request)
    base = form.get("base_version")
    item = checked(MemoryCreate, key=form.get("key", ""), value=form.get("text", ""),
                   created_by=form.get("handle", ""),
                   base_version=int(base) if base and base.isdigit() else None)
    if base and not base.isdigit():
        raise Refusal(422, "invalid_request", "base_version: a whole number", {"field": "base_version"})
    vector = None
    if hub.embedder is not None:
        vector = (await hub.embedder.aembed([text_to_embed(item)]))[0]
    try:
        await verbs.call(Actor.declared(item.created_by, "person"), "write_memory",
                         **write_params(name, item, vector))
    except Refusal as refused:
        if refused.error != "stale_base":
            raise
        return await _stale(request, verbs, name, item, refused)
    return done(f"{room_path(name)}/memory/{quote(item.key, safe='/')}", item.created_by)


async def _stale(request: Request[Any, Any, Any], verbs: Verbs, name: str, item: MemoryCreate,
                 refused: Refusal) -> Template:
    current = views.body_text(refused.extra.get("current_content"))
    mine = str(item.value)
    history = memory_history(name, item.key, await verbs.call(NOBODY, "memory_history", room=name,
                                                              key=item.key))
    return page("stale.html", request, status=409, room=await reads.room(verbs, name), key=item.key,
                mine=mine,
                current=current, refusal=refused, history=history,
                current_version=refused.extra.get("current_version"),
                diff=views.version_diff(mine, current, "yours", "current"))


@post("/transitions/release")
async def release_transition(request: Request[Any, Any, Any], verbs: VerbsDep) -> Redirect:
    """An operator releases a transition, saying what it verified and why."""
    form = await form_of(request)
    body = checked(TransitionRelease, request_id=form.get("request_id", ""),
                   verified=form.get("verified", ""),
                   by=form.get("handle", ""), reason=form.get("reason", ""))
    await verbs.call(Actor.declared(body.by, "operator"), "release_transition", **body.model_dump())
    return done(f"/transitions/{quote(body.request_id, safe='')}", body.by)


ROUTES: list[Any] = [create_room, post_message, file_task, lease, write_memory, release_transition]
