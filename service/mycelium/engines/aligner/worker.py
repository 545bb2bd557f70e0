"""The aligner on the engines loop (mycelium.workers.engines dispatches here on the kind): a
summon starts a negotiation, and each move of a negotiation a worker holds is one
``engine_step`` transaction, like a conductor's."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mycelium.engines.aligner import negotiation
from mycelium.engines.aligner.mechanism import N_STEPS, Replayer, warm
from mycelium.engines.conductor import Reply
from mycelium.engines.models import configured
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor

if TYPE_CHECKING:
    from mycelium.workers.engines import EngineWorker

log = logging.getLogger("mycelium.engines.aligner")
#: the mechanisms this process moved last (a fresh process, or a run moved elsewhere, replays its log)
REPLAYER = Replayer()
WARMING: list[asyncio.Future[None]] = []


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def settings() -> tuple[float, int, bool, float]:
    """The round timeout (``MYCELIUM_ALIGNER_ROUND_TIMEOUT_S``), NEGMAS's step cap
    (``MYCELIUM_ALIGNER_MAX_STEPS``), whether the term check runs (``MYCELIUM_ALIGNER_TERM_CHECK``,
    on unless ``false``/``0``/``off``) and how long a broker note may take the model
    (``MYCELIUM_ALIGNER_NOTE_TIMEOUT_S``)."""
    timeout = _env_number("MYCELIUM_ALIGNER_ROUND_TIMEOUT_S", negotiation.ROUND_TIMEOUT_SECONDS)
    raw = (os.environ.get("MYCELIUM_ALIGNER_TERM_CHECK") or "true").strip().lower()
    check = raw not in ("false", "0", "off", "no")
    note = _env_number("MYCELIUM_ALIGNER_NOTE_TIMEOUT_S", negotiation.NOTE_TIMEOUT_SECONDS)
    return timeout, max(1, int(_env_number("MYCELIUM_ALIGNER_MAX_STEPS", N_STEPS))), check, note


async def negotiate(w: EngineWorker, s: Mapping[str, Any]) -> None:
    """Answer an aligner's summon: a negotiation started, or a refusal said where it was asked."""
    members, ask = negotiation.split_summon(s["content"], s["engine"])
    if not members:
        agents = await w.verbs.call(NOBODY, "room_agents", room=s["room"])
        members = [a["handle"] for a in agents if a["adapter"] != "engine" and a["present"]]
    if len(members) < 2:
        await w.answer(s, negotiation.TOO_FEW, "refused")
        return
    row = await w.verbs.call(NOBODY, "row_title", room=s["room"], episode=s["episode"])
    timeout, n_steps, check, note = settings()
    flow = negotiation.new_flow(
        members, ask, row["key"] if row else "", row["title"] if row else "", timeout, n_steps, check, note
    )
    try:
        await w.verbs.call(
            Actor(s["engine"], "engine"),
            "start_negotiation",
            room=s["room"],
            summon=s["id"],
            worker=w.id,
            flow=flow,
            open=negotiation.open_post(flow),
            lease_seconds=w.lease,
        )
    except Refusal as r:
        if r.status not in (403, 404, 409, 422) or r.error == "summon_not_held":
            raise
        await w.answer(s, r.message, "refused")
        return
    if not WARMING:  # NEGMAS loads while the members state their openings
        WARMING.append(asyncio.ensure_future(asyncio.to_thread(warm)))


async def step(w: EngineWorker, run: Mapping[str, Any]) -> bool:
    """Make the next move of a negotiation this worker holds, if it has one."""
    room = run["room"]
    model = w.model if configured(w.model) else None

    async def read_prior(topic: str) -> Mapping[str, Any] | None:
        row = await w.verbs.call(NOBODY, "team_prior", room=room, topic=topic)
        if not row:
            return None
        meta = row["meta"] or {}
        l9 = meta.get("l9") or {}
        return {
            "key": row["key"],
            "agreement": meta.get("agreement"),
            "posterior": l9.get("posterior"),
            "episode_count": l9.get("episode_count", 0),
            "episode_id": l9.get("episode_id"),
        }

    n = negotiation.Negotiation(run, model, read_prior, REPLAYER)
    moves: list[Any] = []  # the mechanism held is at the run's turn: no move to read
    if n.after != int(run["turn"]):
        got = await w.verbs.call(NOBODY, "negotiation_log", room=room, run=run["id"], after=n.after)
        moves = got["moves"]
    replies = [  # what its question got, read with the run (due_engine_runs)
        Reply(r["sender"], r["text"], r["payload"] or {}, str(r["id"]), r["position"]) for r in run["replies"]
    ]
    try:
        move = await n.advance(replies, moves, run["departure"])  # who left, read with the run
    except Exception as exc:  # a negotiation the aligner cannot go on with fails, on the record
        log.exception("negotiation %s cannot move", run["short_id"])
        move = negotiation.failed(run["flow"], f"{type(exc).__name__}: {exc}")
    if move is None:
        n.kept(None)
        return False
    try:
        await w.apply(run, move)
    except Refusal as r:
        if r.error != "not_in_roster":
            raise
        log.info("negotiation %s: its roster changed under the move (%s)", run["short_id"], r.message)
        return False
    n.kept(move)
    return True
