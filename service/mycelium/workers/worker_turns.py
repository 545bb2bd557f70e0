"""One turn of a worker engine, run by the engines loop for a summon of kind ``worker``.

The turn reads what the database says (``worker_context``), claims the row first when it was filed
for the worker, runs the agent command (``MYCELIUM_WORKER_COMMAND``, default ``pi -p {prompt}``) in
the worker's worktree with the prompt on its standard input, and hands the answer to
``worker_turn``, which applies it and closes the summon in one transaction. A command that fails
(a non-zero exit, its timeout ``workers.timeout_seconds``, no answer) is an attempt that failed:
the summon is tried again later and, its attempts used up, closed as failed with the reason said
in the thread; nothing is made up in its place. With ``workers.tools`` off the worker is
write-only: the hub's model answers the same prompt and nothing runs. Past
``workers.max_turns_per_room`` turns the worker declines, saying so.

The command's environment is small: ``PATH``, ``HOME``, the locale, the variables
``MYCELIUM_WORKER_ENV`` names (comma-separated, their values from this process), git's author and
committer (the worker's handle), and ``MYCELIUM_API_URL``, ``MYCELIUM_ROOM``, ``MYCELIUM_HANDLE``,
``MYCELIUM_EPISODE``, ``MYCELIUM_TASK`` (the row), ``MYCELIUM_WAKE`` (mention, addressed, filed,
completed), ``MYCELIUM_TEAM`` and ``MYCELIUM_WORKTREE``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mycelium.engines import worker
from mycelium.engines.models import Model
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor, Verbs
from mycelium.workers import worktrees
from mycelium.workers.processes import agent_env, run_process

#: how much of a command's answer is read (its last characters)
ANSWER_CHARS = 100_000
THREAD_MESSAGES = 20


class TurnFailed(RuntimeError):
    """The agent command gave no answer (the message says why)."""


def env_names() -> list[str]:
    return [n.strip() for n in (os.environ.get("MYCELIUM_WORKER_ENV") or "").split(",") if n.strip()]


class WorkerTurns:
    def __init__(self, verbs: Verbs, worker_id: str, model: Model, data_dir: Path, url: str) -> None:
        self.verbs = verbs
        self.id = worker_id
        self.model = model
        self.data_dir = data_dir
        self.url = url
        self.argv = worker.command(os.environ.get("MYCELIUM_WORKER_COMMAND"))

    async def take(self, s: Mapping[str, Any]) -> None:
        me = Actor(s["engine"], "engine")
        ctx = await self.context(s)
        settings = ctx["settings"]
        limit = int(settings["max_turns_per_room"])
        if ctx["turns_taken"] >= limit:
            await self.decline(s, f"@{s['engine']} has taken its {limit} turns in this room "
                                  "(workers.max_turns_per_room); it answers no more here.")
            return
        row = ctx.get("row")
        if s["how"] == "filed" and row:
            if row["settled"]:
                await self.decline(s, f"{row['key']} is settled already: @{s['engine']} has nothing to do.")
                return
            timeout = float(settings["timeout_seconds"])
            try:
                await self.verbs.call(me, "claim_task", room=s["room"], key=row["key"], handle=s["engine"],
                                      ttl_minutes=max(30, math.ceil(timeout / 60) * 2), force=False)
            except Refusal as r:
                if r.error not in ("lease_held", "waiting"):
                    raise
                await self.decline(s, f"@{s['engine']} cannot take {row['key']}: {r.message}.")
                return
            ctx = await self.context(s)  # the row as the claim left it
        text = worker.prompt(ctx)
        if settings["tools"]:
            said, used = await self.run_command(s, ctx, text, float(settings["timeout_seconds"]))
        else:
            said = await self.model.complete(
                f"You are @{s['engine']}, a worker in this room. Answer in writing only.",
                [{"role": "user", "content": text}], handle=s["engine"])
            used = {"model": self.model.name}
        if not said.strip():
            raise TurnFailed("the agent command answered nothing")
        p = worker.parse(said, s["engine"])
        await self.verbs.call(
            me, "worker_turn", room=s["room"], id=s["id"], worker=self.id, content=p.content, tasks=p.tasks,
            done=p.done, mentions=p.mentions, payload={**p.payload, **used},
        )

    async def context(self, s: Mapping[str, Any]) -> dict[str, Any]:
        got: dict[str, Any] = await self.verbs.call(NOBODY, "worker_context", room=s["room"], id=s["id"],
                                                    limit=THREAD_MESSAGES)
        return got

    async def run_command(
        self, s: Mapping[str, Any], ctx: Mapping[str, Any], text: str, timeout: float
    ) -> tuple[str, dict[str, Any]]:
        room, handle = s["room"], s["engine"]
        row = ctx.get("row") or {}
        async with worktrees.turn(self.data_dir, room, handle) as tree:
            values = {"room": room, "handle": handle, "task": str(row.get("key") or ""),
                      "episode": str(s["episode"]), "prompt": text}
            argv = worker.substitute(self.argv, values)
            extra = {
                **worktrees.identity(handle),
                "MYCELIUM_API_URL": self.url, "MYCELIUM_ROOM": room, "MYCELIUM_HANDLE": handle,
                "MYCELIUM_EPISODE": str(s["episode"]), "MYCELIUM_TASK": str(row.get("key") or ""),
                "MYCELIUM_WAKE": s["how"], "MYCELIUM_TEAM": ",".join(ctx.get("team") or []),
                "MYCELIUM_WORKTREE": str(tree),
            }
            ended = await run_process(argv, tree, agent_env(env_names(), extra), timeout,
                                      stdin=text.encode(), stdout_chars=ANSWER_CHARS)
        if ended.exit_code != 0 or ended.reason:
            why = ended.reason or f"exit code {ended.exit_code}"
            err = ended.stderr.strip()[-400:]
            raise TurnFailed(f"{argv[0]}: {why}" + (f": {err}" if err else ""))
        return ended.stdout, {"command": argv[0], "seconds": round(ended.seconds, 3),
                              "worktree": f"swarm/{handle}"}

    async def decline(self, s: Mapping[str, Any], reason: str) -> None:
        await self.verbs.call(Actor(s["engine"], "engine"), "worker_declined", room=s["room"], id=s["id"],
                              worker=self.id, reason=reason)
