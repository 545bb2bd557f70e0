"""An engine's run as the flow panel shows it, shaped from a ``web_runs`` row: pure functions, no I/O.

Any kind of run reads the same way: its flow (the graph of a conductor's steps with their edges and
the members bound to them, when the flow has steps; otherwise the flow's own fields), where it is
and whom the floor admits, its trace entry by entry, and once closed its outcome, the quality
metrics and the agreement it carries. A trace entry shows the fields a conductor writes in words
(who was asked, their stances, the edge, the pick) and any other field as it is, so a kind this
module has never heard of still reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mycelium.core.envelope import short_id as thread_short_id
from mycelium.web.views import Floor

#: The quality metrics and what a run recorded, in reading order, with their names in words.
METRICS: tuple[tuple[str, str], ...] = (
    ("mpc", "MPC (mean final confidence)"),
    ("gar", "GAR (genuine agreement rate)"),
    ("scr", "SCR (social compliance rate)"),
    ("provenance_weight", "provenance weight"),
    ("min_satisfaction", "satisfaction (least happy member)"),
    ("participants", "members who stated a confidence"),
)
#: A step's target that is not a role, in words.
GROUPS = {"each": "each member in turn", "all": "every member at once",
          "workers": "the members bound to no role", "bottleneck": "the least happy rater of the last pick"}
#: Trace fields shown in words (the rest are shown as they are); ``turn`` and ``step`` head the entry.
WORDED = ("to", "stances", "stance", "next", "pick", "select")
#: A flow's fields the panel shows in their own places (the rest of a flow without steps as they are).
SHOWN_APART = ("protocol", "bound", "cast", "ask")
HIDDEN = ("turn", "step")


@dataclass
class Edge:
    label: str  # the stance (or outcome) that takes it; "" for a step's one way on
    target: str
    taken: bool = False


@dataclass
class Step:
    id: str
    target: str  # whom it asks, in words ("" for an end)
    members: list[str]
    edges: list[Edge]
    end: str | None = None
    kind: str = "ask"
    current: bool = False
    visited: bool = False


@dataclass
class Entry:
    turn: int | None
    step: str
    lines: list[tuple[str, str]]  # (what, text)


@dataclass
class Run:
    short_id: str
    kind: str
    engine: str
    flow_name: str
    description: str
    ask: str
    cast: list[str]
    bound: dict[str, str]
    steps: list[Step]
    flow_fields: list[tuple[str, str]]  # a flow without steps: its fields as they are
    state: str  # open, resolved, rejected, converged, failed
    outcome: str
    current_step: str | None
    turn: int
    waiting: list[str]
    deadline: datetime | None
    floor: Floor | None
    trace: list[Entry]
    metrics: list[tuple[str, str]]
    assignments: list[tuple[str, str]]
    reason: str | None
    outcome_text: str | None
    created_at: datetime
    closed_at: datetime | None
    updated_at: datetime
    thread: str
    row_key: str | None
    row_title: str | None
    posts: int

    @property
    def open(self) -> bool:
        return self.state == "open"


def compact(value: Any) -> str:
    """A value of a trace or a flow in one line: text as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def mentions(handles: Iterable[Any]) -> str:
    return ", ".join(f"@{h}" for h in handles)


def _target(to: str | None, bound: Mapping[str, str], cast: list[str]) -> tuple[str, list[str]]:
    """Whom a step asks, in words, and the members that means."""
    if not to:
        return "", []
    if to in bound:
        return f"{to} (@{bound[to]})", [bound[to]]
    if to == "workers":
        return GROUPS[to], [h for h in cast if h not in bound.values()]
    if to in ("each", "all"):
        return GROUPS[to], list(cast)
    return GROUPS.get(to, to), []


def _edges(nxt: Any, taken: set[tuple[str, str]], step: str) -> list[Edge]:
    if isinstance(nxt, Mapping):
        pairs = [(str(k), str(v)) for k, v in nxt.items()]
    elif nxt:
        pairs = [("", str(nxt))]
    else:
        pairs = []
    return [Edge(label, target, (step, target) in taken) for label, target in pairs]


def steps_of(flow: Mapping[str, Any], trace: list[Mapping[str, Any]], current: str | None) -> list[Step]:
    """The flow's graph: each step with whom it asks and its edges, the edges the trace took, the
    steps it went through and the current one; an end the run reached counts as visited."""
    protocol = flow.get("protocol") or {}
    raw = protocol.get("steps") if isinstance(protocol, Mapping) else None
    if not isinstance(raw, list):
        return []
    bound = dict(flow.get("bound") or {})
    cast = list(flow.get("cast") or [])
    taken = {(str(e.get("step")), str(e.get("next"))) for e in trace if e.get("step") and e.get("next")}
    visited = {str(e.get("step")) for e in trace if e.get("step")} | {target for _, target in taken}
    out = []
    for s in raw:
        if not isinstance(s, Mapping) or "id" not in s:
            continue
        sid = str(s["id"])
        words, members = _target(s.get("to"), bound, cast)
        out.append(Step(sid, words, members, _edges(s.get("next"), taken, sid), end=s.get("end"),
                        kind=str(s.get("kind") or "ask"), current=sid == current, visited=sid in visited))
    return out


