"""accord's code: labelled pieces merged into one frame, tallied, and locked as the shared summary.

Members label what they say (``[[mycelium: objective]] …``, ``term=<word>``, ``check covers=p1``;
:mod:`mycelium.core.markers` reads them). Points of one type that say the same thing fold into one,
credited to everyone who said it: equal text (case and spacing aside), or, when the hub has an
embedding model, vectors at least :data:`SIMILAR` alike. Points are numbered ``p1``, ``p2`` … in the
order they first came. A tally of points says whether the last round added any; a tally of terms
says whether a word is used in different senses (and by whom). The lock assembles the summary, with
what is still open: points one member made, different things said about one subject, words used in
different senses, points nobody said how to check, members who never answered.

Everything here is a pure function of the run's state (``pending``) and the replies; the vectors are
given, never computed here, so every worker computes the same frame.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from mycelium.core import markers

#: cosine similarity at or above which two texts say the same thing
SIMILAR = 0.88
Vectors = Mapping[str, Sequence[float]]

_TITLES = {
    "objective": "Objective",
    "constraint": "Constraints",
    "assumption": "Assumptions",
    "sub_goal": "Sub-goals",
    "deliverable": "Deliverables",
    "out_of_scope": "Out of scope",
    "statement": "Said without a label",
}


def norm(text: str) -> str:
    return " ".join(text.casefold().split())


def same_text(a: str, b: str, vectors: Vectors | None) -> bool:
    """Whether two texts say the same thing: equal but for case and spacing, or alike vectors."""
    if norm(a) == norm(b):
        return True
    va, vb = (vectors or {}).get(a), (vectors or {}).get(b)
    if va is None or vb is None:
        return False
    return sum(x * y for x, y in zip(va, vb, strict=False)) >= SIMILAR


def pieces(payload: Mapping[str, Any] | None, text: str) -> list[dict[str, Any]]:
    """The labelled pieces a reply states, as the run keeps them."""
    return [p.as_dict() for p in markers.pieces_of(payload, text)]


def texts_for(
    pending: Mapping[str, Any], replies: Sequence[tuple[Mapping[str, Any] | None, str]]
) -> list[str]:
    """The texts a move may compare (to embed before it): the frame's and the replies' points and
    meanings; none when the replies carry none and no word has two meanings to compare."""
    new = [p["text"] for payload, text in replies for p in pieces(payload, text) if p["label"] != "check"]
    if not new and not any(len(t["meanings"]) > 1 for t in pending.get("terms", [])):
        return []
    known = [p["text"] for p in pending.get("points", [])]
    known += [m["text"] for t in pending.get("terms", []) for m in t["meanings"]]
    return list(dict.fromkeys([*known, *new]))


def merge(
    state: dict[str, Any],
    answers: Sequence[tuple[str, list[dict[str, Any]], str]],
    vectors: Vectors | None,
    keep_unlabelled: bool,
) -> None:
    """Fold (handle, pieces, prose) answers into the frame in ``state``; ``state['grew']`` is how
    many points were new. ``keep_unlabelled``: a reply with no label is kept as one statement."""
    points: list[dict[str, Any]] = [dict(p) for p in state.get("points", [])]
    terms: list[dict[str, Any]] = [dict(t, meanings=list(t["meanings"])) for t in state.get("terms", [])]
    checks: list[dict[str, Any]] = list(state.get("checks", []))
    grew = 0
    compared_without_model = False
    for handle, found, prose in answers:
        if not found and keep_unlabelled and prose.strip():
            found = [{"label": "statement", "text": prose.strip()}]
        for p in found:
            label = p["label"]
            if label == "term":
                word = norm(p["term"])
                entry = next((t for t in terms if t["term"] == word), None)
                if entry is None:
                    entry = {"term": word, "meanings": []}
                    terms.append(entry)
                entry["meanings"] = [m for m in entry["meanings"] if m["handle"] != handle]
                entry["meanings"].append({"handle": handle, "text": p["text"]})
            elif label == "check":
                checks.append({"text": p["text"], "covers": list(p.get("covers", [])), "owner": handle})
            else:
                same_type = [q for q in points if q["type"] == label and label != "statement"]
                match = next((q for q in same_type if same_text(q["text"], p["text"], vectors)), None)
                if same_type and match is None and vectors is None:
                    compared_without_model = True
                if match is not None:
                    if handle not in match["authors"]:
                        match["authors"] = [*match["authors"], handle]
                    continue
                point = {"id": f"p{len(points) + 1}", "type": label, "text": p["text"], "authors": [handle]}
                if p.get("about"):
                    point["about"] = norm(p["about"])
                points.append(point)
                grew += 1
    state.update(points=points, terms=terms, checks=checks, grew=grew)
    if compared_without_model:
        state["similarity"] = "unavailable"


def meanings(term: Mapping[str, Any], vectors: Vectors | None, cast: Sequence[str]) -> list[dict[str, Any]]:
    """A word's meanings, the same ones folded, each with the members who gave it (in cast order)."""
    out: list[dict[str, Any]] = []
    order = {h: i for i, h in enumerate(cast)}
    for m in sorted(term["meanings"], key=lambda m: order.get(m["handle"], len(order))):
        same = next((g for g in out if same_text(g["text"], m["text"], vectors)), None)
        if same is None:
            out.append({"text": m["text"], "members": [m["handle"]]})
        else:
            same["members"].append(m["handle"])
    return out


