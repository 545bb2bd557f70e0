"""The room's chat verbs: ``mycelium room send|messages|search|watch`` and, scoped to one task row,
``mycelium board send|messages <row>`` (the same calls with the row's thread, not a second
implementation)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mycelium.cli.client import call, follow_stream, print_json
from mycelium.cli.common import add_author, add_json, add_room, handle_of, path_part, room_of
from mycelium.cli.participate import thread_of


def register_room_commands(rsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add send, messages, search and watch to the ``room`` group."""
    s = rsub.add_parser("send", help="post a message to the room (or a task's thread)")
    s.add_argument("text")
    s.add_argument("--to", help="a direct recipient")
    s.add_argument("--task", help="post into this task's thread (row key or short thread id)")
    s.add_argument("--type", dest="message_type", default="broadcast",
                   choices=("announce", "direct", "broadcast", "delegate"))
    _common(s, author=True)
    s.set_defaults(func=_send, row=None)

    m = rsub.add_parser("messages", help="read the room's latest messages (printed oldest first)")
    m.add_argument("--task", help="only this task's thread")
    m.add_argument("--channel", action="store_true", help="only the room's own channel")
    m.add_argument("--limit", type=int, default=20)
    m.add_argument("--before", help="older than this position (or ISO time)")
    m.add_argument("--from", dest="sender", help="only from this handle")
    _common(m)
    m.set_defaults(func=_messages, row=None)

    q = rsub.add_parser("search", help='search messages: words, "phrases", -not, from:, task:, after:, ...')
    q.add_argument("query")
    q.add_argument("--limit", type=int, default=20)
    q.add_argument("--context", type=int, default=0, help="same-thread messages around each hit (0-5)")
    q.add_argument("--cursor", help="the next_cursor of a previous page")
    _common(q)
    q.set_defaults(func=_search)

    w = rsub.add_parser("watch", help="follow the room's timeline as it grows")
    w.add_argument("--after", type=int, help="start after this position (default: now)")
    w.add_argument("--slim", action="store_true",
                   help="listen on the room's SLIM channel as a member (--as) instead of HTTP")
    _common(w, author=True)
    w.set_defaults(func=_watch)


def register_thread_commands(bsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``send <row>`` and ``messages <row>`` to the ``board`` group."""
    s = bsub.add_parser("send", help="post into a task's thread")
    s.add_argument("row", help="key or short thread id")
    s.add_argument("text")
    s.add_argument("--to", help="a direct recipient")
    _common(s, author=True)
    s.set_defaults(func=_send, task=None, message_type="broadcast")

    m = bsub.add_parser("messages", help="read a task's thread, its latest messages (printed oldest first)")
    m.add_argument("row", help="key or short thread id")
    m.add_argument("--limit", type=int, default=20)
    m.add_argument("--before", help="older than this position (or ISO time)")
    _common(m)
    m.set_defaults(func=_messages, task=None, channel=False, sender=None)


def _common(p: argparse.ArgumentParser, *, author: bool = False) -> None:
    add_room(p)
    add_json(p)
    if author:
        add_author(p)


def _base(room: str) -> str:
    return f"/api/rooms/{path_part(room)}"


def line(m: dict[str, Any]) -> str:
    """One message as a terminal line: position, who, where, what."""
    where = "" if m["episode"].endswith(":live") else f" [{m['episode'].rsplit(':', 1)[-1]}]"
    if m["payload_type"] == "ping":
        thread = str(m["payload"].get("episode", "")).rsplit(":", 1)[-1]
        return f"{m['position']:>6}  · @{m['payload'].get('sender')} wrote in thread {thread}"
    if m["payload_type"] == "notice":
        data = m["payload"]
        by = f" by @{data['by']}" if data.get("by") else ""
        return f"{m['position']:>6}  · {data.get('subkind')} {data.get('key')}{by}"
    edited = " (edited)" if m.get("edited_at") else ""
    return f"{m['position']:>6}  @{m['sender_handle']}{where}: {m['content']}{edited}"


def _send(args: argparse.Namespace) -> int:
    room = room_of(args)
    episode = thread_of(room, args.row or args.task, None)
    body: dict[str, Any] = {"sender_handle": handle_of(args), "content": args.text, "episode": episode,
                            "message_type": "direct" if args.to else args.message_type}
    if args.to:
        body["recipient_handle"] = args.to
    sent = call("POST", f"{_base(room)}/messages", json_body=body)
    if args.json:
        print_json(sent)
    else:
        print(line(sent))
    return 0


def _messages(args: argparse.Namespace) -> int:
    room = room_of(args)
    episode = "live" if args.channel else thread_of(room, args.row or args.task, None)
    found = call("GET", f"{_base(room)}/messages", params={
        "limit": args.limit, "before": args.before, "episode": episode, "sender": args.sender})
    if args.json:
        print_json(found)
        return 0
    for m in reversed(found):
        print(line(m))
    return 0


def _search(args: argparse.Namespace) -> int:
    room = room_of(args)
    result = call("GET", f"{_base(room)}/messages/search", params={
        "q": args.query, "limit": args.limit, "context": args.context, "cursor": args.cursor})
    if args.json:
        print_json(result)
        return 0
    problems = result["scope"]["problems"]
    for problem in problems:
        print(f"! {problem['token']}: {problem['reason']}", file=sys.stderr)
    for hit in result["hits"]:
        m = hit["message"]
        task = f" [{hit['task_title']}]" if hit.get("task_title") else ""
        print(f"{m['position']:>6}  @{m['sender_handle']}{task}: {hit['snippet']}")
    more = f"; more: --cursor '{result['next_cursor']}'" if result["next_cursor"] else ""
    print(f"{len(result['hits'])} of {result['total']} (scanned {result['scanned']}){more}")
    return 1 if problems else 0  # a query read otherwise than written is not a success


def _watch(args: argparse.Namespace) -> int:
    """Follow the stream; when it drops (a hub restart, a network blip) pick up where it left off."""
    room = room_of(args)
    if args.slim:
        return _watch_slim(args, room)
    after = [args.after]

    def show(m: dict[str, Any]) -> None:
        after[0] = m["position"]
        print(json.dumps(m) if args.json else line(m), flush=True)

    return follow_stream(f"{_base(room)}/messages/stream", lambda: {"after": after[0]}, show)


def _watch_slim(args: argparse.Namespace, room: str) -> int:
    """Follow the room on its SLIM channel, as the member ``--as``."""
    import asyncio

    from mycelium import environment
    from mycelium.cli.client import api_url
    from mycelium.slim.client import Member, MemberRefused
    from mycelium.slim.runtime import SlimUnavailable

    async def follow() -> None:
        async with Member(room, handle_of(args), api_url=api_url(), token=environment.token()) as member:
            print(f"listening on the SLIM channel of {room} as @{member.handle} ({member.endpoint})",
                  file=sys.stderr, flush=True)
            async for m in member:
                if args.after is not None and m["position"] <= args.after:
                    continue
                print(json.dumps(m) if args.json else line(m), flush=True)

    try:
        asyncio.run(follow())
    except (MemberRefused, SlimUnavailable) as exc:
        print(f"mycelium room watch --slim: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
