"""The runners loop: this process's share of starting agents (sql/runners.sql decides the rest).

Every process may run it. Each pass it renews the leases of the jobs it runs (a job the database no
longer gives it is stopped), then claims as many due jobs as it has free slots
(``claim_runner_jobs``: SKIP LOCKED, under each runner's row lock, which also skips the wakes a
process already awaiting has answered) and runs each in a task of its own
(:mod:`mycelium.workers.processes`), recording its pid when it starts and its end
(``finish_runner_job``: exit code, tails, duration; a failure is retried by the database's rules).

It waits on ``mycelium_runners``, where a queued job hints its room, and looks again every
``POLL_SECONDS`` (a wake held for its grace, a retry's backoff, a hint lost between processes).
``MYCELIUM_RUNNER_SLOTS`` (8) is how many agent processes this process runs at once;
``MYCELIUM_RUNNER_LEASE_SECONDS`` (15) how long a job stays with a worker that stopped renewing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

from mycelium.hub import Hub
from mycelium.verbs import HUB_PROCESS, Verbs
from mycelium.workers.loop import Loop, LoopContext
from mycelium.workers.processes import agent_env, run_process, working_folder

log = logging.getLogger("mycelium.runners")

CHANNEL = "mycelium_runners"
POLL_SECONDS = 0.5


def _number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def hub_url(hub: Hub) -> str:
    """Where an agent process reaches this hub: ``MYCELIUM_API_URL`` when it is set, else the
    address this hub's settings listen on."""
    if os.environ.get("MYCELIUM_API_URL"):
        return hub.settings.api_url.rstrip("/")
    host = hub.settings.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{hub.settings.port}"


class RunnerWorker:
    def __init__(self, hub: Hub, verbs: Verbs, slots: int, lease: float) -> None:
        self.hub = hub
        self.verbs = verbs
        self.slots = max(1, slots)
        self.lease = lease
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.woken = asyncio.Event()
        self.running: dict[tuple[str, int], tuple[asyncio.Task[None], asyncio.Event]] = {}
        self.url = hub_url(hub)
        self._tokens: Any = None

    def on_hint(self, _channel: str, _payload: str) -> None:
        self.woken.set()

    async def claim(self) -> int:
        free = self.slots - len(self.running)
        if free <= 0:
            return 0
        jobs = await self.verbs.call(HUB_PROCESS, "claim_runner_jobs", worker=self.id, limit=free,
                                     lease_seconds=self.lease)
        for job in jobs:
            stop = asyncio.Event()
            key = (job["room"], job["id"])
            task = asyncio.create_task(self.run(job, stop))
            self.running[key] = (task, stop)
            task.add_done_callback(lambda _t, key=key: self.running.pop(key, None))
        return len(jobs)

    async def renew(self) -> None:
        held = set(await self.verbs.call(HUB_PROCESS, "renew_runner_jobs", worker=self.id,
                                         lease_seconds=self.lease) or ())
        for (room, job_id), (_task, stop) in list(self.running.items()):
            if job_id not in held and not stop.is_set():
                log.warning("runner job %s in %s was taken from this worker: stopping it", job_id, room)
                stop.set()

    async def token(self, handle: str, room: str) -> str | None:
        """A member token for the agent, when the hub's gate asks for one (none: its calls say why)."""
        if not self.hub.settings.auth:
            return None
        from mycelium.auth.member_tokens import MemberTokens, MemberTokensUnavailable

        try:
            if self._tokens is None:
                tokens = MemberTokens(self.verbs, self.hub.settings.auth_secret)
                await tokens.start()
                self._tokens = tokens
            token, _expires = self._tokens.sign(handle, room)
        except MemberTokensUnavailable as exc:
            log.warning("no member token for @%s in %s: %s", handle, room, exc)
            return None
        return str(token)

    async def run(self, job: Mapping[str, Any], stop: asyncio.Event) -> None:
        room, handle = job["room"], job["handle"]
        extra = {
            "MYCELIUM_API_URL": self.url,
            "MYCELIUM_ROOM": room,
            "MYCELIUM_HANDLE": handle,
            "MYCELIUM_EPISODE": str(job["episode"] or ""),
            "MYCELIUM_TASK": str(job["task"] or ""),
            "MYCELIUM_JOB": str(job["id"]),
        }
        token = await self.token(handle, room)
        if token:
            extra["MYCELIUM_TOKEN"] = token
        try:
            folder = working_folder(job["cwd"] or "", self.hub.settings.resolved_data_dir(), room)
        except OSError as exc:
            await self.finish(job, None, f"no working folder: {exc}", "", "")
            return

        async def started(pid: int) -> None:
            await self.verbs.call(HUB_PROCESS, "runner_job_started", room=room, id=job["id"], worker=self.id,
                                  pid=pid)

        try:
            ended = await run_process(list(job["command"]), folder, agent_env(list(job["env_names"]), extra),
                                      float(job["timeout_s"]), started, stop)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.finish(job, None, "stopped: its worker stopped", "", ""))
            raise
        except Exception as exc:  # recording the start failed (the job was taken over): it is not ours
            log.warning("runner job %s in %s: %s", job["id"], room, exc)
            return
        await self.finish(job, ended.exit_code, ended.reason, ended.stdout, ended.stderr)

    async def finish(
        self, job: Mapping[str, Any], code: int | None, reason: str | None, out: str, err: str
    ) -> None:
        from mycelium.errors import Refusal

        try:
            await self.verbs.call(HUB_PROCESS, "finish_runner_job", room=job["room"], id=job["id"],
                                  worker=self.id, exit_code=code, reason=reason, stdout_tail=out,
                                  stderr_tail=err)
        except Refusal as r:
            if r.error not in ("job_not_held", "job_not_found"):
                raise
            log.info("runner job %s in %s: %s", job["id"], job["room"], r.message)
        self.woken.set()  # a slot is free

    async def stop_all(self) -> None:
        tasks = [task for task, _stop in self.running.values()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_runners(ctx: LoopContext) -> None:
    hub = ctx.hub
    worker = RunnerWorker(hub, ctx.verbs, int(_number("MYCELIUM_RUNNER_SLOTS", 8)),
                          _number("MYCELIUM_RUNNER_LEASE_SECONDS", 15.0))
    await hub.wakes.listen(CHANNEL)
    unsubscribe = hub.wakes.on(CHANNEL, worker.on_hint)
    renewed = time.monotonic() - worker.lease
    try:
        while True:
            worker.woken.clear()
            if time.monotonic() - renewed > worker.lease / 3:
                await worker.renew()
                renewed = time.monotonic()
            claimed = await worker.claim()
            ctx.succeeded()
            if claimed and len(worker.running) < worker.slots:
                continue  # more may be due
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.woken.wait(), POLL_SECONDS)
    finally:
        unsubscribe()
        with contextlib.suppress(Exception):
            await asyncio.shield(worker.stop_all())


RUNNERS = Loop("runners", run_runners, interval=5.0)
