"""The conductor's pure core: it has no model; it walks a flow inside a task's thread.

A summon reads ``<flow> @role1 @role2 …: <ask>`` (``list`` and ``show <flow>`` answer anywhere).
The named members are bound to the flow's roles in order. Each step addresses exactly the members
its target names, and the thread's floor is held for them alone; their replies (a stance marker
``[[mycelium: stance=accept]]``, ratings ``[[mycelium: A=80 B=40]]``) choose the edge; silence until
the step's timeout is silence, never consent. :func:`advance` is one move of a run: from what the
database says (the current step, whom it waits for, the conductor's state) and the replies it got,
what to record, post and hold next. It reads no clock and touches nothing, so any worker computes
the same move, and the database applies it once (``mycelium.engine_step``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mycelium.core import markers
from mycelium.core.mentions import TOKEN_PATTERN, loud_mentions
from mycelium.engines import accord, select
from mycelium.engines.flows import Protocol, Step, parse_protocol

CATALOGUE_WORDS = ("list", "protocols", "flows", "help")
SHOW_WORDS = ("show", "spec")
STEP_TIMEOUT_SECONDS = 120.0
_MENTION = re.compile(TOKEN_PATTERN)
_FIELD = re.compile(r"\{([a-z_]+)\}")
_AT = re.compile(r"(?:^|(?<=[\s(<]))@(?=~?[A-Za-z0-9])")  # a mention's @ (core.mentions), not an email's
#: a child task in a lead's reply: ``[[new: <title> -> @member]]`` or ``- [ ] <title> @member``
_NEW_TASK = re.compile(
    r"\[\[\s*new\s*:\s*(?P<t>[^\]\n]+?)\s*->\s*@?(?P<h>[A-Za-z0-9][A-Za-z0-9_-]*)\s*\]\]", re.I
)
_CHECKBOX = re.compile(r"^\s*[-*]\s*\[ \]\s*(?P<t>.+?)\s+@(?P<h>[A-Za-z0-9][A-Za-z0-9_-]*)\s*$", re.M)
MAX_CHILD_TASKS = 12
#: how much of a task's shared summary a run carries into its prompts
AGREED_CHARS = 2000


def tasks_of(text: str) -> list[dict[str, str]]:
    """The child tasks a lead's reply names (title and assignee), in order, each title once."""
    found = sorted(
        [(m.start(), m["t"].strip(), m["h"].lower()) for m in _NEW_TASK.finditer(text)]
        + [(m.start(), m["t"].strip(), m["h"].lower()) for m in _CHECKBOX.finditer(text)]
    )
    out: dict[str, dict[str, str]] = {}
    for _, title, handle in found:
        out.setdefault(accord.norm(title), {"title": title, "assignee": handle})
    return list(out.values())[:MAX_CHILD_TASKS]


def neutralise(text: str) -> str:
    """``text`` as an engine may post it: no ``@`` can summon or wake anyone, no marker speaks."""
    return markers.defang(_AT.sub("@\u200b", text))


# ── the summon ──────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Directive:
    word: str
    members: tuple[str, ...]
    ask: str
    arg: str = ""


def split_directive(text: str, engine: str) -> Directive:
    """The flow (first word that is not a mention), the members named (in order, the engine
    itself left out) and the ask (the rest, mentions removed, leading ``:,;—–-`` stripped)."""
    members = tuple(h for h in loud_mentions(text) if h != engine)
    bare = _MENTION.sub(" ", text).strip()
    word, _, rest = bare.partition(" ")
    if not word and rest:
        word, _, rest = rest.strip().partition(" ")
    word = word.strip().rstrip(":,;").lower()
    ask = re.sub(r"\s+", " ", rest).strip().lstrip(":,;—–- ").strip()
    arg = ask.split(" ", 1)[0].lower() if word in SHOW_WORDS and ask else ""
    return Directive(word, members, ask, arg)


class CannotRun(ValueError):
    """A summon that cannot start a run; the message is the answer posted where it was asked."""


def bind_roles(protocol: Protocol, members: Sequence[str]) -> dict[str, str]:
    roles = protocol.roles
    if len(members) < len(roles):
        raise CannotRun(
            f"{protocol.name} binds {len(roles)} role(s) ({', '.join(roles)}) in order from the "
            f"members named; {len(members)} were named."
        )
    return dict(zip(roles, members, strict=False))


