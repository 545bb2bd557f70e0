"""``mycelium runner``: register the way to start an agent for a handle, and see what the hub ran.

``runner add @bob -- pi -p "…"`` (the command after ``--``, with ``{room}`` ``{handle}`` ``{task}``
``{episode}``), ``ls``, ``rm``, ``test`` (start it once now and wait for its end), ``pause`` /
``resume``, ``jobs`` (newest first), ``job <id>`` (with the tails of its output), ``approve`` /
``deny <id>``. HTTP only: the hub's workers run the processes.
"""

from __future__ import annotations

import argparse
import shlex
import time
from typing import Any

from mycelium.cli.client import call, fail, print_json
from mycelium.cli.common import add_author, add_json, add_room, handle_of, path_part, room_of

ENDED = ("done", "failed", "skipped", "denied")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("runner")
    rsub = p.add_subparsers(dest="runner_command", metavar="<action>")
    rsub.required = True

    a = rsub.add_parser("add", help="register (or redefine) how to start an agent: add @bob -- pi -p …")
    a.add_argument("handle", help="the handle it starts, e.g. @bob")
    a.add_argument("command", nargs=argparse.REMAINDER,
                   help="after --: the program and its arguments ({room} {handle} {task} {episode})")
    a.add_argument("--cwd", default="", help="its working folder: absolute, or relative to the data folder "
                   "(default <data>/workspaces/<room>)")
    a.add_argument("--env", action="append", default=[], metavar="NAME",
                   help="a variable to pass from the worker's environment (repeatable; never its value)")
    a.add_argument("--max-concurrent", type=int, default=1)
    a.add_argument("--timeout", type=float, default=600.0, dest="timeout_s", help="seconds (default 600)")
    a.add_argument("--max-turns", type=int, default=100, dest="max_turns_per_room",
                   help="starts in this room before it stops (default 100)")
    a.add_argument("--max-attempts", type=int, default=3, help="tries of one wake (default 3)")
    a.add_argument("--approval", choices=("none", "required"), default="none",
                   help="required: each start waits for `mycelium runner approve <job>`")
    _common(a, author=True)
    a.set_defaults(func=_add, parser=a)

    ls = rsub.add_parser("ls", help="the room's runners")
    _common(ls)
    ls.set_defaults(func=_ls)

    rm = rsub.add_parser("rm", help="remove a runner (and its jobs' record)")
    rm.add_argument("handle")
    _common(rm)
    rm.set_defaults(func=_rm)

    t = rsub.add_parser("test", help="start a runner once now and wait for its end")
    t.add_argument("handle")
    t.add_argument("--wait", type=float, default=60.0, help="seconds to wait for its end (default 60)")
    _common(t)
    t.set_defaults(func=_test)

    for word, text in (("pause", "stop starting a handle's agent"), ("resume", "start it again when woken")):
        x = rsub.add_parser(word, help=text)
        x.add_argument("handle")
        _common(x)
        x.set_defaults(func=_pause, word=word)

    j = rsub.add_parser("jobs", help="what the runners started, newest first")
    j.add_argument("handle", nargs="?")
    j.add_argument("--state", choices=("waiting", "queued", "running", "done", "failed", "skipped", "denied"))
    j.add_argument("--limit", type=int, default=20)
    _common(j)
    j.set_defaults(func=_jobs)

    one = rsub.add_parser("job", help="one job: what ran, how it ended, the tails of its output")
    one.add_argument("id", type=int)
    _common(one)
    one.set_defaults(func=_job)

    for word in ("approve", "deny"):
        d = rsub.add_parser(word, help=f"{word} a job waiting for approval (an operator's word)")
        d.add_argument("id", type=int)
        _common(d, author=True)
        d.set_defaults(func=_decide, word=word)


def _common(p: argparse.ArgumentParser, *, author: bool = False) -> None:
    add_room(p)
    if author:
        add_author(p)
    add_json(p)


def _base(args: argparse.Namespace) -> str:
    return f"/api/rooms/{path_part(room_of(args))}"


def _handle(text: str) -> str:
    return text.removeprefix("@")


def _out(args: argparse.Namespace, value: Any, text: str) -> int:
    if args.json:
        print_json(value)
    else:
        print(text)
    return 0


