"""Loading a pattern into a room, and starting it: the verbs any client calls, in one transaction.

``load`` creates the room, registers the engines (with a persona's notes), writes the memories and
protocols, adds the runners, files the task and records the pattern (``mycelium.record_pattern``) as
one transaction: a refusal of any of them (an engine kind the hub does not know, a bad runner, a
room that exists) rolls all of it back and names the part of the pattern it came from. The room is
loaded paused: nothing is summoned until ``start`` (``mycelium.start_pattern``) posts the run, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mycelium.errors import Refusal
from mycelium.patterns.pack import NAME, Pattern, PatternProblems, folders, read_pattern
from mycelium.verbs import Actor, Session, Verbs
from mycelium.verbs.runners import RunnerCreate


def catalogue(operator: Path | None) -> list[Pattern | PatternProblems]:
    """Every pattern of the packs, read (a broken one as its problems, so a listing shows it)."""
    out: list[Pattern | PatternProblems] = []
    for _name, (folder, source) in sorted(folders(operator).items()):
        try:
            out.append(read_pattern(folder, source))
        except PatternProblems as exc:
            out.append(exc)
    return out


def find(operator: Path | None, name: str) -> Pattern:
    """The pattern called ``name``: 404 ``pattern_not_found``, or 422 ``bad_pattern`` with its problems."""
    known = folders(operator) if NAME.match(name) else {}
    if name not in known:
        listed = ", ".join(sorted(folders(operator))) or "none"
        raise Refusal(404, "pattern_not_found",
                      f"no pattern {name[:100]!r} in the packs (there are: {listed})",
                      {"pattern": name[:100]})
    folder, source = known[name]
    try:
        return read_pattern(folder, source)
    except PatternProblems as exc:
        raise Refusal(422, "bad_pattern", str(exc), {"pattern": name, "problems": exc.problems}) from None


async def _step(where: str, pattern: Pattern, call: Any) -> Any:
    try:
        return await call
    except Refusal as exc:
        raise Refusal(exc.status, exc.error, f"pattern {pattern.name!r}, {where}: {exc.message}",
                      {**exc.extra, "pattern": pattern.name, "at": where}) from None


async def _writes(tx: Session, pattern: Pattern, room: str, by: str, private: bool | None) -> dict[str, Any]:
    spec = pattern.spec
    me = Actor.declared(by, "person")
    is_public = not (spec.room.private if private is None else private)
    await _step("room", pattern, tx.call(
        me, "create_room", name=room, title=spec.room.title or spec.title,
        description=spec.room.description or spec.description or None, is_public=is_public, owner=by,
        members=[] if is_public else [by], created_by=by))

    async def remember(where: str, key: str, value: str | dict[str, Any]) -> None:
        await _step(where, pattern, tx.call(
            me, "write_memory", room=room, key=key, value=value, created_by=by, tags=["pattern"],
            meta={"pattern": pattern.name}, content_text=None, base_version=None, embedding=None, embed=True))

    for i, e in enumerate(spec.engines):
        await _step(f"engines[{i}] (@{e.handle})", pattern, tx.call(
            me, "create_engine", room=room, handle=e.handle, kind=e.kind, description=e.description, by=None))
        if e.notes is not None:
            await remember(f"engines[{i}].notes", f"agents/{e.handle.lstrip('@').lower()}/notes",
                           pattern.text(e.notes))
    for i, m in enumerate(spec.memories):
        text = m.text if m.text is not None else pattern.text(m.file)
        await remember(f"memories[{i}] ({m.key})", m.key, text)
    for i, p in enumerate(spec.protocols):
        # a flow is stored as its JSON value (read, YAML or JSON, and checked by read_pattern)
        flow = yaml.safe_load(pattern.text(p.file))
        await remember(f"protocols[{i}] ({p.name})", f"protocols/{p.name}", flow)
    for i, r in enumerate(spec.runners):
        where = f"runners[{i}] (@{r.handle})"
        try:  # the defaults and the command's reading are the HTTP API's
            runner = RunnerCreate(**r.model_dump(exclude_none=True), created_by=by)
            made = runner.model_dump(exclude={"created_by"})
        except ValidationError as exc:
            raise Refusal(422, "bad_pattern", f"pattern {pattern.name!r}, {where}: {exc.errors()[0]['msg']}",
                          {"pattern": pattern.name, "at": where}) from None
        await _step(where, pattern, tx.call(me, "add_runner", room=room, **made, by=None))
    task = None
    if spec.task is not None:
        row = await _step("task", pattern, tx.call(
            me, "create_task", room=room, title=spec.task.title, handle=by, key=None,
            assignee=spec.task.assignee, parent=None, depends_on=[]))
        task = row["key"]
    recorded = await _step("run", pattern, tx.call(
        me, "record_pattern", room=room, pattern=pattern.name, digest=pattern.digest, task=task,
        summons=[s.model_dump() for s in spec.run], by=None))
    return dict(recorded)


async def load(verbs: Verbs, pattern: Pattern, room: str, by: str, private: bool | None = None
               ) -> dict[str, Any]:
    """Load ``pattern`` into a new room ``room``, paused; its ``room_patterns`` row."""
    async with verbs.transaction() as tx:
        return await _writes(tx, pattern, room, by, private)


async def start(verbs: Verbs, room: str, by: str) -> dict[str, Any]:
    """Post the run of ``room``'s pattern (once); its ``room_patterns`` row, started."""
    return dict(await verbs.call(Actor.declared(by, "person"), "start_pattern", room=room, by=None))
