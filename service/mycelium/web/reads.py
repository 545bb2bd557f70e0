"""What each page reads, through the verb gateway (the same verbs the API's routes call)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from mycelium.core.envelope import short_id
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Verbs
from mycelium.verbs.board import BoardRow, board_row
from mycelium.verbs.files import file_read
from mycelium.verbs.messages import MessageRead, message_read
from mycelium.verbs.rooms import RoomRead, room_read
from mycelium.web import runs, views

#: The rows per board column a room page shows at most (``?rows=``) and unless asked for more (the
#: most recently changed), and the timeline entries it reads.
BOARD_LIMIT = 1000
COLUMN_ROWS = 50
TIMELINE_WINDOW = 200
THREAD_LIMIT = 200
#: The runs a thread's flow panel shows (the newest first), and the episodes a room's list shows.
THREAD_RUNS = 10
EPISODES_LISTED = 200


async def room(verbs: Verbs, name: str) -> RoomRead:
    row = await verbs.call(NOBODY, "get_room", room=name)
    if row is None:
        raise Refusal(404, "room_not_found", f"Room '{name}' not found", {"room": name})
    return room_read(row)


@dataclass
class Board:
    """The board's rows by column (the first ``rows`` of each shown), and how many each has."""

    columns: dict[str, list[BoardRow]]
    counts: dict[str, int]


async def board(verbs: Verbs, name: str, rows: int) -> Board:
    """The first ``rows`` of each column, most recently changed first, and each column's count, in
    one read (the view derives every row's lease and dependencies at once, so three filtered reads
    cost three times one)."""
    read = await verbs.call(NOBODY, "web_board", room=name, rows=rows)
    columns: dict[str, list[BoardRow]] = {attention: [] for attention, _ in views.COLUMNS}
    counts = dict.fromkeys(columns, 0)
    for r in read:
        columns.setdefault(r["attention"], []).append(board_row(r))
        counts[r["attention"]] = r["in_column"]
    return Board(columns, counts)


@dataclass
class Recent:
    """The room's timeline head, its last ``TIMELINE_WINDOW`` entries (oldest first), and the rows
    of the threads whose pings are among them."""

    head: int
    messages: list[MessageRead]
    titles: views.Titles


async def recent(verbs: Verbs, name: str) -> Recent:
    head: int = await verbs.call(NOBODY, "timeline_head", room=name)
    rows = await verbs.call(NOBODY, "messages_after", room=name, after=max(0, head - TIMELINE_WINDOW),
                            limit=TIMELINE_WINDOW)
    messages = [message_read(r) for r in rows]
    threads = sorted({str(m.payload["episode"]) for m in messages if m.payload_type == "ping"
                      and m.payload.get("episode")})
    titles = {r["episode"]: (r["key"], r["title"])
              for r in await verbs.call(NOBODY, "web_thread_titles", room=name, episodes=threads)}
    return Recent(head, messages, titles)


async def members(verbs: Verbs, name: str) -> tuple[list[Any], list[views.Floor]]:
    present = await verbs.call(NOBODY, "room_members", room=name)
    floors = views.floors(await verbs.call(NOBODY, "room_floors", room=name))
    return list(present), floors


async def room_page(verbs: Verbs, name: str, rows: int = COLUMN_ROWS) -> dict[str, Any]:
    """Everything the room page shows (``rows`` per board column). The reads go at once, each on a
    connection of its own: the board's is most of the time, and the rest is read and shaped meanwhile."""
    now, the_room, the_board, said, (present, floors), files, pattern = await asyncio.gather(
        verbs.call(NOBODY, "room_clock", room=name), room(verbs, name), board(verbs, name, rows),
        recent(verbs, name), members(verbs, name), verbs.call(NOBODY, "list_files", room=name),
        verbs.call(NOBODY, "room_pattern_of", room=name))
    head, messages = said.head, said.messages
    lines = views.timeline(name, messages, said.titles)
    floor_of = {f.thread: f for f in floors}
    here = {m["handle"] for m in present}
    shown = [r for column in the_board.columns.values() for r in column]
    known = sorted(here | set(the_room.members) | {r.owner for r in shown if r.owner}
                   | {m.sender_handle for m in messages if m.sender_role != "coordinator"})
    return {"now": now, "room": the_room, "columns": the_board.columns, "counts": the_board.counts,
            "column_names": views.COLUMNS, "lines": lines,
            "head": head, "present": present, "here": here, "floors": floors, "floor_of": floor_of,
            "handles": known, "seconds_left": views.seconds_left, "rows": rows,
            "files": [file_read(f) for f in files], "pattern": dict(pattern) if pattern else None}


