"""One move of a negotiation, computed from what the database says.

A negotiation walks: **opening** (every member asked at once for its position) → **clarify** (one
round, only when the term check finds a term used in different senses; kept out of the metrics) →
issue discovery → **round** after round, one member addressed at a time in NEGMAS's order, until
NEGMAS ends it. :meth:`Negotiation.advance` is one move: from the run row (current step, whom it
waits for, the state in ``pending``), the replies in the thread and the move log (the run's trace),
what to record, post and hold next, the parameters of ``mycelium.engine_step``. The mechanism is
rebuilt from the move log (:meth:`Mechanism.replay`), or moved on from the one this worker holds
at a turn of that log by the moves recorded after it (:class:`Replayer`), so any worker computes
the same move, and a move is never asked twice (the question and its position are committed with
the step).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from mycelium.core import markers
from mycelium.core.mentions import TOKEN_PATTERN, loud_mentions
from mycelium.engines.aligner import metrics
from mycelium.engines.aligner.issues import NoIssues, Opening, discover, term_check
from mycelium.engines.aligner.mechanism import N_STEPS, Mechanism, Replayer, Turn
from mycelium.engines.aligner.moves import Offer, Reading, own_line, prose_of, read_reply, terms
from mycelium.engines.conductor import Move, Reply, neutralise
from mycelium.engines.models import Model

NAME = "negotiate"
ROUND_TIMEOUT_SECONDS = 30.0
#: how long a broker note may take the model before the plain one is posted instead
NOTE_TIMEOUT_SECONDS = 8.0
NOTE_MAX_CHARS = 600
NOTE_SYSTEM = (
    "You broker a negotiation. Write the short note (two sentences at most) that goes to the member "
    "whose turn it is: what is on the table, and what they might weigh in answering. Use only the "
    "facts given; invent no position, argument, deadline or promise. Plain prose: no lists, no "
    "@-mentions, no move markers."
)
PRIOR_PREFIX = "l9/rule_update/"
TOO_FEW = (
    "A negotiation needs at least two agents. Name them when you summon me, e.g. "
    "`@aligner @alice @bob: the price and the vendor`."
)
HOW_TO_ANSWER = (
    "Answer with a move marker: [[mycelium: accept]] (take what is on the table), "
    "[[mycelium: reject]] (keep your own line), or [[mycelium: offer <issue>=<option> …]] naming "
    "every issue; or say it in words. [[mycelium: confidence=0.8]] says how sure you are."
)
_MENTION = re.compile(TOKEN_PATTERN)

PriorReader = Callable[[str], Awaitable[Mapping[str, Any] | None]]


# ── the summon ──────────────────────────────────────────────────────────────


def split_summon(text: str, engine: str) -> tuple[list[str], str]:
    """The members named (in order, the engine left out) and the ask (the rest of the text)."""
    members = [h for h in loud_mentions(text) if h != engine]
    ask = re.sub(r"\s+", " ", _MENTION.sub(" ", text)).strip().lstrip(":,;—–- ").strip()
    return list(dict.fromkeys(members)), ask


def new_flow(
    members: Sequence[str],
    ask: str,
    task: str,
    title: str,
    round_timeout: float = ROUND_TIMEOUT_SECONDS,
    n_steps: int = N_STEPS,
    term_check: bool = True,
    note_timeout: float = NOTE_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """What a negotiation keeps of its set-up (engine_runs.flow)."""
    return {
        "kind": "aligner",
        "protocol": {
            "name": NAME,
            "description": "a negotiation on NEGMAS's stacked alternating offers",
            "roles": [],
            "steps": [],
        },
        "cast": list(members),
        "bound": {},
        "ask": ask,
        "task": task,
        "title": title,
        "round_timeout": round_timeout,
        "n_steps": n_steps,
        "term_check": term_check,
        "note_timeout": note_timeout,
    }


def open_post(flow: Mapping[str, Any]) -> dict[str, Any]:
    line = {"event": "open", "protocol": NAME, "members": flow["cast"], "n_steps": flow["n_steps"]}
    text = (
        f"negotiate: {flow['ask'] or flow['title']}\nMembers: {', '.join('@' + h for h in flow['cast'])}\n"
        f"NEGMAS ends it: when everyone accepts the offer on the table, or after {flow['n_steps']} moves. "
        "Only the members may write in this thread until then."
    )
    return {"content": neutralise(text), "payload": {"aligner": line, "metadata": {"aligner": line}}}


# ── one move ────────────────────────────────────────────────────────────────


class Negotiation:
    """One move of a negotiation: made from the run row with ``replayer``'s mechanism for the run
    taken out (:attr:`after` is the trace turn it is at, whose later moves :meth:`advance` is to
    be given; 0: the whole log); :meth:`kept` returns it, moved, once the move is committed."""

    def __init__(
        self,
        run: Mapping[str, Any],
        model: Model | None,
        read_prior: PriorReader,
        replayer: Replayer | None = None,
    ) -> None:
        self.flow = run["flow"]
        self.cast: list[str] = list(self.flow["cast"])
        self.short_id = run["short_id"]
        self.run = run
        self.model = model
        self.read_prior = read_prior
        self.replayer = replayer or Replayer(0)
        self.key = (run["room"], run["id"])
        self.move = Move(pending=dict(run["pending"] or {}))
        self.n_steps = int(self.flow.get("n_steps", N_STEPS))
        self.after, self.held = self.replayer.take(
            self.key, int(run["turn"]), self.issues, self.cast, self.n_steps, self.p.get("asks")
        )
        self.moves: list[Mapping[str, Any]] = []
        self.mechanism: Mechanism | None = None  # the one this move leaves, when it leaves one

    @property
    def p(self) -> dict[str, Any]:
        return self.move.pending

    @property
    def issues(self) -> dict[str, list[str]]:
        return self.p.get("issues") or {}

    # -- posting --------------------------------------------------------------------------------

    def ask(self, step: str, targets: list[str], head: str, body: str, line: dict[str, Any]) -> None:
        line = {"event": "turn", "protocol": NAME, "step": step, "to": targets, **line}
        self.move.posts.append(
            {
                "event": "turn",
                "content": neutralise(f"{head}\n\n{body}"),
                "recipients": targets,
                "payload": {"aligner": line, "metadata": {"aligner": line}},
            }
        )
        self.move.step = step
        self.move.speakers = targets
        self.move.waiting = targets
        self.move.wait_seconds = float(self.flow.get("round_timeout", ROUND_TIMEOUT_SECONDS))

    def ask_openings(self) -> None:
        body = (
            f"{self.flow['ask'] or self.flow['title']}\n\nYour opening position, please: what you ask "
            f"for on each term, e.g. [[mycelium: offer price=20 vendor=acme]], and why.\n{HOW_TO_ANSWER}"
        )
        head = f"negotiate · opening positions · {', '.join(self.cast)}"
        self.ask("opening", list(self.cast), head, body, {})

    def space_text(self) -> str:
        return "\n".join(f"- {name}: {' | '.join(opts)}" for name, opts in self.issues.items())

    def facts(self, h: str, m: Mechanism, reading: Reading | None) -> list[str]:
        """What the member addressed is told as it stands, nothing but the record's facts."""
        standing, by = m.standing(), m.standing_by()
        held = own_line(h, self.issues, self.p.get("last_line", {}), self.p.get("asks", {}))
        lines = []
        if reading is not None:
            lines.append(f"I read {reading.handle}'s reply as: {reading.said}.")
        if standing is None:
            lines.append("Nothing is on the table yet: make the first offer.")
        else:
            lines.append(f"On the table, from {by}: {terms(standing)}. Your own line: {terms(held)}.")
        prior = self.p.get("prior")
        if prior and prior.get("agreement"):
            lines.append(
                f"Last time this team settled {self.p.get('topic')} on {terms(prior['agreement'])}."
            )
        settled = self.p.get("settled")
        if settled:
            lines.append(f"Already agreed: {terms(settled)}.")
        return lines

    async def broker_note(self, h: str, facts: Sequence[str]) -> tuple[str | None, str | None]:
        """The model's note to ``h`` (None and why, when the model is missing, slow or failing, or
        wrote nothing usable: the facts alone are the note then)."""
        if self.model is None:
            return None, "no model is configured"
        prompt = (
            f"Broker note for {h}.\nNegotiation: {markers.defang(self.flow['ask'] or self.flow['title'])}\n"
            + "\n".join(facts) + f"\nIssues:\n{self.space_text()}"
        )
        timeout = float(self.flow.get("note_timeout", NOTE_TIMEOUT_SECONDS))
        asked = [{"role": "user", "content": prompt}]
        try:
            text = await asyncio.wait_for(
                self.model.complete(NOTE_SYSTEM, asked, handle=self.run["engine"]), timeout
            )
        except TimeoutError:
            return None, f"the model did not write the note within {timeout:g} s"
        except Exception as exc:  # a note is never worth a negotiation: the plain one goes out
            return None, str(exc) or type(exc).__name__
        note = re.sub(r"\s+", " ", markers.MARKER_RE.sub(" ", str(text or ""))).strip()
        if not note:
            return None, "the model wrote no note"
        if len(note) > NOTE_MAX_CHARS:
            note = note[: NOTE_MAX_CHARS - 1].rstrip() + "…"
        return note, None

    async def ask_round(self, m: Mechanism, reading: Reading | None) -> None:
        h = m.next_handle()
        facts = self.facts(h, m, reading)
        note, error = await self.broker_note(h, facts)
        entry = self.move.trace[-1]
        entry["note"] = "model" if note else "plain"
        if error:
            entry["note_error"] = error
        lines = [facts[0], note, *facts[1:]] if reading is not None else [note, *facts]
        body = "\n".join(x for x in lines if x) + f"\n\nIssues:\n{self.space_text()}\n\n{HOW_TO_ANSWER}"
        rnd = m.steps + 1
        self.ask("round", [h], f"negotiate · move {rnd} of {self.n_steps} · {h}", body,
                 {"round": rnd, "cap": self.n_steps, "standing": m.standing()})

    # -- confidences ----------------------------------------------------------------------------

    def note_confidence(self, handle: str, value: float | None) -> None:
        if value is None:
            return
        first = dict(self.p.get("first_confidence", {}))
        first.setdefault(handle, value)
        self.p["first_confidence"] = first
        self.p["last_confidence"] = {**self.p.get("last_confidence", {}), handle: value}

    def note_cause(self, r: Reading) -> None:
        f = r.fields
        pool = list(self.p.get("evidence_pool", []))
        addresses = frozenset(a.strip() for a in f.get("addresses", "").split(",") if a.strip())
        rev = metrics.Revision(f.get("revision_cause"), r.action == "accept", f.get("deferred_to"), addresses)
        first = self.p.get("first_confidence", {}).get(r.handle)
        cause = metrics.revision_cause(rev, first, self.p.get("last_confidence", {}).get(r.handle), pool)
        if cause:
            self.p["causes"] = {**self.p.get("causes", {}), r.handle: cause}
        pool += [e.strip() for e in f.get("evidence", "").split(",") if e.strip() and e.strip() not in pool]
        self.p["evidence_pool"] = pool

    # -- the steps ------------------------------------------------------------------------------

    def opening_of(self, handle: str, r: Reply | None) -> Opening:
        if r is None or r.failed:
            return Opening(handle, "")
        move = markers.move_of(r.payload, r.text)
        offer = dict(move.offer) if move is not None and move.action == "offer" else None
        return Opening(handle, prose_of(r.text), offer, r.id, markers.confidence_of(r.payload, r.text))

    def openings(self) -> list[Opening]:
        return [
            Opening(h, o["text"], o.get("offer"), o.get("reply"), o.get("confidence"))
            for h, o in self.p.get("openings", {}).items()
        ]

    async def opened(self, got: Mapping[str, Reply]) -> None:
        ops = [self.opening_of(h, got.get(h)) for h in self.run["waiting"]]
        for o in ops:
            self.note_confidence(o.handle, o.confidence)
        self.p["openings"] = {o.handle: o.as_dict() for o in ops}
        entry: dict[str, Any] = {
            "step": "opening",
            "to": list(self.run["waiting"]),
            "positions": {o.handle: o.as_dict() for o in ops if o.offer or o.text},
            "silent": [o.handle for o in ops if not (o.offer or o.text)],
        }
        self.move.trace.append(entry)
        found = await term_check(ops, self.model) if self.flow.get("term_check", True) else []
        if found:
            entry["terms"] = found
            self.p["terms"] = found
            who = [h for h in self.cast if any(h in t["readings"] for t in found)]
            body = "Before we negotiate: you seem to mean different things by " + "; ".join(
                f"'{t['term']}' ({', '.join(f'{h}: {r}' for h, r in t['readings'].items())})" for t in found
            ) + ".\nPlease say in a sentence what you mean by each. No offers yet."
            self.ask("clarify", who, f"negotiate · clarify terms · {', '.join(who)}", body, {"terms": found})
            return
        await self.start_rounds(entry, ops, {})

    async def clarified(self, got: Mapping[str, Reply]) -> None:
        answers = {
            h: prose_of(r.text) for h in self.run["waiting"] if (r := got.get(h)) is not None and not r.failed
        }
        answers = {h: t for h, t in answers.items() if t}
        self.p["clarifications"] = answers
        entry: dict[str, Any] = {"step": "clarify", "to": list(self.run["waiting"]), "answers": answers}
        self.move.trace.append(entry)
        await self.start_rounds(entry, self.openings(), answers)

    async def start_rounds(self, entry: dict[str, Any], ops: list[Opening], clar: Mapping[str, str]) -> None:
        try:
            space = await discover(ops, self.model, clar)
        except NoIssues as exc:
            entry["issues"] = None
            self.p["issues"] = None  # recorded as none: the run leaves no episode (run_leaves_episode)
            self.nothing_to_negotiate(str(exc))
            return
        topic = self.flow.get("topic") or "-".join(sorted(space.issues))
        prior = await self.read_prior(topic)
        entry.update(issues=space.issues, settled=space.settled, asks=space.asks, discovered=space.how)
        self.p.update(issues=space.issues, settled=space.settled, asks=space.asks, topic=topic)
        if prior:
            self.p["prior"] = dict(prior)
            entry["prior"] = dict(prior)
        self.mechanism = Mechanism(space.issues, self.cast, self.n_steps, space.asks)
        await self.ask_round(self.mechanism, None)

    def recorded_turns(self) -> list[Turn]:
        """The turns of the moves read (those after :attr:`after`)."""
        return [
            Turn(e["who"], e["action"], e.get("offer"))
            for e in self.moves
            if e.get("step") == "round" and e.get("action") in ("accept", "offer")
        ]

    async def moved(self, got: Mapping[str, Reply]) -> None:
        turns = self.recorded_turns()
        if self.held is None:
            m = Mechanism.replay(self.issues, self.cast, turns, self.n_steps, self.p.get("asks"))
        else:
            m = self.held
            for t in turns:
                m.apply(t)
        self.mechanism = m
        h = self.run["waiting"][0]
        if m.ending() is not None or m.next_handle() != h:
            raise ValueError(f"the move log does not lead to @{h}'s turn")
        last = self.p.get("last_line", {})
        held = own_line(h, self.issues, last, self.p.get("asks", {}))
        reading = await read_reply(h, got.get(h), self.issues, m.standing(), held, self.model)
        m.apply(Turn(h, reading.action, reading.offer))
        if reading.action == "offer" and reading.offer is not None:
            self.p["last_line"] = {**last, h: reading.offer}
        self.note_confidence(h, reading.confidence)
        self.note_cause(reading)
        entry = {"step": "round", "round": m.steps, **reading.entry(), "standing": m.standing()}
        self.move.trace.append(entry)
        end = m.ending()
        if end is None:
            await self.ask_round(m, reading)
        else:
            self.close(end.outcome, end.reason, end.agreement, reading, m.steps)

    async def advance(
        self, replies: Sequence[Reply], moves: Sequence[Mapping[str, Any]], departure: str | None
    ) -> Move | None:
        """The negotiation's next move, or None while the member it waits for may still answer
        (``moves``: the move log after trace turn :attr:`after`; ``departure``: who left it, as
        the database says, which aborts it)."""
        self.moves = list(moves)
        run = self.run
        if departure:
            self.move.trace.append({"step": run["step"] or "opening", "aborted": departure})
            self.close("rejected", departure)
            return self.move
        if run["step"] is None or run["asked_position"] is None:
            self.ask_openings()
            return self.move
        waiting = list(run["waiting"])
        got = {r.handle: r for r in replies if r.handle in waiting}
        if not run["expired"] and any(h not in got for h in waiting):
            return None
        if run["step"] == "opening":
            await self.opened(got)
        elif run["step"] == "clarify":
            await self.clarified(got)
        else:
            await self.moved(got)
        return self.move

    def kept(self, committed: Move | None) -> None:
        """Give the replayer back the mechanism: as this move left it, at the trace turn the move
        committed (``committed``: the move engine_step took; a closed run keeps none), or as it
        was taken when there was no move (None). A move that failed calls neither."""
        if committed is None:
            if self.held is not None:
                self.replayer.keep(self.key, self.after, self.held)
        elif self.mechanism is not None and committed.close is None:
            self.replayer.keep(self.key, int(self.run["turn"]) + len(committed.trace), self.mechanism)


    def close(
        self,
        outcome: str,
        reason: str,
        agreement: Offer | None = None,
        reading: Reading | None = None,
        moves: int = 0,
    ) -> None:
        record = f"log/episodes/{self.short_id}"
        line: dict[str, Any] = {"event": "close", "protocol": NAME, "outcome": outcome, "moves": moves,
                                "reason": reason}
        payload: dict[str, Any] = {"within": self.flow["task"]}
        read = f"I read {reading.handle}'s reply as: {reading.said}.\n" if reading else ""
        quality = metrics.quality(
            self.cast, self.p.get("first_confidence", {}), self.p.get("last_confidence", {}),
            self.p.get("causes", {}),
        )
        measured: dict[str, Any] = dict(quality or {})
        if outcome == "converged" and agreement is not None:
            assignments = {**self.p.get("settled", {}), **agreement}
            sat = metrics.satisfaction(self.issues, self.p.get("asks", {}), agreement)
            if sat:
                measured.update(satisfaction=sat, min_satisfaction=min(sat.values()))
            text = (
                f"{read}✓ Agreed: {terms(assignments)} — after {moves} move(s); NEGMAS: {reason}. "
                f"Record: {record}."
            )
            payload["assignments"] = assignments
            line["assignments"] = assignments
            self.move.assignments = assignments
            self.team_prior(assignments, quality)
        else:
            outcome = "rejected"
            text = f"{read}✗ No agreement: {reason}. Record: {record}."
        payload["metrics"] = measured
        payload["aligner"] = line
        payload["metadata"] = {"aligner": line}
        self.move.posts.append(
            {
                "event": "close",
                "content": neutralise(text),
                "kind": "commit",
                "subkind": outcome,
                "payload_type": "consensus",
                "payload": payload,
            }
        )
        self.move.metrics = measured
        self.move.close = outcome
        self.move.reason = reason
        self.move.outcome_text = text
        self.move.step = self.move.step or self.run["step"] or "opening"
        self.move.waiting, self.move.wait_seconds, self.move.speakers = [], None, None

    def nothing_to_negotiate(self, why: str) -> None:
        """The end of a negotiation that never began: its explanation in the thread, no commit and
        no episode."""
        reason = f"nothing to negotiate: {why}"
        text = f"negotiate: nothing to negotiate ({why}); no negotiation was opened and nothing is recorded."
        line = {"event": "close", "protocol": NAME, "outcome": "none", "reason": reason}
        self.move.posts.append({"event": "close", "content": neutralise(text), "recipients": list(self.cast),
                                "payload": {"aligner": line, "metadata": {"aligner": line}}})
        self.move.close = "rejected"
        self.move.reason = reason
        self.move.outcome_text = text
        self.move.step = self.move.step or self.run["step"] or "opening"
        self.move.waiting, self.move.wait_seconds, self.move.speakers = [], None, None

    def team_prior(self, agreement: Offer, quality: Mapping[str, Any] | None) -> None:
        topic = self.p.get("topic") or "-".join(sorted(agreement))
        before = self.p.get("prior") or {}
        count = int(before.get("episode_count", 0)) + 1
        q = dict(quality or {})
        l9 = {
            "posterior": q.get("mpc"),
            "gar": q.get("gar"),
            "scr": q.get("scr"),
            "provenance_weight": q.get("provenance_weight"),
            "revision_cause": "converged_episode",
            "episode_id": self.short_id,
            "episode_count": count,
        }
        self.move.memory.append(
            {
                "key": PRIOR_PREFIX + topic,
                "text": f"The team agreed {terms(agreement)} on {topic} (episode {self.short_id}; "
                f"{count} converged negotiation(s) on this topic).",
                "meta": {"l9": l9, "topic": topic, "agreement": agreement, "within": self.flow["task"]},
            }
        )


def failed(flow: Mapping[str, Any], error: str) -> Move:
    """The move that closes a negotiation the aligner cannot go on with, said in the thread."""
    text = f"✗ negotiate: the aligner could not go on ({error}); the negotiation is closed as failed."
    line = {"event": "close", "protocol": NAME, "outcome": "failed", "reason": error}
    payload = {"within": flow.get("task"), "aligner": line, "metadata": {"aligner": line}}
    return Move(
        posts=[{"event": "close", "content": neutralise(text), "kind": "commit", "subkind": "rejected",
                "payload_type": "consensus", "payload": payload}],
        close="failed",
        reason=error,
        outcome_text=text,
    )