def _count(state: dict[str, Any], step_id: str) -> int:
    tallies = dict(state.get("tallies", {}))
    tallies[step_id] = int(tallies.get(step_id, 0)) + 1
    state["tallies"] = tallies
    return tallies[step_id]


def tally_points(state: dict[str, Any], step_id: str, max_rounds: int) -> str:
    """``empty`` (no point yet), ``grew`` (the last round added some, and rounds are left) or
    ``settled`` (flagging the points still arriving when the rounds ran out)."""
    n = _count(state, step_id)
    if not state.get("points"):
        return "empty"
    if state.get("grew"):
        if n < max_rounds:
            return "grew"
        state["frame_cap_reached"] = True
    return "settled"


def tally_terms(
    state: dict[str, Any], step_id: str, max_rounds: int, vectors: Vectors | None, cast: Sequence[str]
) -> str:
    """``contested`` (a word used in different senses; ``state['contested']`` are whoever gave it a
    meaning) while rounds are left, else ``clear`` (what is still contested is flagged at the lock)."""
    n = _count(state, step_id)
    words = [t for t in state.get("terms", []) if len(meanings(t, vectors, cast)) > 1]
    if words and n < max_rounds:
        who = {m["handle"] for t in words for m in t["meanings"]}
        state["contested"] = [h for h in cast if h in who]
        return "contested"
    state.pop("contested", None)
    return "clear"


def frame_text(state: Mapping[str, Any], cast: Sequence[str]) -> str:
    n = len(cast)
    return "\n".join(
        f"{p['id']} ({p['type']}, stated by {len(p['authors'])} of {n}): {p['text']}"
        for p in state.get("points", [])
    )


def terms_text(state: Mapping[str, Any], vectors: Vectors | None, cast: Sequence[str]) -> str:
    lines = []
    for t in state.get("terms", []):
        found = meanings(t, vectors, cast)
        if len(found) > 1:
            said = "; ".join(f'"{m["text"]}" ({", ".join(m["members"])})' for m in found)
            lines.append(f"{t['term']} is used in different senses: {said}")
    return "\n".join(lines)


def summary_key(task: str) -> str:
    return "context/summary/" + re.sub(r"^work/", "", task)