def catalogue_text(flows: Mapping[str, Protocol], room_names: Sequence[str]) -> str:
    lines = ["Flows (summon as `<flow> @member …: <ask>` in a task's thread):"]
    for name, p in flows.items():
        mark = " (this room's)" if name in room_names else ""
        lines.append(f"- {name}{mark}: {p.description}")
    return "\n".join(lines)


def show_text(protocol: Protocol) -> str:
    spec = json.dumps(protocol.as_dict(), indent=2, ensure_ascii=False)
    return (
        f"Save this as protocols/{protocol.name} to change it for this room (JSON, which YAML reads "
        f"too):\n\n```json\n{spec}\n```"
    )


def unknown_text(word: str, flows: Mapping[str, Protocol], builtin: Sequence[str]) -> str:
    extra = [n for n in flows if n not in builtin]
    here = f" This room's: {', '.join(extra)}." if extra else ""
    return f"No flow {word!r}. Built in: {', '.join(builtin)}.{here} Ask `list` or `show <flow>`."


def new_flow(
    protocol: Protocol,
    members: Sequence[str],
    ask: str,
    task: str,
    title: str,
    step_timeout: float = STEP_TIMEOUT_SECONDS,
    agreed: str = "",
) -> dict[str, Any]:
    """What a run keeps of its flow (engine_runs.flow): the graph, the roles bound, the cast, and
    what the team already agreed for the task (its shared summary's text, if any: ``{agreed}``)."""
    bound = bind_roles(protocol, members)
    return {
        "protocol": protocol.as_dict(),
        "bound": bound,
        "cast": list(members),
        "ask": ask,
        "task": task,
        "title": title,
        "step_timeout": step_timeout,
        "agreed": agreed[:AGREED_CHARS],
    }


def open_post(flow: Mapping[str, Any]) -> dict[str, Any]:
    p = flow["protocol"]
    graph = " → ".join(s["id"] for s in p["steps"])
    roles = ", ".join(f"{r} @{h}" for r, h in flow["bound"].items()) or "none (everyone takes part)"
    text = (
        f"{p['name']}: {p['description']}\nRoles: {roles}\nMembers: "
        f"{', '.join('@' + h for h in flow['cast'])}\nSteps: {graph}\nAsk: {flow['ask']}"
    )
    line = {
        "event": "open",
        "protocol": p["name"],
        "description": p["description"],
        "roles": flow["bound"],
        "members": flow["cast"],
        "steps": [s["id"] for s in p["steps"]],
    }
    return {"content": neutralise(text), "payload": {"conductor": line, "metadata": {"conductor": line}}}


# ── one move ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Reply:
    handle: str
    text: str
    payload: Mapping[str, Any]
    id: str
    position: int

    @property
    def failed(self) -> bool:
        """A member whose model failed said nothing (its post reports the failure)."""
        return bool(self.payload.get("model_failed"))


@dataclass(frozen=True)
class RunState:
    step: str | None
    turn: int
    waiting: tuple[str, ...]
    asked: bool
    pending: Mapping[str, Any]


@dataclass
class Move:
    """What one move records, posts and holds (the parameters of ``engine_step``)."""

    trace: list[dict[str, Any]] = field(default_factory=list)
    posts: list[dict[str, Any]] = field(default_factory=list)
    step: str | None = None
    waiting: list[str] = field(default_factory=list)
    wait_seconds: float | None = None
    pending: dict[str, Any] = field(default_factory=dict)
    speakers: list[str] | None = None
    close: str | None = None
    reason: str | None = None
    outcome_text: str | None = None
    metrics: dict[str, Any] | None = None
    memory: list[dict[str, Any]] = field(default_factory=list)
    assignments: dict[str, str] | None = None
    """The agreement a converged close carries (a negotiation's); None otherwise."""


def _stance(step: Step, a: Mapping[str, Any]) -> str:
    if a["silent"]:
        return "silent"
    s = a.get("stance")
    if s in markers.STANCES:
        return str(s)
    return "reject" if step.require == "stance" else "none"


def step_stance(stances: Sequence[str]) -> str | None:
    """All silent → silent; any reject → reject; all accept → accept; otherwise none."""
    if stances and all(s == "silent" for s in stances):
        return "silent"
    if "reject" in stances:
        return "reject"
    if stances and all(s == "accept" for s in stances):
        return "accept"
    return None