async def room_talk(verbs: Verbs, name: str) -> dict[str, Any]:
    """What the room page's timeline shows, read without the board: what the page's script re-reads
    when the room's stream brings a message (a notice, which may move the board, re-reads it all)."""
    now, the_room, said = await asyncio.gather(
        verbs.call(NOBODY, "room_clock", room=name), room(verbs, name), recent(verbs, name))
    return {"now": now, "room": the_room, "lines": views.timeline(name, said.messages, said.titles),
            "head": said.head}


async def thread_of(verbs: Verbs, name: str, episode: str) -> list[MessageRead]:
    """A task's thread, oldest first (its last ``THREAD_LIMIT`` messages)."""
    thread = await verbs.call(NOBODY, "list_messages", room=name, sender=None, message_type=None, kind=None,
                              status=None, since=None, before_position=None, before_time=None,
                              episode=episode, offset=0, limit=THREAD_LIMIT)
    return [message_read(m) for m in reversed(thread)]


async def task_talk(verbs: Verbs, name: str, key: str) -> dict[str, Any]:
    """What a task page's thread and flow panel show, read without the row (as ``room_talk``)."""
    now, the_room, memory, floors = await asyncio.gather(
        verbs.call(NOBODY, "room_clock", room=name), room(verbs, name),
        verbs.call(NOBODY, "get_memory", room=name, key=key), verbs.call(NOBODY, "room_floors", room=name))
    episode = memory["episode"]
    thread, the_runs = await asyncio.gather(thread_of(verbs, name, episode),
                                            engine_runs(verbs, name, episode=episode, limit=THREAD_RUNS))
    thread_id = short_id(episode)
    return {"now": now, "room": the_room, "key": memory["key"], "thread_id": thread_id, "thread": thread,
            "floor": next((f for f in views.floors(floors) if f.thread == thread_id), None), "runs": the_runs}


async def task_page(verbs: Verbs, name: str, key: str) -> dict[str, Any]:
    """Everything a task's page shows; the reads go at once, as the room page's do."""
    now, the_room, found, head, (present, floors) = await asyncio.gather(
        verbs.call(NOBODY, "room_clock", room=name), room(verbs, name),
        verbs.call(NOBODY, "board_row", room=name, ref=key), verbs.call(NOBODY, "timeline_head", room=name),
        members(verbs, name))
    row = board_row(found)
    memory, links, shown, the_runs = await asyncio.gather(
        verbs.call(NOBODY, "get_memory", room=name, key=row.key),
        verbs.call(NOBODY, "memory_links_of", room=name, key=row.key), thread_of(verbs, name, row.episode),
        engine_runs(verbs, name, episode=row.episode, limit=THREAD_RUNS))
    named = {m["handle"] for m in present} | set(the_room.members) | {row.owner or "", row.assignee or ""}
    handles = sorted((named | {m.sender_handle for m in shown if m.sender_role != "coordinator"}) - {""})
    depends = memory["meta"].get("depends-on") or []
    if isinstance(depends, str):
        depends = [depends]
    dependents = [b for b in links.get("backlinks", []) if b.get("relation") == "depends-on"]
    fields = {k: v for k, v in memory["meta"].items() if k not in ("episode",)}
    body = views.without_title(views.body_text(memory["value"]), row.title)
    return {"now": now, "room": the_room, "row": row, "key": row.key, "thread_id": row.short_id, "body": body,
            "fields": fields, "depends": depends, "dependents": dependents, "head": head,
            "thread": shown, "handles": handles,
            "floor": next((f for f in floors if f.thread == row.short_id), None),
            "left": views.seconds_left(row, now), "runs": the_runs}


async def engine_runs(verbs: Verbs, name: str, *, episode: str | None = None, short_id: str | None = None,
                      limit: int = EPISODES_LISTED) -> list[runs.Run]:
    """The room's engine runs (of one thread, or one run), newest first."""
    rows = await verbs.call(NOBODY, "web_runs", room=name, episode=episode, short_id=short_id, limit=limit)
    return [runs.run_of(r) for r in rows]


async def episode_page(verbs: Verbs, name: str, short_id: str) -> dict[str, Any]:
    """One run with its slice of the thread (the summon, what it posted, the replies it read)."""
    now = await verbs.call(NOBODY, "room_clock", room=name)
    the_room = await room(verbs, name)
    found = await engine_runs(verbs, name, short_id=short_id, limit=1)
    if not found:
        raise Refusal(404, "episode_not_found", f"No episode {short_id!r} in room {name!r}",
                      {"room": name, "short_id": short_id})
    messages = await verbs.call(NOBODY, "episode_messages", room=name, short_id=short_id)
    head: int = await verbs.call(NOBODY, "timeline_head", room=name)
    return {"now": now, "room": the_room, "run": found[0], "messages": [message_read(m) for m in messages],
            "head": head}