def runner_line(r: dict[str, Any]) -> str:
    state = (f"paused: {r['paused_reason']}" if r["paused_reason"]
             else f"{r['running']} running, {r['pending']} pending")
    turns = f"turns {r['turns']}/{r['max_turns_per_room']}"
    return f"@{r['handle']}\t{shlex.join(r['command'])}\t{state}\t{turns}"


def job_line(j: dict[str, Any]) -> str:
    took = f"{j['duration_ms'] / 1000:.1f} s" if j["duration_ms"] is not None else ""
    code = "" if j["exit_code"] is None else f"exit {j['exit_code']}"
    return "\t".join(x for x in (f"#{j['id']}", f"@{j['handle']}", j["kind"], j["state"], code, took,
                                 j["reason"] or "") if x)


def _add(args: argparse.Namespace) -> int:
    command = list(args.command)
    if "--" in command:  # options given after the handle (REMAINDER took them): read them now
        cut = command.index("--")
        before, command = command[:cut], command[cut + 1:]
        if before:
            args = args.parser.parse_args([*before, args.handle], namespace=args)
    if not command:
        fail("runner add: give the command after --, e.g. mycelium runner add @bob -- pi -p '{room}'")
    body = {"handle": _handle(args.handle), "command": command, "cwd": args.cwd, "env": args.env,
            "max_concurrent": args.max_concurrent, "timeout_s": args.timeout_s,
            "max_turns_per_room": args.max_turns_per_room, "max_attempts": args.max_attempts,
            "approval": args.approval, "created_by": handle_of(args)}
    made = call("POST", f"{_base(args)}/runners", json_body=body)
    return _out(args, made, f"runner for @{made['handle']} in {room_of(args)}: {shlex.join(made['command'])}")


def _ls(args: argparse.Namespace) -> int:
    rows = call("GET", f"{_base(args)}/runners")
    return _out(args, rows, "\n".join(runner_line(r) for r in rows) or "(no runners)")


def _rm(args: argparse.Namespace) -> int:
    gone = call("DELETE", f"{_base(args)}/runners/{path_part(_handle(args.handle))}")
    return _out(args, gone, f"removed the runner for @{gone['handle']}")


def _pause(args: argparse.Namespace) -> int:
    r = call("POST", f"{_base(args)}/runners/{path_part(_handle(args.handle))}/{args.word}")
    return _out(args, r, runner_line({**r, "running": "?", "pending": "?"}) if r["paused_reason"]
                else f"@{r['handle']} is started again when woken")


def _test(args: argparse.Namespace) -> int:
    job = call("POST", f"{_base(args)}/runners/{path_part(_handle(args.handle))}/test")
    deadline = time.monotonic() + args.wait
    while job["state"] not in ENDED:
        if time.monotonic() > deadline:
            fail(f"job #{job['id']} is still {job['state']} after {args.wait:g} s"
                 + (" (no worker took it: is `mycelium up` or `mycelium worker` running?)"
                    if job["state"] == "queued" else ""))
        time.sleep(0.2)
        job = call("GET", f"{_base(args)}/jobs/{job['id']}")
    if args.json:
        print_json(job)
    else:
        print(_job_text(job))
    return 0 if job["state"] == "done" else 1


def _jobs(args: argparse.Namespace) -> int:
    handle = _handle(args.handle) if args.handle else None
    params = {"handle": handle, "state": args.state, "limit": args.limit}
    rows = call("GET", f"{_base(args)}/jobs", params=params)
    return _out(args, rows, "\n".join(job_line(j) for j in rows) or "(no jobs)")


def _job_text(j: dict[str, Any]) -> str:
    lines = [job_line(j)]
    if j["command"]:
        lines.append(f"ran: {shlex.join(j['command'])}" + (f"  (in {j['cwd']})" if j["cwd"] else ""))
    if j["worker"]:
        lines.append(f"worker: {j['worker']}" + (f", pid {j['pid']}" if j["pid"] else ""))
    for name in ("stdout_tail", "stderr_tail"):
        if j.get(name):
            lines.append(f"--- {name.split('_')[0]} (its end) ---\n{j[name].rstrip()}")
    return "\n".join(lines)


def _job(args: argparse.Namespace) -> int:
    j = call("GET", f"{_base(args)}/jobs/{args.id}")
    return _out(args, j, _job_text(j))


def _decide(args: argparse.Namespace) -> int:
    j = call("POST", f"{_base(args)}/jobs/{args.id}/{args.word}", json_body={"by": handle_of(args)})
    return _out(args, j, job_line(j))