def choose_edge(step: Step, stance: str | None) -> str:
    """A plain next is it; a map: the stance's branch, else default, else reject, else the first."""
    nxt = step.next
    if isinstance(nxt, str):
        return nxt
    assert isinstance(nxt, Mapping) and nxt
    for key in (stance, "default", "reject"):
        if key and key in nxt:
            return nxt[key]
    return next(iter(nxt.values()))


_VERBS = {"accept": "accepted", "reject": "blocked", "silent": "stayed silent", None: "answered"}


class Conductor:
    """One move of one run (see :func:`advance`)."""

    def __init__(
        self, flow: Mapping[str, Any], state: RunState, short_id: str, vectors: accord.Vectors | None = None
    ) -> None:
        self.flow = flow
        self.vectors = vectors
        self.protocol = parse_protocol(flow["protocol"])
        self.state = state
        self.short_id = short_id
        self.move = Move(pending=dict(state.pending))
        self.cast: list[str] = list(flow["cast"])
        self.bound: dict[str, str] = dict(flow["bound"])

    @property
    def p(self) -> dict[str, Any]:
        return self.move.pending

    @property
    def turns(self) -> int:
        return self.state.turn + len(self.move.trace)

    # -- targets and prompts ------------------------------------------------------------------

    def targets(self, step: Step) -> list[str]:
        to = step.to or ""
        if to in self.bound:
            return [self.bound[to]]
        if to == "each":
            return [self.cast[self.p.get("index", 0)]] if self.cast else []
        if to == "all":
            return list(self.cast)
        if to == "workers":
            return [h for h in self.cast if h not in self.bound.values()]
        if to == "bottleneck":
            least = self.p.get("least_happy")
            return [least] if least else []
        if to == "contested":
            return list(self.p.get("contested", []))
        return []

    def fields(self, step: Step) -> dict[str, str]:
        replies = self.p.get("replies", [])
        options = [
            select.Option(o["label"], o["text"], tuple(o["authors"])) for o in self.p.get("options", [])
        ]
        new = set(self.p.get("new_labels", []))
        chosen = self.p.get("pick")
        by_label = {o.label: o for o in options}
        least = self.p.get("least_happy")
        rating = self.p.get("ratings", {}).get(least, {}).get(chosen) if least and chosen else None
        return {
            "ask": self.flow["ask"],
            "cast": ", ".join(self.cast),
            "agreed": f"What the team already agreed for this task (from "
            f"{accord.summary_key(self.flow['task'])}):\n\n{self.flow['agreed']}\n\n"
            if self.flow.get("agreed")
            else "",
            "frame": accord.frame_text(self.p, self.cast),
            "terms": accord.terms_text(self.p, self.vectors, self.cast),
            "task": self.flow["task"],
            "title": self.flow["title"],
            "handles": ", ".join(self.targets(step)),
            "round": str(self.p.get("round", 1)),
            "rounds": str(step.rounds),
            "reply": "\n\n".join(r["text"] for r in replies if not r["silent"]),
            "replies": "\n".join(
                f"{r['handle']}: {r['text'] if not r['silent'] else '(silent)'}"
                for r in self.p.get("said", replies)
            ),
            "options": "\n".join(f"{o.label}: {o.text}" for o in options),
            "new_options": "\n".join(f"{o.label}: {o.text}" for o in options if o.label in new),
            "option_labels": ", ".join(o.label for o in options),
            "new_labels": ", ".join(sorted(new)),
            "scores": select.scorecard(options, self.cast, self.p.get("ratings", {}), chosen)
            if options
            else "",
            "pick": f"{chosen}: {by_label[chosen].text}" if chosen in by_label else "",
            "threshold": str(select.BAR),
            "shortfall": f"you rated it {rating}, the bar is {select.BAR}"
            if rating is not None
            else f"the bar is {select.BAR}",
        }

    def fill(self, step: Step, prompt: str) -> str:
        values = self.fields(step)
        return _FIELD.sub(lambda m: values.get(m.group(1), ""), prompt)

    # -- posting --------------------------------------------------------------------------------

    def ask(self, step: Step, targets: list[str], prompt: str | None = None) -> None:
        turn = self.turns + 1
        cap = self.protocol.max_steps
        head = f"{self.protocol.name} · {step.id} · turn {turn} of {cap} · {', '.join(targets)}"
        line: dict[str, Any] = {
            "event": "turn",
            "protocol": self.protocol.name,
            "step": step.id,
            "to": targets,
            "turn": turn,
            "cap": cap,
        }
        if step.rounds > 1:
            line.update(round=self.p.get("round", 1), rounds=step.rounds)
        if prompt is not None:
            line["tell"] = "reask"
        body = neutralise(prompt if prompt is not None else self.fill(step, step.prompt))
        self.move.posts.append(
            {
                "event": "turn",
                "content": f"{head}\n\n{body}",
                "recipients": targets,
                "payload": {"conductor": line, "metadata": {"conductor": line}},
            }
        )
        self.move.step = step.id
        self.move.speakers = targets
        if step.wait == "reply":
            self.move.waiting = targets
            self.move.wait_seconds = float(self.flow.get("step_timeout", STEP_TIMEOUT_SECONDS))
        else:
            self.move.waiting, self.move.wait_seconds = [], None

    def edge_post(self, step: Step, who: list[str], stance: str | None, nxt: str) -> None:
        line = {"event": "edge", "step": step.id, "who": who, "stance": stance, "next": nxt}
        text = f"{self.protocol.name}: {', '.join(who)} {_VERBS.get(stance, 'answered')}, on to {nxt}"
        self.move.posts.append(
            {
                "event": "edge",
                "content": neutralise(text),
                "payload": {"conductor": line, "metadata": {"conductor": line}},
            }
        )

    # -- moving ---------------------------------------------------------------------------------

    def enter(self, step_id: str) -> None:
        for _ in range(64):  # select and wait-none steps move on without asking; a bound, not a limit
            step = self.protocol.step(step_id)
            if step.end:
                self.close(step.end, None, step.id)
                return
            if step.kind == "select":
                step_id = self.select(step)
                continue
            if step.kind == "tally":
                step_id = self.tally(step)
                continue
            if step.kind == "lock":
                step_id = self.lock(step)
                continue
            if self.turns >= self.protocol.max_steps:
                self.close("rejected", f"step cap of {self.protocol.max_steps} reached before {step.id}")
                return
            if step.collect == "scores" and self.p.get("rated") and not self.p.get("new_labels"):
                nxt = choose_edge(step, None)  # a fix that brought no new option: nothing to rate
                self.move.trace.append({"step": step.id, "skipped": "no new option", "next": nxt})
                step_id = nxt
                continue
            if step.to == "each" and "index" not in self.p:
                self.p.update(index=0, round=1, said=[])
            targets = self.targets(step)
            if not targets:
                self.close("rejected", f"nobody to ask at step {step.id}")
                return
            self.ask(step, targets)
            if step.wait == "reply":
                return
            nxt = choose_edge(step, None)
            self.move.trace.append(
                {"step": step.id, "to": targets, "stances": {}, "stance": None, "next": nxt}
            )
            step_id = nxt
        self.close("rejected", "the flow went round without asking anyone")

    def select(self, step: Step) -> str:
        labels = [o["label"] for o in self.p.get("options", [])]
        repairs = int(self.p.get("repairs", 0))
        got = select.pick(labels, self.cast, self.p.get("ratings", {}), select.BAR, repairs, step.max_repairs)
        key = got.outcome
        assert isinstance(step.next, Mapping)
        nxt = step.next.get(key) or choose_edge(step, None)
        self.p.update(pick=got.pick, least_happy=got.least_happy, select=got.as_dict())
        if key == "infeasible":
            self.p["repairs"] = repairs + 1
        self.move.trace.append({"step": step.id, "select": got.as_dict(), "next": nxt})
        line = {"event": "select", **got.as_dict(), "repairs": repairs}
        options = [
            select.Option(o["label"], o["text"], tuple(o["authors"])) for o in self.p.get("options", [])
        ]
        card = select.scorecard(options, self.cast, self.p.get("ratings", {}), got.pick)
        self.move.posts.append(
            {
                "event": "select",
                "content": neutralise(f"{self.protocol.name} · pick\n\n{card}"),
                "payload": {"conductor": line, "metadata": {"conductor": line}},
            }
        )
        return nxt

    def code_post(self, step: Step, line: dict[str, Any], text: str) -> None:
        self.move.posts.append(
            {
                "event": line["event"],
                "content": neutralise(f"{self.protocol.name} · {step.id}: {text}"),
                "payload": {"conductor": line, "metadata": {"conductor": line}},
            }
        )

    def tally(self, step: Step) -> str:
        of, cap = step.of or "points", step.max_rounds or 1
        if of == "points":
            key = accord.tally_points(self.p, step.id, cap)
            said = {
                "empty": "nobody has labelled a point",
                "grew": f"the last round added {self.p.get('grew', 0)} point(s)",
                "settled": "the last round added nothing" if not self.p.get("grew") else "the rounds ran out",
            }[key]
        else:
            key = accord.tally_terms(self.p, step.id, cap, self.vectors, self.cast)
            said = (
                f"a word is used in different senses by {', '.join(self.p['contested'])}"
                if key == "contested"
                else "no word is used in different senses"
                if not accord.terms_text(self.p, self.vectors, self.cast)
                else "words still used in different senses are left open"
            )
        assert isinstance(step.next, Mapping)
        nxt = step.next.get(key) or choose_edge(step, None)
        got = {
            "of": of,
            "outcome": key,
            "round": self.p["tallies"][step.id],
            "points": len(self.p.get("points", [])),
        }
        self.move.trace.append({"step": step.id, "tally": got, "next": nxt})
        self.code_post(
            step, {"event": "tally", "step": step.id, "tally": got, "next": nxt}, f"{said}, on to {nxt}"
        )
        return nxt

    def lock(self, step: Step) -> str:
        summary = accord.lock(self.p, self.cast, self.flow["title"], self.flow["task"], self.vectors)
        key = "locked" if summary else "empty"
        assert isinstance(step.next, Mapping)
        nxt = step.next.get(key) or choose_edge(step, None)
        got: dict[str, Any] = {"outcome": key}
        if summary:
            got.update(memory=summary["key"], points=len(summary["contract"]["points"]))
            self.p["summary"] = {"key": summary["key"], "contract": summary["contract"]}
            self.move.memory.append(
                {
                    "key": summary["key"],
                    "text": summary["text"],
                    "meta": {
                        "relates-to": self.flow["task"],
                        "episode_run": self.short_id,
                        "contract": summary["contract"],
                    },
                }
            )
        self.move.trace.append({"step": step.id, "lock": got, "next": nxt})
        said = f"the shared summary is {summary['key']}" if summary else "nothing to lock"
        self.code_post(
            step, {"event": "lock", "step": step.id, "lock": got, "next": nxt}, f"{said}, on to {nxt}"
        )
        return nxt

    def answered(self, step: Step, got: Mapping[str, Reply]) -> None:
        answers = [self._answer(h, got.get(h)) for h in self.state.waiting]
        held = {a["handle"]: a for a in self.p.get("held", [])}
        held.update({a["handle"]: a for a in answers})
        entry: dict[str, Any] = {
            "step": step.id,
            "to": list(self.state.waiting),
            "stances": {a["handle"]: "silent" if a["silent"] else (a["stance"] or "none") for a in answers},
            "replies": [a["id"] for a in answers if a["id"]],
        }
        failed = [a["handle"] for a in answers if a["failed"]]
        if failed:
            entry["failed"] = failed
        # require: ask once more whoever answered without what the step needs
        if step.require and not self.p.get("reasked"):
            need = [a["handle"] for a in answers if not a["silent"] and self._lacks(step, a)]
            if need:
                entry.update(stance=None, next=step.id, reask=need)
                self.move.trace.append(entry)
                self.p.update(reasked=True, held=list(held.values()))
                what = {
                    "stance": "a stance: [[mycelium: stance=accept]] or [[mycelium: stance=reject]]",
                    "scores": "a rating of every option, e.g. [[mycelium: A=80 B=40]]",
                    "pieces": "a label on each point (I couldn't find a label in your reply), e.g. "
                    "[[mycelium: objective]] what it is for",
                    "tasks": "one line per child task, e.g. [[new: <title> -> @<member>]]",
                }[step.require]
                self.ask(step, need, f"Please answer again with {what}.\n\n{self.fill(step, step.prompt)}")
                return
        self.p.pop("reasked", None)
        self.p.pop("held", None)
        current = list(held.values())
        if step.to == "each":
            said = [*self.p.get("said", []), *current]
            index, rnd = int(self.p.get("index", 0)) + 1, int(self.p.get("round", 1))
            if index >= len(self.cast):
                index, rnd = 0, rnd + 1
            if rnd <= step.rounds:
                entry.update(stance=None, next=step.id)
                self.move.trace.append(entry)
                self.p.pop("acc", None)  # (a copy of said that runs started before 2026-12-04 carry)
                self.p.update(index=index, round=rnd, said=said)
                self.ask(step, self.targets(step))
                return
            everyone = said  # every round's answers: said starts empty when the step is entered
            for k in ("index", "round", "acc"):
                self.p.pop(k, None)
            self.p["said"] = said
        else:
            everyone = current
            self.p.pop("said", None)
        self.collect(step, everyone)
        stance = step_stance([_stance(step, a) for a in everyone])
        nxt = choose_edge(step, stance)
        entry.update(stance=stance, next=nxt)
        self.move.trace.append(entry)
        self.p["replies"] = everyone
        if isinstance(step.next, Mapping):
            self.edge_post(step, [a["handle"] for a in everyone], stance, nxt)
        self.enter(nxt)

    @staticmethod
    def _answer(handle: str, r: Reply | None) -> dict[str, Any]:
        if r is None or r.failed:
            return {
                "handle": handle,
                "silent": True,
                "failed": r is not None,
                "text": "",
                "id": r.id if r else None,
                "stance": None,
                "scores": {},
                "confidence": None,
                "pieces": [],
            }
        return {
            "handle": handle,
            "silent": False,
            "failed": False,
            "text": markers.strip(r.text),
            "id": r.id,
            "stance": markers.stance_of(r.payload, r.text),
            "scores": markers.scores_of(r.payload, r.text),
            "confidence": markers.confidence_of(r.payload, r.text),
            "pieces": accord.pieces(r.payload, r.text),
        }

    def _score_labels(self) -> set[str]:
        """The labels a rating step asks for: every option the first time, the new ones after."""
        if self.p.get("rated"):
            return set(self.p.get("new_labels", []))
        return {o["label"] for o in self.p.get("options", [])}

    def _lacks(self, step: Step, a: Mapping[str, Any]) -> bool:
        if step.require == "stance":
            return a["stance"] is None
        if step.require == "pieces":
            return not a["pieces"]
        if step.require == "tasks":
            return not tasks_of(a["text"])
        return not self._score_labels() <= set(a["scores"])

    def collect(self, step: Step, answers: Sequence[Mapping[str, Any]]) -> None:
        if step.collect == "options":
            options = [
                select.Option(o["label"], o["text"], tuple(o["authors"])) for o in self.p.get("options", [])
            ]
            options, new = select.add_options(
                options, [(a["handle"], a["text"]) for a in answers if not a["silent"]]
            )
            self.p["options"] = [o.as_dict() for o in options]
            self.p["new_labels"] = new
        elif step.collect == "scores":
            only = self._score_labels()
            ratings = {h: dict(v) for h, v in self.p.get("ratings", {}).items()}
            for a in answers:
                if a["silent"]:
                    continue
                mine = ratings.setdefault(a["handle"], {})
                mine.update({k: v for k, v in a["scores"].items() if k in only})
            self.p["ratings"] = ratings
            self.p["rated"] = True
        elif step.collect == "pieces":
            spoke = [a for a in answers if not a["silent"]]
            accord.merge(
                self.p,
                [(a["handle"], a["pieces"], a["text"]) for a in spoke],
                self.vectors,
                keep_unlabelled=step.require == "pieces",
            )
            self.p["answered"] = [
                h for h in self.cast if h in {*self.p.get("answered", []), *(a["handle"] for a in spoke)}
            ]
        elif step.collect == "tasks":
            filed = list(self.p.get("filed", []))
            for a in answers:
                for t in [] if a["silent"] else tasks_of(a["text"]):
                    if len(filed) >= MAX_CHILD_TASKS or any(
                        accord.norm(f["title"]) == accord.norm(t["title"]) for f in filed
                    ):
                        continue
                    filed.append({**t, "by": a["handle"]})
                    self.move.memory.append({"task": {**t, "parent": self.flow["task"]}})
            self.p["filed"] = filed
        conf = {a["handle"]: a["confidence"] for a in answers if a.get("confidence") is not None}
        if conf:
            first = dict(self.p.get("first_confidence", {}))
            for h, c in conf.items():
                first.setdefault(h, c)
            self.p["first_confidence"] = first
            self.p["last_confidence"] = {**self.p.get("last_confidence", {}), **conf}

    def _frame_line(self, outcome: str | None) -> str:
        """What the commit adds of the run's frame (accord) or its split (swarm)."""
        if "points" in self.p or "answered" in self.p:
            said = accord.outcome_line(self.p.get("summary") if outcome else None, self.p, self.cast)
            return f" {said}" if said else ""
        if self.p.get("filed"):
            tasks = "; ".join(f"{t['title']} → @{t['assignee']}" for t in self.p["filed"])
            return f" Split into {len(self.p['filed'])} child task(s) of {self.flow['task']}: {tasks}."
        return ""

    def close(self, outcome: str, reason: str | None, end_step: str | None = None) -> None:
        name = self.protocol.name
        steps = self.turns
        record = f"log/episodes/{self.short_id}"
        line: dict[str, Any] = {
            "event": "close",
            "protocol": name,
            "outcome": outcome,
            "steps": steps,
            "reason": reason,
        }
        payload: dict[str, Any] = {"within": self.flow["task"]}
        chosen = self.p.get("pick")
        option = next((o for o in self.p.get("options", []) if o["label"] == chosen), None)
        if outcome == "converged" and option:
            text = f"✓ Everyone's on board: going with {chosen}: {option['text']}"
            lows = [
                self.p["ratings"][h][chosen]
                for h in self.cast
                if chosen in self.p.get("ratings", {}).get(h, {})
            ]
            metrics = {"min_satisfaction": round(min(lows) / 100, 4)} if lows else {}
            payload.update(
                assignments={"decision": option["text"]}, select=self.p.get("select"), metrics=metrics
            )
            line.update(pick=chosen, text=option["text"])
            self.move.metrics = metrics
            decision_key = "context/decision/" + re.sub(r"^work/", "", self.flow["task"])
            self.move.memory.append(
                {
                    "key": decision_key,
                    "text": option["text"],
                    "meta": {"episode_run": self.short_id, "relates-to": self.flow["task"]},
                }
            )
        elif name == "concord" and outcome == "rejected" and option:
            text = f"✗ Couldn't get everyone there. Best was {chosen}: {option['text']}"
            line.update(pick=chosen, text=option["text"])
        elif outcome == "rejected":
            why = f": {reason}" if reason else f": reached `{end_step}`" if end_step else ""
            text = f"✗ {name}: rejected after {steps} step(s){why}.{self._frame_line(None)} Record: {record}."
        else:
            text = f"✓ {name}: {outcome} after {steps} step(s).{self._frame_line(outcome)} Record: {record}."
        summary = self.p.get("summary")
        if summary:
            payload["memory"] = summary["key"]
            line["memory"] = summary["key"]
        if self.p.get("filed"):
            payload["filed"] = self.p["filed"]
        payload["conductor"] = line
        payload["metadata"] = {"conductor": line}
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
        self.move.close = outcome
        self.move.reason = reason
        self.move.outcome_text = text
        self.move.step = self.move.step or self.state.step
        self.move.waiting, self.move.wait_seconds, self.move.speakers = [], None, None