def lock(
    state: Mapping[str, Any], cast: Sequence[str], title: str, task: str, vectors: Vectors | None = None
) -> dict[str, Any] | None:
    """The shared summary (``{key, text, contract}``), or None when there is nothing to lock."""
    points = [dict(p) for p in state.get("points", [])]
    if not points:
        return None
    checks = list(state.get("checks", []))
    covered = {c for ch in checks for c in ch["covers"]}
    flags: list[dict[str, Any]] = []
    by_about: dict[tuple[str, str], list[str]] = {}
    for p in points:
        if p.get("about"):
            by_about.setdefault((p["type"], p["about"]), []).append(p["id"])
    conflicted = {i for ids in by_about.values() if len(ids) > 1 for i in ids}
    for p in points:
        p["support"] = len(p["authors"])
        p["flags"] = [
            f
            for f, on in (
                ("single", len(p["authors"]) == 1 and len(cast) > 1),
                ("conflict", p["id"] in conflicted),
                ("unchecked", p["id"] not in covered),
            )
            if on
        ]
    for (_, about), ids in by_about.items():
        if len(ids) > 1:
            flags.append(
                {
                    "kind": "conflict",
                    "text": f"People said different things about {about}: {', '.join(ids)}",
                    "points": ids,
                }
            )
    single = [p["id"] for p in points if "single" in p["flags"]]
    if single:
        flags.append(
            {"kind": "single", "text": f"Only one person said this: {', '.join(single)}", "points": single}
        )
    glossary = []
    for t in state.get("terms", []):
        found = meanings(t, vectors, cast)
        status = "agreed" if len(found) == 1 else "contested"
        glossary.append({"term": t["term"], "status": status, "meanings": found})
        if status == "contested":
            flags.append(
                {
                    "kind": "ambiguous",
                    "text": f"A word used in different senses: {t['term']}",
                    "term": t["term"],
                }
            )
    unchecked = [p["id"] for p in points if "unchecked" in p["flags"]]
    if unchecked:
        flags.append(
            {
                "kind": "unchecked",
                "text": f"Nobody has said how to check: {', '.join(unchecked)}",
                "points": unchecked,
            }
        )
    quiet = [h for h in cast if h not in state.get("answered", [])]
    if quiet:
        flags.append({"kind": "quiet_member", "text": f"No answer from {', '.join(quiet)}", "members": quiet})
    if state.get("frame_cap_reached"):
        flags.append(
            {"kind": "frame_cap_reached", "text": "Points were still arriving when the rounds ran out"}
        )
    if state.get("similarity") == "unavailable":
        flags.append(
            {"kind": "similarity_unavailable", "text": "No embedding model: only equal text was folded"}
        )
    contract = {
        "cast": list(cast),
        "points": points,
        "glossary": glossary,
        "checks": checks,
        "unchecked": unchecked,
        "flags": flags,
    }
    return {"key": summary_key(task), "text": _render(title, task, contract), "contract": contract}


def _render(title: str, task: str, c: Mapping[str, Any]) -> str:
    lines = [f"# Shared summary: {title or task}", "", f"Task: {task} · members: {', '.join(c['cast'])}"]
    for kind, heading in _TITLES.items():
        mine = [p for p in c["points"] if p["type"] == kind]
        if not mine:
            continue
        lines += ["", f"## {heading}", ""]
        lines += [f"- {p['id']}: {p['text']} ({', '.join(p['authors'])})" for p in mine]
    if c["glossary"]:
        lines += ["", "## Words", ""]
        for t in c["glossary"]:
            said = "; ".join(f"{m['text']} ({', '.join(m['members'])})" for m in t["meanings"])
            mark = " (used in different senses)" if t["status"] == "contested" else ""
            lines.append(f"- {t['term']}{mark}: {said}")
    if c["checks"]:
        lines += ["", "## Checks", ""]
        lines += [
            f"- {ch['text']} Covers {', '.join(ch['covers']) or 'nothing named'}. ({ch['owner']})"
            for ch in c["checks"]
        ]
    lines += ["", "## Open items", ""]
    lines += [f"- {f['text']}" for f in c["flags"]] or ["- Nothing open."]
    return "\n".join(lines) + "\n"


def outcome_line(summary: Mapping[str, Any] | None, state: Mapping[str, Any], cast: Sequence[str]) -> str:
    """What the commit says of the run's frame."""
    quiet = [h for h in cast if h not in state.get("answered", [])]
    tail = f" No answer from {', '.join(quiet)}." if quiet else ""
    if summary is None:
        return tail.strip()
    c = summary["contract"]
    shared = sum(1 for p in c["points"] if p["support"] > 1)
    words = sum(1 for t in c["glossary"] if t["status"] == "contested")
    said = f"{len(c['points'])} point(s), {shared} stated by more than one person"
    if words:
        said += f"; {words} word(s) used in different senses"
    return f"{said}.{tail} The shared summary is saved as {summary['key']}."
