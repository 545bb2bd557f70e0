"""The compile loop: agreements that runs converged on become rows on the board.

Every process may run it; the database shares the work out. Each pass takes pending compile jobs
(``claim_compile_jobs``: SKIP LOCKED, a lease of this worker's), asks the model for each job's task
lines (:mod:`mycelium.engines.compiler`; the raw agreement when it cannot answer) and files them
(``file_compiled_tasks``: every row, the job closed, the thread told and the record rewritten, in one
transaction, as the run's engine). A worker that dies mid-job leaves it to the next one when its
lease runs out; a worker whose lease was taken over files nothing (409 ``compile_not_held``).
It then waits for a hint (a run converged) or ``POLL_SECONDS``. ``MYCELIUM_COMPILE_LEASE_SECONDS``
is how long a job stays with a worker that took it (longer than a model's answer takes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from mycelium.engines.compiler import compile_agreement
from mycelium.engines.models import Metered, Model, model_from_env
from mycelium.errors import Refusal
from mycelium.verbs import HUB_PRINCIPAL, NOBODY, Actor, Verbs, usage, verbs_of
from mycelium.workers.loop import Loop, LoopContext

log = logging.getLogger("mycelium.compile")

POLL_SECONDS = 1.0
BATCH = 10
CHANNEL = "mycelium_compile"


def lease_from_env() -> float:
    try:
        return float(os.environ.get("MYCELIUM_COMPILE_LEASE_SECONDS") or 90.0)
    except ValueError:
        return 90.0


class Compiler:
    """One process's share of the compile jobs: who it is, the verbs it calls, its model."""

    def __init__(self, verbs: Verbs, model: Model, lease_seconds: float) -> None:
        self.verbs = verbs
        self.model = model
        self.lease = lease_seconds
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    async def take(self) -> int:
        """Take a batch of jobs and file each; how many were taken."""
        jobs = await self.verbs.call(NOBODY, "claim_compile_jobs", worker=self.id, limit=BATCH,
                                     lease_seconds=self.lease)
        for job in jobs:
            try:
                await self.compile(job)
            except Refusal as r:  # held by another worker now, or refused: it stays for the next attempt
                log.log(logging.INFO if r.error == "compile_not_held" else logging.WARNING,
                        "compile of run %s in %s: %s", job["run_id"], job["room"], r.message)
        return len(jobs)

    async def compile(self, job: Mapping[str, Any]) -> None:
        run = await self.verbs.call(NOBODY, "compile_context", room=job["room"], run=job["run_id"])
        if run is None:  # gone with its room since it was taken
            return
        participants = [str(h) for h in run["participants"] or [] if isinstance(h, str)]
        got = await compile_agreement(self.model, run["assignments"] or {}, participants, run["task_title"],
                                      run["engine"])
        if got.source == "raw":
            log.warning("run %s: filing the raw agreement: %s", run["short_id"], got.note)
        await self.verbs.call(Actor(run["engine"], "engine"), "file_compiled_tasks", room=job["room"],
                              run=job["run_id"], worker=self.id, lines=[line.as_json() for line in got.lines],
                              source=got.source, note=got.note)

    async def release(self) -> None:
        await self.verbs.call(NOBODY, "release_compile_jobs", worker=self.id)


async def run_compiler(ctx: LoopContext) -> None:
    hub = ctx.hub
    # as the hub itself: behind the token gate it sees the private rooms' runs too
    verbs = verbs_of(hub, HUB_PRINCIPAL)
    compiler = Compiler(verbs, Metered(model_from_env(), usage.recorder(verbs)), lease_from_env())
    await hub.wakes.listen(CHANNEL)
    log.info("compile: worker %s compiles with %s", compiler.id, compiler.model.name)
    try:
        while True:
            busy = await compiler.take()
            ctx.succeeded()
            if not busy:
                await hub.wakes.wait(CHANNEL, POLL_SECONDS)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(compiler.release())


COMPILE = Loop("compile", run_compiler, interval=POLL_SECONDS * 20)
