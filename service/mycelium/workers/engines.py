"""The engines loop: this process's share of the room engines' work.

Every process may run it; the database shares the work out. Each pass:

1. takes pending summons (``claim_engine_summons``, SKIP LOCKED, a lease of its own) and answers
   each in a task of its own (a slow model holds up no run): the conductor's ``list``/``show``, a
   refusal in place, or a run started (``start_engine_run``); a persona's turn or a synthesis
   through the model seam (``answer_summon``);
2. renews the leases of the runs it holds and takes runs of its kinds whose lease is free or ran
   out (``claim_engine_runs``): a run whose worker died is taken over here;
3. moves each run it holds that has something to do (``due_engine_runs``, which brings the replies
   along): the conductor's pure core computes the move from what the database says, and
   ``engine_step`` applies it in one transaction, compared and swapped on the run's seq and lease,
   so a move is made once.

It then waits on ``mycelium_engines``, where the database hints a summon (the room) and a reply a
run waits for (the room and the run): a reply wakes the worker holding its run, which reads that
run alone; other messages wake no engine worker. It also wakes at the earliest deadline of the runs
it holds, and every ``POLL_SECONDS`` it reads everything again (summons, every run it holds), so a
hint lost between processes costs a delay, never a move. ``MYCELIUM_ENGINE_KINDS``
(``conductor,persona,aligner,synthesizer,worker``) narrows the kinds this process plays;
``MYCELIUM_ENGINE_LEASE_SECONDS`` is how long a run stays with a worker that stopped renewing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from mycelium.contracts import vocabulary
from mycelium.embed import Embedder
from mycelium.engines import accord, conductor, persona
from mycelium.engines.aligner import worker as aligner
from mycelium.engines.flows import BUILT_IN, FlowError, Protocol, catalogue, parse_protocol
from mycelium.engines.models import Metered, model_from_env
from mycelium.errors import Refusal
from mycelium.verbs import HUB_PRINCIPAL, NOBODY, Actor, Verbs, usage
from mycelium.workers import synthesis
from mycelium.workers.loop import Loop, LoopContext
from mycelium.workers.runners import hub_url
from mycelium.workers.worker_turns import WorkerTurns

log = logging.getLogger("mycelium.engines")

#: the hint channel of the engine workers (sql/engines.sql: messages_summon_engines)
CHANNEL = "mycelium_engines"
#: every this many seconds a worker reads all its work again, hinted or not
POLL_SECONDS = 2.0
SUMMON_BATCH = 20
RUN_CAPACITY = 500
#: runs moved at once by one process (each on a pooled connection; the pool holds 20)
MOVES_AT_ONCE = 12


def _float_env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def kinds_from_env() -> list[str]:
    raw = os.environ.get("MYCELIUM_ENGINE_KINDS") or ",".join(vocabulary()["engine_kinds"])
    return [k.strip() for k in raw.split(",") if k.strip()]


def engine(handle: str) -> Actor:
    return Actor(handle, "engine")


class EngineWorker:
    """The state of one process's engines loop: who it is and the verbs it calls."""

    def __init__(
        self,
        verbs: Verbs,
        kinds: list[str],
        lease_seconds: float,
        step_timeout: float,
        embedder: Embedder | None = None,
        data_dir: Path | None = None,
        hub_url: str = "",
    ) -> None:
        self.verbs = verbs
        self.embedder = embedder
        self.kinds = kinds
        self.lease = lease_seconds
        self.step_timeout = step_timeout
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.model = Metered(model_from_env(), usage.recorder(verbs))  # each call a usage event
        self.turns = None if data_dir is None else WorkerTurns(verbs, self.id, self.model, data_dir, hub_url)
        self.summoned = True  # a summon was hinted (or a hint may have been lost): read the summons
        self.hinted: set[int] = set()  # runs to read again: a reply came, or a move left one due
        self.everything = True  # read every run this worker holds on the next pass
        self.woken = asyncio.Event()
        self.deadline = time.monotonic()  # when the earliest deadline of the runs held passes
        self.answering: dict[tuple[str, int], asyncio.Task[None]] = {}  # summons being answered
        self._in_turn: dict[tuple[str, ...], tuple[asyncio.Lock, list[int]]] = {}  # one answer at a time
        # per scope (the lock, and how many answers hold or wait for it)
        self._gate = asyncio.Semaphore(MOVES_AT_ONCE)

    def on_hint(self, _channel: str, payload: str) -> None:
        """A hint on :data:`CHANNEL`: '<room>' for a summon, '<room>\\t<run id>' for a reply a run
        waits for; '' (the listener reconnected, hints may be lost): everything."""
        _room, sep, run = payload.partition("\t")
        if sep and run.isdigit():
            self.hinted.add(int(run))
        else:
            self.summoned = True
            if not payload:
                self.everything = True
        self.woken.set()

    # -- summons ------------------------------------------------------------------------------

    async def take_summons(self) -> int:
        """Claim pending summons and answer each in a task of its own, so a model that takes its
        time over one (a persona's turn, a synthesis) holds up neither the others nor the runs this
        worker moves. Answers keep their order where it matters: one at a time per thread (so the
        summons one message makes are answered in order, and a run's move waits for the answers
        claimed in its thread before it), and per engine for those that remember (persona,
        synthesizer); at most ``MOVES_AT_ONCE`` at once. A summon still being answered here when its
        lease ran out and the claim gave it back is not answered twice."""
        self.summoned = False
        rows = await self.verbs.call(
            NOBODY,
            "claim_engine_summons",
            worker=self.id,
            limit=SUMMON_BATCH,
            lease_seconds=self.lease,
            kinds=self.kinds,
        )
        if len(rows) == SUMMON_BATCH:
            self.summoned = True  # more may wait
        for s in rows:
            key = (s["room"], s["id"])
            if key not in self.answering:
                task = asyncio.create_task(self.summon(s))
                self.answering[key] = task
                task.add_done_callback(lambda _t, key=key: self.answering.pop(key, None))
        return len(rows)

    async def summon(self, s: Mapping[str, Any]) -> None:
        scopes = [("thread", s["room"], s["episode"])]
        if s["kind"] in ("persona", "synthesizer", "worker"):
            scopes.append(("engine", s["room"], s["engine"]))
        try:
            async with contextlib.AsyncExitStack() as held:
                for scope in scopes:  # (always the thread's first: no two answers wait on each other)
                    await held.enter_async_context(self._turn_of(scope))
                async with self._gate:
                    await self.answer_one(s)
        except Exception:  # a failure to record a failure: the lease runs out, the summon comes back
            log.exception("summon %s in %s: its failure could not be recorded", s["id"], s["room"])
        finally:
            self.woken.set()  # a run it started is due, or more summons wait

    @contextlib.asynccontextmanager
    async def _turn_of(self, scope: tuple[str, ...]) -> AsyncIterator[None]:
        """Hold ``scope``'s turn: answers of one scope go one at a time, in the order claimed."""
        lock, users = self._in_turn.setdefault(scope, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._in_turn[scope]

    async def answer_one(self, s: Mapping[str, Any]) -> None:
        try:
            if s["outcome"] == "failed":  # the database gave it up: every attempt failed
                await self.summon_failed(s, None)
            elif s["kind"] == "conductor":
                await self.conduct(s)
            elif s["kind"] == "synthesizer":
                await synthesis.answer(self.verbs, self.model, self.id, s)
            elif s["kind"] == "worker":
                if self.turns is None:
                    raise RuntimeError("this process runs no worker turns (no data folder)")
                await self.turns.take(s)
            elif s["kind"] == "aligner":
                self.everything = True  # the negotiation it may start is due at once
                await aligner.negotiate(self, s)
            else:
                await self.play(s)
        except Refusal as r:
            if r.error != "summon_not_held":
                await self.summon_failed(s, f"{r.error}: {r.message}")
        except Exception as exc:  # one summon that breaks its answer never stalls the others
            log.exception("summon %s in %s failed", s["id"], s["room"])
            await self.summon_failed(s, f"{type(exc).__name__}: {exc}")

    async def stop_answering(self) -> None:
        """Give up the answers in flight (their summons come back when their leases run out)."""
        tasks = list(self.answering.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def summon_failed(self, s: Mapping[str, Any], error: str | None) -> None:
        """Record a failed attempt: the summon is tried again later, or, its attempts used up,
        closed as failed with the error said in its thread (the database decides which)."""
        try:
            await self.verbs.call(
                engine(s["engine"]), "summon_failed", room=s["room"], id=s["id"], worker=self.id, error=error
            )
        except Refusal as r:
            if r.error != "summon_not_held":
                raise

    async def answer(self, s: Mapping[str, Any], text: str, outcome: str = "answered", **extra: Any) -> None:
        await self.verbs.call(
            engine(s["engine"]),
            "answer_summon",
            room=s["room"],
            id=s["id"],
            worker=self.id,
            content=conductor.neutralise(text),
            payload=extra.get("payload", {"action": "reply"}),
            outcome=outcome,
            error=extra.get("error"),
            remember=extra.get("remember"),
        )

    async def room_flows(self, room: str) -> dict[str, Protocol]:
        flows: dict[str, Protocol] = {}
        for row in await self.verbs.call(NOBODY, "room_protocols", room=room):
            try:
                flows[row["name"]] = parse_protocol(row["body"], row["name"])
            except FlowError as exc:  # the write should have been refused; never run it
                log.warning("room %s: protocols/%s is not a flow: %s", room, row["name"], exc)
        return flows

    async def conduct(self, s: Mapping[str, Any]) -> None:
        d = conductor.split_directive(s["content"], s["engine"])
        own = await self.room_flows(s["room"])
        flows = catalogue(own)
        if d.word in conductor.CATALOGUE_WORDS or not d.word:
            await self.answer(s, conductor.catalogue_text(flows, list(own)))
            return
        if d.word in conductor.SHOW_WORDS:
            chosen = flows.get(d.arg)
            await self.answer(
                s,
                conductor.show_text(chosen)
                if chosen
                else conductor.unknown_text(d.arg, flows, list(BUILT_IN)),
            )
            return
        protocol = flows.get(d.word)
        if protocol is None:
            await self.answer(s, conductor.unknown_text(d.word, flows, list(BUILT_IN)), "refused")
            return
        members = list(d.members)
        if not members:
            agents = await self.verbs.call(NOBODY, "room_agents", room=s["room"])
            members = [a["handle"] for a in agents if a["adapter"] != "engine" and a["present"]]
        row = await self.verbs.call(NOBODY, "row_title", room=s["room"], episode=s["episode"])
        try:
            flow = conductor.new_flow(
                protocol,
                members,
                d.ask,
                row["key"] if row else "",
                row["title"] if row else "",
                self.step_timeout,
                await self.agreed(s["room"], row["key"]) if row else "",
            )
        except conductor.CannotRun as exc:
            await self.answer(s, str(exc), "refused")
            return
        try:
            started = await self.verbs.call(
                engine(s["engine"]),
                "start_engine_run",
                room=s["room"],
                summon=s["id"],
                worker=self.id,
                protocol=protocol.name,
                flow=flow,
                open=conductor.open_post(flow),
                lease_seconds=self.lease,
            )
        except Refusal as r:
            if r.status not in (409, 422) or r.error == "summon_not_held":
                raise
            await self.answer(s, r.message, "refused")
            return
        self.hinted.add(started["id"])  # due at once: its first question

    async def agreed(self, room: str, task: str) -> str:
        """The task's shared summary (accord's), which later runs on the task are shown."""
        try:
            got = await self.verbs.call(NOBODY, "get_memory", room=room, key=accord.summary_key(task))
        except Refusal as r:
            if r.error != "memory_not_found":
                raise
            return ""
        return str(got["body"] or "")

    async def play(self, s: Mapping[str, Any]) -> None:
        ctx = await self.verbs.call(
            NOBODY, "persona_context", room=s["room"], handle=s["engine"], limit=persona.HISTORY_TURNS
        )
        got = await persona.answer(
            self.model, s["engine"], ctx["notes"], ctx["turns"], s["sender"], s["content"]
        )
        await self.answer(
            s, got.content, got.outcome, payload=got.payload, error=got.error, remember=got.remember or None
        )

    # -- runs ---------------------------------------------------------------------------------

    async def take_runs(self) -> None:
        await self.verbs.call(NOBODY, "renew_engine_runs", worker=self.id, lease_seconds=self.lease)
        if self.answering:  # a turn longer than a lease (an agent command, a slow model) stays ours
            await self.verbs.call(NOBODY, "renew_engine_summons", worker=self.id,
                                  ids=sorted({i for _room, i in self.answering}), lease_seconds=self.lease)
        if {"conductor", "aligner"} & set(self.kinds):  # the kinds that run (a persona answers)
            taken = await self.verbs.call(
                NOBODY,
                "claim_engine_runs",
                worker=self.id,
                limit=RUN_CAPACITY,
                lease_seconds=self.lease,
                kinds=self.kinds,
            )
            if taken:
                self.everything = True  # taken over: due now, perhaps, and no hint will say so

    async def move_runs(self) -> int:
        """Move the runs that have something to do, a few at a time (each move is its own
        transaction on its own connection; runs are independent): every run this worker holds when
        it reads everything, else the hinted ones. A move that waits for nothing is read again on
        the next pass (the database says whether it is due again); one that waits for replies or a
        deadline is read when a reply's hint or its deadline comes (:meth:`apply`)."""
        everything, self.everything = self.everything, False
        ids, self.hinted = self.hinted, set()
        if not everything and not ids:
            return 0
        gate = asyncio.Semaphore(MOVES_AT_ONCE)

        async def one(run: Mapping[str, Any]) -> bool:
            # after the summons of its thread this worker is answering (the other summons of the
            # message that started it are answered under the floor as the start left it)
            async with self._turn_of(("thread", run["room"], run["episode"])), gate:
                try:
                    moved = await self.step(run)
                except Refusal as r:
                    if r.error not in ("lease_lost", "step_moved", "run_closed"):
                        raise
                    log.info("run %s: %s", run["short_id"], r.message)
                    return False
                return moved

        due = await self.verbs.call(
            NOBODY, "due_engine_runs", worker=self.id, ids=None if everything else sorted(ids)
        )
        moved = sum(await asyncio.gather(*(one(run) for run in due)))
        if everything:
            wait = await self.verbs.call(NOBODY, "next_engine_deadline", worker=self.id)
            if wait is None:
                wait = POLL_SECONDS
            elif wait <= 0:  # a run past its deadline did not move in this pass: look again soon
                wait = 0.25
            self.deadline = time.monotonic() + wait + 0.01
        return moved

    def expect(self, wait_seconds: float | None) -> None:
        """A move set a deadline this many seconds from now: wake then (to read everything)."""
        if wait_seconds is not None:
            self.deadline = min(self.deadline, time.monotonic() + wait_seconds)

    async def step(self, run: Mapping[str, Any]) -> bool:
        if run["kind"] == "aligner":
            return await aligner.step(self, run)
        replies = [
            conductor.Reply(r["sender"], r["text"], r["payload"] or {}, str(r["id"]), r["position"])
            for r in run["replies"]
        ]
        state = conductor.RunState(
            run["step"],
            run["turn"],
            tuple(run["waiting"]),
            run["asked_position"] is not None,
            run["pending"] or {},
        )
        vectors = await self.vectors(state.pending, replies)
        try:
            move = conductor.advance(run["flow"], state, replies, run["expired"], run["short_id"], vectors)
        except Exception as exc:  # a flow the conductor cannot walk: the run fails, on the record
            log.exception("run %s cannot move", run["short_id"])
            move = conductor.failed(run["flow"], f"{type(exc).__name__}: {exc}")
        if move is None:
            return False
        await self.apply(run, move)
        return True

    async def apply(self, run: Mapping[str, Any], move: conductor.Move) -> None:
        """One move of a run, a flow's or a negotiation's: ``engine_step``, compared and swapped on
        the run's seq and this worker's lease."""
        await self.verbs.call(
            engine(run["engine"]),
            "engine_step",
            room=run["room"],
            run=run["id"],
            worker=self.id,
            seq=run["seq"],
            trace=move.trace,
            posts=move.posts,
            step=move.step,
            waiting=move.waiting,
            wait_seconds=move.wait_seconds,
            pending=move.pending,
            speakers=move.speakers,
            close=move.close,
            reason=move.reason,
            outcome_text=move.outcome_text,
            metrics=move.metrics,
            memory=move.memory or None,
            assignments=move.assignments,
        )
        if move.close is None:
            self.expect(move.wait_seconds)
            if not move.waiting and move.wait_seconds is None:
                self.hinted.add(run["id"])  # nothing will hint it: read whether it is due again

    async def vectors(
        self, pending: Mapping[str, Any], replies: list[conductor.Reply]
    ) -> dict[str, list[float]] | None:
        """The embeddings a merge of labelled pieces may compare ({} when there is nothing to
        compare, None when the hub has no model or it failed: then only equal text folds)."""
        texts = accord.texts_for(pending, [(r.payload, r.text) for r in replies])
        if not texts:
            return {}
        if self.embedder is None:
            return None
        try:
            return dict(zip(texts, await self.embedder.aembed(texts), strict=True))
        except Exception:
            log.exception("the embedder failed; only equal text folds")
            return None

    async def release(self) -> None:
        await self.verbs.call(NOBODY, "release_engine_runs", worker=self.id)


async def run_engines(ctx: LoopContext) -> None:
    hub = ctx.hub
    worker = EngineWorker(
        # the hub itself (behind the gate it sees private rooms too), its writes' hints sent by their
        # own commits (the triggers' NOTIFY), not queued for the listener's next batch: a step's
        # question wakes its member a round trip sooner, and no crash between the commit and the
        # send can lose the hint. Engine commits are few beside the API's, so their queueing on the
        # server's notify lock (the reason the API defers its hints) costs them little.
        Verbs(hub.db, None, HUB_PRINCIPAL),
        kinds_from_env(),
        _float_env("MYCELIUM_ENGINE_LEASE_SECONDS", 15.0),
        _float_env("MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S", conductor.STEP_TIMEOUT_SECONDS),
        hub.embedder,
        hub.settings.resolved_data_dir(),
        hub_url(hub),
    )
    wakes = hub.wakes
    await wakes.listen(CHANNEL)
    unsubscribe = wakes.on(CHANNEL, worker.on_hint)
    log.info("engines: worker %s plays %s", worker.id, ", ".join(worker.kinds))
    renewed = polled = time.monotonic() - worker.lease
    try:
        while True:
            worker.woken.clear()
            now = time.monotonic()
            if now - polled >= POLL_SECONDS or now >= worker.deadline:
                worker.summoned = worker.everything = True
                worker.deadline = now + POLL_SECONDS
                polled = now
            if worker.summoned:
                await worker.take_summons()
            if time.monotonic() - renewed > worker.lease / 3:
                await worker.take_runs()
                renewed = time.monotonic()
            await worker.move_runs()
            ctx.succeeded()
            if not (worker.summoned or worker.everything or worker.hinted):
                until = min(polled + POLL_SECONDS, worker.deadline, renewed + worker.lease / 3)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(worker.woken.wait(), max(until - time.monotonic(), 0.0))
    finally:
        unsubscribe()
        with contextlib.suppress(Exception):
            await asyncio.shield(worker.stop_answering())
        with contextlib.suppress(Exception):
            await asyncio.shield(worker.release())


ENGINES = Loop("engines", run_engines, interval=5.0)
