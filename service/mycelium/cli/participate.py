"""``mycelium await`` and ``mycelium respond``: take part in a room with two stateless calls.

``await`` long-polls for the next message addressed to the handle (the hub keeps the handle's place
in the database, so nothing is missed between turns); ``--loop`` keeps waiting, renewing the
handle's held leases each round, and ``--exec`` runs a command per message (the message as JSON on
stdin, its parts in ``MYCELIUM_*`` variables) whose output, if any, is the reply in the thread the
message came from; ``--lease ROW`` waits instead for a row's lease to change (claimed, released,
expired, settled, or what it waits on), which is how an agent waits for a dependency. ``respond``
posts a reply; ``[[mycelium: …]]`` markers in it become payload.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from mycelium.cli.client import call, fail, print_json
from mycelium.cli.common import add_json, add_room, path_part, room_of

#: One poll's longest wait; the loop simply asks again.
POLL_SECONDS = 300.0
#: the hub's longest wait on a lease; a longer --timeout asks again
LEASE_ROUND_SECONDS = 60.0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    a = sub.add_parser("await")
    a.add_argument("--handle", help="who is waiting (for messages; not needed with --lease)")
    where = a.add_mutually_exclusive_group()
    where.add_argument("--task", help="wake only on this task's thread (row key or short thread id)")
    where.add_argument("--episode", help="wake only on this thread (URN or short id)")
    where.add_argument("--lease", metavar="ROW",
                       help="wait instead for a row's lease to change: claimed, released, expired, "
                            "settled, or what it waits on (row key or short thread id)")
    a.add_argument("--timeout", type=float, default=POLL_SECONDS,
                   help=f"seconds to wait (default {POLL_SECONDS:.0f}; with --loop, per round)")
    a.add_argument("--loop", action="store_true", help="keep waiting; renew held leases each round")
    a.add_argument("--exec", dest="command", help="run this per message; its output is the reply")
    a.add_argument("--digest", action="store_true",
                   help="with the message, the wake digest: why it woke, what changed since its last "
                        "turn, its tasks and the board, who asked, where to reply "
                        "(MYCELIUM_DIGEST for --exec)")
    add_room(a)
    add_json(a)
    a.set_defaults(func=_await)

    r = sub.add_parser("respond")
    r.add_argument("--handle", required=True, help="who is replying")
    r.add_argument("--task", help="reply into this task's thread (row key or short thread id)")
    r.add_argument("--episode", help="reply into this thread (URN or short id)")
    r.add_argument("text", help="the reply ('-' reads stdin)")
    add_room(r)
    add_json(r)
    r.set_defaults(func=_respond)


def thread_of(room: str, task: str | None, episode: str | None) -> str | None:
    """The thread a ``--task`` row (key or short id) or an ``--episode`` names; None: the room."""
    if task:
        return str(call("GET", f"/api/rooms/{path_part(room)}/tasks/{path_part(task)}")["episode"])
    return episode


def _print_message(args: argparse.Namespace, answer: dict[str, Any]) -> None:
    if args.json:
        print_json(answer)
        return
    where = "" if answer["episode"].endswith(":live") else f" [thread {answer['episode'].rsplit(':', 1)[-1]}]"
    print(f"@{answer['sender']}{where}: {answer['prompt']}", flush=True)
    if answer.get("digest"):
        print(f"\n{answer['digest']}", flush=True)


def _await(args: argparse.Namespace) -> int:
    room = room_of(args)
    if args.lease:
        if args.command:
            fail("--exec runs per message; it does not go with --lease")
        return _await_lease(args, room)
    if not args.handle:
        fail("await needs --handle (who is waiting), or --lease ROW")
    episode = thread_of(room, args.task, args.episode)
    base = f"/api/rooms/{path_part(room)}"
    while True:
        if args.loop:
            call("POST", f"{base}/assignments/renew", json_body={"handle": args.handle}, ok=(404, 422))
        params = {"handle": args.handle, "timeout": args.timeout, "episode": episode}
        if args.digest:
            params["digest"] = "true"
        answer = call("GET", f"{base}/await", params=params, timeout=args.timeout + 30)
        if answer.get("message") is None:
            if args.loop:
                continue
            if args.json:
                print_json(answer)
            else:
                print(f"no message for @{args.handle.lstrip('@')} in {args.timeout:g} s", file=sys.stderr)
            return 1  # nothing came: a shell loop can tell
        if args.command:
            _run(args, room, answer)
        else:
            _print_message(args, answer)
        if not args.loop:
            return 0


def _await_lease(args: argparse.Namespace, room: str) -> int:
    """Wait until the row's lease changes (``/assignments/await``, asked again every round of at most
    ``LEASE_ROUND_SECONDS``); print it as it is then. Exit 1 when the time runs out unchanged."""
    from mycelium.cli.board import lease_line

    base = f"/api/rooms/{path_part(room)}"
    key = str(call("GET", f"{base}/tasks/{path_part(args.lease)}")["key"])
    seen = call("GET", f"{base}/assignments/await", params={"key": key, "timeout": 0})
    while True:
        deadline = time.monotonic() + args.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if not args.loop:
                    print(f"no change to the lease of {key} in {args.timeout:g} s", file=sys.stderr)
                    return 1
                break
            wait = min(left, LEASE_ROUND_SECONDS)
            seen = call("GET", f"{base}/assignments/await", timeout=wait + 30,
                        params={"key": key, "since": seen["since"], "timeout": round(wait, 3)})
            if seen["changed"]:
                if args.json:
                    print_json(seen)
                else:
                    print(lease_line(seen), flush=True)
                if not args.loop:
                    return 0
                break


def _run(args: argparse.Namespace, room: str, answer: dict[str, Any]) -> None:
    import subprocess

    env = {**os.environ, "MYCELIUM_ROOM": room, "MYCELIUM_HANDLE": args.handle,
           "MYCELIUM_PROMPT": answer["prompt"], "MYCELIUM_SENDER": answer["sender"],
           "MYCELIUM_EPISODE": answer["episode"], "MYCELIUM_MESSAGE_ID": answer["message_id"]}
    if answer.get("digest"):
        env["MYCELIUM_DIGEST"] = answer["digest"]
    done = subprocess.run(args.command, shell=True, input=json.dumps(answer), text=True,
                          capture_output=True, env=env, check=False)
    if done.stderr:
        sys.stderr.write(done.stderr)
    if done.returncode != 0:
        print(f"--exec exited with {done.returncode}; no reply sent", file=sys.stderr)
        return
    text = done.stdout.strip()
    if text:
        call("POST", f"/api/rooms/{path_part(room)}/reply",
             json_body={"handle": args.handle, "text": text, "episode": answer["episode"]})


def _respond(args: argparse.Namespace) -> int:
    room = room_of(args)
    text = sys.stdin.read() if args.text == "-" else args.text
    body = {"handle": args.handle, "text": text, "episode": thread_of(room, args.task, args.episode)}
    sent = call("POST", f"/api/rooms/{path_part(room)}/reply", json_body=body)
    if args.json:
        print_json(sent)
    else:
        print(f"sent {sent['message_id']}")
    return 0