def entry_of(e: Mapping[str, Any]) -> Entry:
    """One trace entry: the conductor's fields in words, any other field as it is."""
    lines: list[tuple[str, str]] = []
    if e.get("to"):
        to = e["to"]
        lines.append(("asked", mentions(to) if isinstance(to, list) else compact(to)))
    stances = e.get("stances")
    if isinstance(stances, Mapping) and stances:
        lines.append(("stances", ", ".join(f"@{h}: {s}" for h, s in stances.items())))
    if e.get("stance"):
        lines.append(("stance", compact(e["stance"])))
    if e.get("next"):
        lines.append(("edge", f"→ {compact(e['next'])}"))
    select = e.get("select")
    if isinstance(select, Mapping):
        pick = select.get("pick")
        happy = select.get("least_happy")
        said = [f"picked {pick}" if pick else "no pick"]
        if happy:
            said.append(f"least happy {mentions(happy) if isinstance(happy, list) else '@' + str(happy)}")
        lines.append(("pick", "; ".join(said)))
        rest = {k: v for k, v in select.items() if k not in ("pick", "least_happy")}
        if rest:
            lines.append(("select", compact(rest)))
    elif select is not None:
        lines.append(("select", compact(select)))
    if e.get("pick") and not isinstance(select, Mapping):
        lines.append(("pick", compact(e["pick"])))
    for k, v in e.items():
        if k in WORDED or k in HIDDEN or v is None:
            continue
        if k == "replies" and isinstance(v, list):
            lines.append(("replies", f"{len(v)} read"))
            continue
        lines.append((k.replace("_", " "), compact(v)))
    turn = e.get("turn")
    return Entry(turn if isinstance(turn, int) else None, str(e.get("step") or ""), lines)


def metrics_of(quality: Mapping[str, Any] | None, recorded: Mapping[str, Any] | None
               ) -> list[tuple[str, str]]:
    """The quality the database computed and what the run recorded, known names first, in words."""
    merged = {**(recorded or {}), **(quality or {})}
    out = [(label, compact(merged.pop(k))) for k, label in METRICS if merged.get(k) is not None]
    out += [(k.replace("_", " "), compact(v)) for k, v in merged.items() if v is not None]
    return out


def run_of(row: Mapping[str, Any]) -> Run:
    flow = dict(row["flow"] or {})
    protocol = flow.get("protocol") if isinstance(flow.get("protocol"), Mapping) else {}
    trace = [e for e in (row["trace"] or []) if isinstance(e, Mapping)]
    steps = steps_of(flow, trace, row["current_step"] if row["run_state"] == "open" else None)
    flow_fields = [] if steps else [(k, compact(v)) for k, v in flow.items()
                                    if k not in SHOWN_APART and v not in (None, "", [], {})]
    floor = None
    if row["floor_holder"]:
        floor = Floor(thread=thread_short_id(row["within"]), key=row["row_key"], title=row["row_title"],
                      holder=row["floor_holder"], speakers=list(row["floor_speakers"] or []))
    assignments = row["run_assignments"] or {}
    return Run(
        short_id=row["short_id"], kind=row["run_kind"], engine=row["engine"],
        flow_name=str(protocol.get("name") or row["protocol"]),
        description=str(protocol.get("description") or ""),
        ask=str(flow.get("ask") or ""), cast=[str(h) for h in flow.get("cast") or []],
        bound={str(k): str(v) for k, v in (flow.get("bound") or {}).items()}, steps=steps,
        flow_fields=flow_fields,
        state=row["run_state"], outcome=row["outcome"], current_step=row["current_step"], turn=row["turn"],
        waiting=list(row["run_waiting"] or []), deadline=row["run_deadline"], floor=floor,
        trace=[entry_of(e) for e in trace], metrics=metrics_of(row["quality"], row["metrics"]),
        assignments=[(str(k), compact(v)) for k, v in assignments.items()],
        reason=row["reason"], outcome_text=row["outcome_text"], created_at=row["created_at"],
        closed_at=row["closed_at"], updated_at=row["updated_at"], thread=thread_short_id(row["within"]),
        row_key=row["row_key"], row_title=row["row_title"], posts=row["post_count"],
    )
