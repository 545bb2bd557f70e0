"""Flows: what a conductor walks, as data (``Step``, ``Protocol``), checked before it runs.

A flow is a small graph of steps. A step addresses someone (a role, ``each`` member in turn, ``all``
at once, the ``workers`` not bound to a role, or the ``bottleneck`` — the least happy rater of the
last pick), waits for their replies, and follows the edge their stance takes; an end step closes the
run as ``resolved``, ``rejected`` or ``converged``. A room adds or overrides a flow with a
``protocols/<name>`` memory holding the flow as YAML; one that does not validate is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from mycelium.contracts import vocabulary

#: The step vocabulary (contracts/vocabulary.json's ``flow``, which the database's check of a
#: ``protocols/`` write, mycelium.flow_problems, reads too).
VOCABULARY: dict[str, Any] = vocabulary()["flow"]
GROUPS = tuple(VOCABULARY["groups"])
ENDS = tuple(VOCABULARY["ends"])
STANCE_KEYS = tuple(VOCABULARY["edges"]["ask"])
SELECT_KEYS = tuple(VOCABULARY["edges"]["select"])
#: what a tally reads, and the edges each way of tallying can take
TALLY_KEYS = {of: tuple(VOCABULARY["edges"][f"tally:{of}"]) for of in ("points", "terms")}
LOCK_KEYS = tuple(VOCABULARY["edges"]["lock"])
KINDS = tuple(VOCABULARY["kinds"])
#: steps that ask nobody: code decides where they lead
CODE_KINDS = tuple(k for k in KINDS if k != "ask")
COLLECTS = tuple(VOCABULARY["collect"])
REQUIRES = tuple(VOCABULARY["require"])
DEFAULT_MAX_ROUNDS = {"points": 3, "terms": 2}
DEFAULT_MAX_STEPS = 12
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
_ROLE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class FlowError(ValueError):
    """A flow that cannot run; the message says what is wrong, in one sentence per problem."""


@dataclass(frozen=True)
class Step:
    id: str
    to: str | None = None
    prompt: str = ""
    wait: str = "reply"
    rounds: int = 1
    next: str | Mapping[str, str] | None = None
    end: str | None = None
    kind: str = "ask"
    collect: str | None = None
    require: str | None = None
    max_repairs: int = 2
    of: str | None = None
    max_rounds: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.end:
            out["end"] = self.end
            return out
        if self.kind != "ask":
            out["kind"] = self.kind
        if self.to:
            out["to"] = self.to
        if self.prompt:
            out["prompt"] = self.prompt
        if self.wait != "reply":
            out["wait"] = self.wait
        if self.rounds != 1:
            out["rounds"] = self.rounds
        if self.collect:
            out["collect"] = self.collect
        if self.require:
            out["require"] = self.require
        if self.kind == "select":
            out["max_repairs"] = self.max_repairs
        if self.kind == "tally":
            out["of"] = self.of
            out["max_rounds"] = self.max_rounds
        out["next"] = dict(self.next) if isinstance(self.next, Mapping) else self.next
        return out


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str
    roles: tuple[str, ...]
    steps: tuple[Step, ...]
    max_steps: int = DEFAULT_MAX_STEPS
    by_id: Mapping[str, Step] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {s.id: s for s in self.steps})

    def step(self, step_id: str) -> Step:
        return self.by_id[step_id]

    @property
    def first(self) -> Step:
        return self.steps[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "roles": list(self.roles),
            "max_steps": self.max_steps,
            "steps": [s.as_dict() for s in self.steps],
        }

    def yaml(self) -> str:
        return yaml.safe_dump(self.as_dict(), sort_keys=False, allow_unicode=True)


def _edge_keys(kind: str, of: Any) -> tuple[str, ...]:
    if kind == "select":
        return SELECT_KEYS
    if kind == "tally":
        return TALLY_KEYS.get(of, ()) if isinstance(of, str) else ()
    if kind == "lock":
        return LOCK_KEYS
    return STANCE_KEYS


def _problems_of_step(raw: Mapping[str, Any], roles: tuple[str, ...], i: int) -> list[str]:
    where = f"step {i + 1} ({raw.get('id', '?')})"
    known = {
        "id",
        "to",
        "prompt",
        "wait",
        "rounds",
        "next",
        "end",
        "kind",
        "collect",
        "require",
        "max_repairs",
        "of",
        "max_rounds",
    }
    out = [f"{where}: unknown field {k!r}" for k in raw if k not in known]
    if not isinstance(raw.get("id"), str) or not _ROLE.match(raw.get("id") or ""):
        out.append(f"{where}: an id is a lowercase word")
    end = raw.get("end")
    if end is not None:
        if end not in ENDS:
            out.append(f"{where}: end is one of {', '.join(ENDS)}, not {end!r}")
        if raw.get("to") is not None or raw.get("next") is not None:
            out.append(f"{where}: an end step neither addresses anyone nor continues")
        return out
    kind = raw.get("kind", "ask")
    if kind not in KINDS:
        out.append(f"{where}: kind is one of {', '.join(KINDS)}, not {kind!r}")
    to = raw.get("to")
    if kind == "ask" and not (isinstance(to, str) and (to in roles or to in GROUPS)):
        out.append(
            f"{where}: to is a role ({', '.join(roles) or 'none declared'}) or one of "
            f"{', '.join(GROUPS)}, not {to!r}"
        )
    if kind in CODE_KINDS and any(raw.get(k) is not None for k in ("to", "prompt", "collect", "require")):
        out.append(f"{where}: a {kind} step asks nobody: it takes no to, prompt, collect or require")
    of = raw.get("of")
    if kind == "tally" and of not in TALLY_KEYS:
        out.append(f"{where}: a tally step reads of: points or of: terms")
    if kind != "tally" and (of is not None or raw.get("max_rounds") is not None):
        out.append(f"{where}: of and max_rounds belong to a tally step")
    max_rounds = raw.get("max_rounds")
    if max_rounds is not None and (
        not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 1
    ):
        out.append(f"{where}: max_rounds is a whole number, 1 or more")
    nxt = raw.get("next")
    allowed = _edge_keys(kind, of)
    if nxt is None:
        out.append(f"{where}: a step that does not end needs next")
    elif isinstance(nxt, Mapping):
        bad = [k for k in nxt if k not in allowed]
        if bad or not nxt:
            out.append(
                f"{where}: next branches on {', '.join(allowed)} only "
                f"(got {', '.join(map(str, bad)) or 'none'})"
            )
    elif kind in CODE_KINDS:
        out.append(f"{where}: a {kind} step branches on {', '.join(allowed) or 'its edges'}")
    elif not isinstance(nxt, str):
        out.append(f"{where}: next is a step id or a map of branches")
    if raw.get("wait", "reply") not in ("reply", "none"):
        out.append(f"{where}: wait is reply or none")
    rounds = raw.get("rounds", 1)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        out.append(f"{where}: rounds is a whole number, 1 or more")
    if raw.get("collect") not in (None, *COLLECTS):
        out.append(f"{where}: collect is one of {', '.join(COLLECTS)}")
    if raw.get("require") not in (None, *REQUIRES):
        out.append(f"{where}: require is one of {', '.join(REQUIRES)}")
    elif raw.get("require") in ("pieces", "tasks") and raw.get("collect") != raw.get("require"):
        out.append(f"{where}: a step that requires {raw['require']} collects them")
    if not isinstance(raw.get("prompt", ""), str):
        out.append(f"{where}: prompt is text")
    return out


def parse_protocol(raw: Any, name: str | None = None) -> Protocol:
    """The flow ``raw`` describes (a mapping, or YAML text), or :class:`FlowError` listing every problem."""
    if isinstance(raw, str):
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise FlowError(f"the flow is not readable YAML: {exc}") from None
    if not isinstance(raw, Mapping):
        raise FlowError("a flow is a mapping with name, roles and steps")
    problems: list[str] = []
    known = {"name", "description", "roles", "steps", "max_steps"}
    problems += [f"unknown field {k!r}" for k in raw if k not in known]
    flow_name = name or raw.get("name")
    if not isinstance(flow_name, str) or not _NAME.match(flow_name):
        problems.append(f"a flow's name is a lowercase word (got {flow_name!r})")
    roles_raw = raw.get("roles") or []
    if not isinstance(roles_raw, list) or not all(isinstance(r, str) for r in roles_raw):
        problems.append("roles is a list of names")
        roles_raw = []
    roles = tuple(roles_raw)
    if len(set(roles)) != len(roles):
        problems.append("roles are distinct")
    problems += [f"role {r!r} is not a lowercase word" for r in roles if not _ROLE.match(r)]
    problems += [f"role {r!r} is the name of a group" for r in roles if r in GROUPS]
    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        problems.append("a flow has at least one step")
        steps_raw = []
    max_steps = raw.get("max_steps", DEFAULT_MAX_STEPS)
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or not 1 <= max_steps <= 200:
        problems.append("max_steps is a whole number from 1 to 200")
    steps: list[Step] = []
    for i, s in enumerate(steps_raw):
        if not isinstance(s, Mapping):
            problems.append(f"step {i + 1} is a mapping")
            continue
        found = _problems_of_step(s, roles, i)
        problems += found
        if not found:
            nxt = s.get("next")
            steps.append(
                Step(
                    id=s["id"],
                    to=s.get("to"),
                    prompt=s.get("prompt", ""),
                    wait=s.get("wait", "reply"),
                    rounds=s.get("rounds", 1),
                    next=dict(nxt) if isinstance(nxt, Mapping) else nxt,
                    end=s.get("end"),
                    kind=s.get("kind", "ask"),
                    collect=s.get("collect"),
                    require=s.get("require"),
                    max_repairs=int(s.get("max_repairs", 2)),
                    of=s.get("of"),
                    max_rounds=(s.get("max_rounds") or DEFAULT_MAX_ROUNDS[s["of"]])
                    if s.get("kind") == "tally"
                    else None,
                )
            )
    ids = [s.get("id") for s in steps_raw if isinstance(s, Mapping)]
    problems += [f"step id {d!r} is used twice" for d in sorted({i for i in ids if ids.count(i) > 1})]
    if steps and len(steps) == len(steps_raw):
        targets = {
            t
            for s in steps
            for t in ((s.next.values() if isinstance(s.next, Mapping) else [s.next]) if s.next else [])
        }
        problems += [f"next names no step {t!r}" for t in sorted(targets - set(ids))]
        if not any(s.end for s in steps):
            problems.append("a flow has at least one end step")
        if steps[0].end:
            problems.append("the first step does something before the flow ends")
    if problems:
        raise FlowError("; ".join(problems))
    return Protocol(
        name=flow_name,
        description=str(raw.get("description") or ""),
        roles=roles,
        steps=tuple(steps),
        max_steps=max_steps,
    )


_BUILT_IN: dict[str, dict[str, Any]] = {
    "gated": {
        "description": "The proposer proposes; the guardian lets it pass or blocks it with an objection, "
        "which sends it back.",
        "roles": ["proposer", "guardian"],
        "max_steps": 6,
        "steps": [
            {"id": "propose", "to": "proposer", "prompt": "Propose how to do this: {ask}", "next": "check"},
            {
                "id": "check",
                "to": "guardian",
                "require": "stance",
                "prompt": "Does this pass? Accept it, or block it and say what must change.\n\n{reply}",
                "next": {"accept": "passed", "reject": "revise", "silent": "stalled"},
            },
            {
                "id": "revise",
                "to": "proposer",
                "prompt": "Blocked: {reply}\n\nRevise your proposal for: {ask}",
                "next": "check",
            },
            {"id": "passed", "end": "resolved"},
            {"id": "stalled", "end": "rejected"},
        ],
    },
    "review": {
        "description": "The author drafts; the reviewer approves or asks for changes, until approved.",
        "roles": ["author", "reviewer"],
        "max_steps": 6,
        "steps": [
            {"id": "draft", "to": "author", "prompt": "Draft this: {ask}", "next": "review"},
            {
                "id": "review",
                "to": "reviewer",
                "require": "stance",
                "prompt": "Review the draft. Approve it, or reject it with the changes you need.\n\n{reply}",
                "next": {"accept": "approved", "reject": "rework", "silent": "unreviewed"},
            },
            {
                "id": "rework",
                "to": "author",
                "prompt": "The reviewer asks for changes: {reply}\n\nRework: {ask}",
                "next": "review",
            },
            {"id": "approved", "end": "resolved"},
            {"id": "unreviewed", "end": "rejected"},
        ],
    },
    "fan-out": {
        "description": "Every worker takes a part at once; the lead combines their answers.",
        "roles": ["lead"],
        "max_steps": 6,
        "steps": [
            {"id": "work", "to": "workers", "prompt": "Take your part of: {ask}", "next": "combine"},
            {
                "id": "combine",
                "to": "lead",
                "prompt": "Combine the parts into one answer for: {ask}\n\n{replies}",
                "next": "done",
            },
            {"id": "done", "end": "resolved"},
        ],
    },
    "round-robin": {
        "description": "Everyone speaks in turn, two rounds.",
        "roles": [],
        "max_steps": 12,
        "steps": [
            {
                "id": "talk",
                "to": "each",
                "rounds": 2,
                "prompt": "Round {round} of {rounds}: {ask}\n\nSaid so far:\n{replies}",
                "next": "done",
            },
            {"id": "done", "end": "resolved"},
        ],
    },
    "concord": {
        "description": "Everyone suggests an option, everyone rates every option 0-100, the pick that "
        "leaves the least happy member happiest wins if everyone rates it 70 or more; "
        "otherwise the least happy proposes a fix.",
        "roles": [],
        "max_steps": 12,
        "steps": [
            {
                "id": "suggest",
                "to": "each",
                "collect": "options",
                "prompt": "{agreed}Suggest one option for: {ask}",
                "next": "rate",
            },
            {
                "id": "rate",
                "to": "all",
                "collect": "scores",
                "require": "scores",
                "prompt": "Rate every option from 0 to 100 in a marker, e.g. [[mycelium: A=80 B=40]].\n\n"
                "{options}",
                "next": "pick",
            },
            {
                "id": "pick",
                "kind": "select",
                "max_repairs": 2,
                "next": {"feasible": "agreed", "infeasible": "fix", "stuck": "no_deal"},
            },
            {
                "id": "fix",
                "to": "bottleneck",
                "collect": "options",
                "prompt": "{pick} falls short for you ({shortfall}). Propose one option you could live with "
                "for: {ask}\n\n{scores}",
                "next": "rerate",
            },
            {
                "id": "rerate",
                "to": "all",
                "collect": "scores",
                "require": "scores",
                "prompt": "Rate only the new option(s) {new_labels} from 0 to 100, e.g. "
                "[[mycelium: C=75]].\n\n"
                "{new_options}",
                "next": "pick",
            },
            {"id": "agreed", "end": "converged"},
            {"id": "no_deal", "end": "rejected"},
        ],
    },
    "swarm": {
        "description": "A team takes on a task: each member checks in on the row, then the lead splits "
        "it into child tasks, one per member.",
        "roles": ["lead"],
        "max_steps": 6,
        "steps": [
            {
                "id": "check-in",
                "to": "each",
                "prompt": "The team ({cast}) takes on {task} ({title}): {ask}\n\nCheck in on {task} in "
                "two or three sentences: the part you would take and what you need from someone else. "
                "Do not start the work yet.\n\nSaid so far:\n{replies}",
                "next": "split",
            },
            {
                "id": "split",
                "to": "lead",
                "collect": "tasks",
                "require": "tasks",
                "prompt": "Everyone has checked in on {task}: {ask}\n\n{replies}\n\nYou lead. Split {task} "
                "into child tasks that can be worked at the same time, one line each, naming who takes "
                "it:\n\n"
                "[[new: <title> -> @<member>]]\n\nThe conductor files them on the board as part of {task}.",
                "next": "done",
            },
            {"id": "done", "end": "resolved"},
        ],
    },
    "accord": {
        "description": "Get on the same page: everyone labels what the task is, the points are merged "
        "(equal or similar text folds), the words and checks are gathered, and the shared summary, "
        "with what is still open, is saved as context/summary/<task>.",
        "roles": [],
        "max_steps": 16,
        "steps": [
            {
                "id": "frame",
                "to": "all",
                "collect": "pieces",
                "require": "pieces",
                "prompt": "{agreed}Before we start on {title}: {ask}\n\nSay what you understand the task "
                "to be, one point a line, each starting with its label:\n\n"
                "[[mycelium: objective]] what it is for\n"
                "[[mycelium: constraint]] a limit the work respects\n"
                "[[mycelium: assumption]] what you take as given\n"
                "[[mycelium: sub_goal]] a part of the work\n"
                "[[mycelium: deliverable]] what is handed over\n"
                "[[mycelium: out_of_scope]] what the task does not include\n\n"
                "Five points at most; add about=<subject> to say what a point is about.",
                "next": "added",
            },
            {
                "id": "added",
                "kind": "tally",
                "of": "points",
                "max_rounds": 3,
                "next": {"grew": "more", "settled": "ground", "empty": "nothing"},
            },
            {
                "id": "more",
                "to": "all",
                "collect": "pieces",
                "prompt": "The points on {title} so far:\n\n{frame}\n\nIs something important missing? "
                "Add it on its own labelled line, two at most; otherwise say so in a few words, "
                "with no label.",
                "next": "added",
            },
            {
                "id": "ground",
                "to": "all",
                "collect": "pieces",
                "prompt": "The points on {title}:\n\n{frame}\n\nSay what you mean by any word you use in a "
                "specific sense, and how you would check the points:\n\n"
                "[[mycelium: term=<word>]] what you mean by it\n"
                "[[mycelium: check covers=p1,p2]] how you would confirm them\n\n"
                "Nothing to add: say so in a few words.",
                "next": "words",
            },
            {
                "id": "words",
                "kind": "tally",
                "of": "terms",
                "max_rounds": 2,
                "next": {"contested": "restate", "clear": "lock"},
            },
            {
                "id": "restate",
                "to": "contested",
                "collect": "pieces",
                "prompt": "Some words are used in different senses:\n\n{terms}\n\nSay again what you mean by "
                "each word you defined, with [[mycelium: term=<word>]]; keep your meaning if you need it.",
                "next": "words",
            },
            {"id": "lock", "kind": "lock", "next": {"locked": "locked", "empty": "nothing"}},
            {"id": "locked", "end": "resolved"},
            {"id": "nothing", "end": "rejected"},
        ],
    },
}

#: the built-ins in the order they are listed (upstream's)
BUILT_IN_ORDER = ("gated", "review", "fan-out", "round-robin", "swarm", "concord", "accord")
BUILT_IN: dict[str, Protocol] = {name: parse_protocol(_BUILT_IN[name], name) for name in BUILT_IN_ORDER}


def catalogue(room_flows: Mapping[str, Protocol]) -> dict[str, Protocol]:
    """The flows a room can run: the built-ins, overridden or extended by the room's own."""
    return {**BUILT_IN, **room_flows}