def advance(
    flow: Mapping[str, Any],
    state: RunState,
    replies: Sequence[Reply],
    expired: bool,
    short_id: str,
    vectors: accord.Vectors | None = None,
) -> Move | None:
    """The run's next move, or None while the members it waits for may still answer. ``vectors``:
    the embeddings of the texts a merge may compare (:func:`accord.texts_for`), None without a model."""
    c = Conductor(flow, state, short_id, vectors)
    if state.step is None or not state.asked:
        c.enter(state.step or c.protocol.first.id)
        return c.move
    got = {r.handle: r for r in replies if r.handle in state.waiting}
    if not expired and any(h not in got for h in state.waiting):
        return None
    c.answered(c.protocol.step(state.step), got)
    return c.move


def failed(flow: Mapping[str, Any], error: str) -> Move:
    """The move that closes a run the conductor cannot walk: ``failed``, with the error said in the
    thread (a rejected commit), never a step made up."""
    name = str(flow.get("protocol", {}).get("name", "flow"))
    text = f"✗ {name}: the conductor could not go on ({error}); the run is closed as failed."
    line = {"event": "close", "protocol": name, "outcome": "failed", "reason": error}
    payload = {"within": flow.get("task"), "conductor": line, "metadata": {"conductor": line}}
    return Move(
        posts=[
            {
                "event": "close",
                "content": neutralise(text),
                "kind": "commit",
                "subkind": "rejected",
                "payload_type": "consensus",
                "payload": payload,
            }
        ],
        close="failed",
        reason=error,
        outcome_text=text,
    )
