"""Markers: the one structured thing a member writes inside prose.

``[[mycelium: confidence=0.85 stance=accept]]`` says how sure the writer is and whether they can
live with what is on the table. A flow that asks for ratings reads them from the same marker, one
capital letter per option: ``[[mycelium: A=82 B=41]]``. A marker can also **label** the text after
it (up to the next marker or a blank line), so code can tell what kind of thing that text is:

    [[mycelium: constraint about=refunds]] Refunds above 5000 need a person's approval.
    [[mycelium: term=handoff]] Passing the account to the next owner.
    [[mycelium: check covers=p2,p4]] Finance signs off the limits first.

``/reply`` lifts what a marker says onto the envelope payload (:func:`lift`) and strips the marker
from the prose (:func:`strip`); a person writing through ``/messages`` leaves it in the text. The
readers (:func:`stance_of`, :func:`scores_of`, :func:`pieces_of`, :func:`confidence_of`) therefore
prefer the lifted payload and fall back to parsing the prose.

A negotiation reads a move from a marker whose first word is ``offer``, ``accept`` or ``reject``:
``[[mycelium: offer price=20 deadline=2]]`` (every ``key=value`` is a term of the offer but
``confidence``, ``stance`` and the epistemic fields ``revision_cause``, ``deferred_to``,
``evidence`` and ``addresses``), ``[[mycelium: accept]]``, ``[[mycelium: reject]]`` (:func:`move_of`).

**Faithful, never fabricated**: a value that cannot be read is ignored, a rating outside 0-100 or
not a whole number is dropped (never clamped), and a missing rating is absent, not 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mycelium.contracts import vocabulary

MARKER_RE = re.compile(r"\[\[\s*mycelium\s*:(.*?)\]\]", re.IGNORECASE | re.DOTALL)
#: A marker with the spaces after it, so a label at the start of a line leaves the line flush.
_STRIP_RE = re.compile(MARKER_RE.pattern + r"[ \t]*", re.IGNORECASE | re.DOTALL)
#: ``key=value``; a value is quoted (to hold spaces) or runs to whitespace, ``,`` or ``;``.
_PAIR_RE = re.compile(r"""([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s,;]+))""")
#: The opening of a marker, where :func:`defang` breaks it.
_OPENING_RE = re.compile(r"\[\[(?=\s*mycelium\s*:)", re.IGNORECASE)
_BLANK_LINE_RE = re.compile(r"\n[ \t]*\n")
_RATING_KEY_RE = re.compile(r"[A-Z]")
_RATING_VALUE_RE = re.compile(r"\d{1,3}")
_POINT_ID_RE = re.compile(r"p\d+")

#: What a stance (or action) word means. Anything else states no stance (contracts/vocabulary.json,
#: which the database's mycelium.stance_of reads too).
STANCE_WORDS: Mapping[str, str] = MappingProxyType(dict(vocabulary()["stance_words"]))
STANCES = tuple(dict.fromkeys(STANCE_WORDS.values()))

#: The first word of a marker that states a negotiation move.
MOVE_WORDS = ("offer", "accept", "reject")
#: Keys of a move marker that are not terms of the offer.
_NOT_TERMS = frozenset(
    {"confidence", "stance", "action", "revision_cause", "deferred_to", "evidence", "addresses"}
)

#: What a labelled point can be, in the order a summary lists them.
POINT_TYPES = ("objective", "constraint", "assumption", "sub_goal", "deliverable", "out_of_scope")
#: Every label a piece can carry.
LABELS = (*POINT_TYPES, "term", "check")


@dataclass(frozen=True)
class Piece:
    """A stretch of prose a marker labelled.

    ``label`` is a point type, ``term`` or ``check``. A point may say what it is ``about``; a
    ``term`` piece names the ``term`` it defines; a ``check`` piece lists the point ids it
    ``covers`` (``p1``, ``p2`` …).
    """

    label: str
    text: str
    about: str | None = None
    term: str | None = None
    covers: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The piece as the payload carries it."""
        out: dict[str, Any] = {"label": self.label}
        if self.label in POINT_TYPES and self.about:
            out["about"] = self.about
        if self.label == "term":
            out["term"] = self.term
        if self.label == "check":
            out["covers"] = list(self.covers)
        out["text"] = self.text
        return out


@dataclass(frozen=True)
class Move:
    """A negotiation move a marker states: ``offer`` with its terms, ``accept`` or ``reject``."""

    action: str
    offer: Mapping[str, str] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.action == "offer":
            out["offer"] = dict(self.offer)
        return out


@dataclass(frozen=True)
class Lifted:
    """What the markers in a text state. Absent fields were not stated (or could not be read)."""

    confidence: float | None = None
    action: str | None = None
    scores: Mapping[str, int] = field(default_factory=dict, hash=False)
    pieces: tuple[Piece, ...] = ()
    move: Move | None = None

    @property
    def empty(self) -> bool:
        return (
            self.confidence is None
            and self.action is None
            and not self.scores
            and not self.pieces
            and self.move is None
        )

    def payload(self) -> dict[str, Any]:
        """The fields as they ride on the envelope payload's ``data`` (only those stated)."""
        out: dict[str, Any] = {}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.action is not None:
            out["action"] = self.action
        if self.scores:
            out["scores"] = dict(self.scores)
        if self.pieces:
            out["pieces"] = [p.as_dict() for p in self.pieces]
        if self.move is not None:
            out["move"] = self.move.as_dict()
        return out


# ── reading one marker ──────────────────────────────────────────────────────


def _pairs(body: str) -> list[tuple[str, str]]:
    return [
        (m.group(1), next(g for g in (m.group(2), m.group(3), m.group(4)) if g is not None))
        for m in _PAIR_RE.finditer(body)
    ]


def _words(body: str) -> list[str]:
    """The bare words of a marker body (what is not ``key=value``), lowercased, ``-`` as ``_``."""
    rest = _PAIR_RE.sub(" ", body)
    return [w.lower().replace("-", "_") for w in re.split(r"[\s,;]+", rest) if w]


def _rating(raw: str) -> int | None:
    """A whole number 0-100, or ``None``."""
    if not _RATING_VALUE_RE.fullmatch(raw):
        return None
    value = int(raw)
    return value if value <= 100 else None


def _confidence(raw: Any) -> float | None:
    """A number in [0, 1], or ``None`` (booleans and non-finite values are not numbers here)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        try:
            raw = float(raw)
        except ValueError:
            return None
    if not isinstance(raw, int | float) or not math.isfinite(raw):
        return None
    value = float(raw)
    return value if 0.0 <= value <= 1.0 else None


def _move(body: str) -> Move | None:
    """The move a marker body states, or ``None`` (its first bare word is not a move word; an
    offer that names no term states nothing)."""
    words = _words(body)
    if not words or words[0] not in MOVE_WORDS:
        return None
    if words[0] != "offer":
        return Move(words[0])
    terms = {k: v.strip() for k, v in _pairs(body) if k.lower() not in _NOT_TERMS and v.strip()}
    return Move("offer", terms) if terms else None


def _label(body: str) -> Piece | None:
    """The label a marker body puts on the text after it (with empty text), or ``None``."""
    pairs = {k.lower(): v.strip() for k, v in _pairs(body)}
    words = _words(body)
    point = next((w for w in words if w in POINT_TYPES), None)
    if point is not None:
        return Piece(label=point, text="", about=pairs.get("about") or None)
    if pairs.get("term"):
        return Piece(label="term", text="", term=pairs["term"])
    if "check" in words:
        covers = [c.strip().lower() for c in pairs.get("covers", "").split(",") if c.strip()]
        # ``covers=p2,p4`` leaves ``p4`` as a bare word: a value ends at a comma.
        covers += [w for w in words if _POINT_ID_RE.fullmatch(w) and w not in covers]
        return Piece(label="check", text="", covers=tuple(covers))
    return None


# ── the text as a whole ─────────────────────────────────────────────────────


def labelled(text: str) -> tuple[Piece, ...]:
    """Every piece of ``text`` a marker labels, in the order written.

    A piece runs from its marker to the next marker or a blank line; a label with no text after
    it labels nothing and is dropped.
    """
    found = list(MARKER_RE.finditer(text))
    pieces: list[Piece] = []
    for i, match in enumerate(found):
        label = _label(match.group(1))
        if label is None:
            continue
        stop = found[i + 1].start() if i + 1 < len(found) else len(text)
        body = text[match.end() : stop]
        blank = _BLANK_LINE_RE.search(body)
        if blank:
            body = body[: blank.start()]
        body = body.strip()
        if body:
            pieces.append(Piece(label.label, body, label.about, label.term, label.covers))
    return tuple(pieces)


def lift(text: str) -> Lifted:
    """What every marker in ``text`` states: confidence, stance, ratings and labelled pieces.

    A key that is one capital letter rates that option (``a=82`` is not a rating). Later markers
    win over earlier ones for the same field.
    """
    confidence: float | None = None
    action: str | None = None
    scores: dict[str, int] = {}
    move: Move | None = None
    for match in MARKER_RE.finditer(text):
        stated = _move(match.group(1))
        move = stated or move
        for key, raw in _pairs(match.group(1)):
            if stated is not None and key.lower() not in _NOT_TERMS:
                continue  # a term of an offer, not a rating
            if _RATING_KEY_RE.fullmatch(key):  # before lowercasing: `A` is an option, `a` nothing
                rating = _rating(raw)
                if rating is not None:
                    scores[key] = rating
                continue
            name = key.lower()
            if name == "confidence":
                value = _confidence(raw)
                if value is not None:
                    confidence = value
            elif name in ("stance", "action"):
                stance = STANCE_WORDS.get(raw.lower())
                if stance is not None:
                    action = stance
    return Lifted(confidence=confidence, action=action, scores=scores, pieces=labelled(text), move=move)


def strip(text: str) -> str:
    """``text`` without its markers, trimmed. A text that is nothing but markers is kept as it was
    (trimmed), so a bare marker never turns a message into an empty one."""
    return _STRIP_RE.sub("", text).strip() or text.strip()


def lift_reply(text: str) -> tuple[dict[str, Any], str]:
    """What ``/reply`` records: the payload data and the prose.

    The data is what the markers state, or ``{"action": "reply"}`` when they state nothing.
    """
    data = lift(text).payload()
    return (data or {"action": "reply"}), strip(text)


def defang(text: str) -> str:
    """``text`` with every marker opening broken (``[[`` → ``[ [``), so a member's words can be
    echoed into a later prompt without speaking a marker of their own."""
    return _OPENING_RE.sub("[ [", text)


# ── readers: the lifted payload first, then the prose ──────────────────────


def _data(data: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return data if isinstance(data, Mapping) else {}


def stance_of(data: Mapping[str, Any] | None, prose: str | None) -> str | None:
    """``accept`` / ``reject`` as a message states it, or ``None``.

    ``data`` is the envelope payload's data (where ``/reply`` put the lifted marker); a marker
    still in ``prose`` (a person's write) is read next. Nothing else states a stance.
    """
    action = _data(data).get("action")
    if action in STANCES:
        return str(action)
    return lift(prose).action if isinstance(prose, str) else None


def confidence_of(data: Mapping[str, Any] | None, prose: str | None) -> float | None:
    """The confidence a message states (0..1), payload first, or ``None``."""
    lifted = _confidence(_data(data).get("confidence"))
    if lifted is not None:
        return lifted
    return lift(prose).confidence if isinstance(prose, str) else None


def scores_of(data: Mapping[str, Any] | None, prose: str | None) -> dict[str, int]:
    """The option ratings a message states, payload first, or ``{}``. Only well-formed ratings
    count; nothing is guessed from what the prose says."""
    raw = _data(data).get("scores")
    if isinstance(raw, Mapping):
        found = {
            k: v
            for k, v in raw.items()
            if isinstance(k, str)
            and _RATING_KEY_RE.fullmatch(k)
            and isinstance(v, int)
            and not isinstance(v, bool)
            and 0 <= v <= 100
        }
        if found:
            return found
    return dict(lift(prose).scores) if isinstance(prose, str) else {}


def move_of(data: Mapping[str, Any] | None, prose: str | None) -> Move | None:
    """The negotiation move a message states, payload first (``/reply`` lifted it), or ``None``."""
    raw = _data(data).get("move")
    if isinstance(raw, Mapping) and raw.get("action") in MOVE_WORDS:
        terms = raw.get("offer")
        if raw["action"] != "offer":
            return Move(str(raw["action"]))
        if isinstance(terms, Mapping) and terms:
            return Move("offer", {str(k): str(v) for k, v in terms.items()})
    return lift(prose).move if isinstance(prose, str) else None


def fields_of(prose: str | None, names: tuple[str, ...]) -> dict[str, str]:
    """The values the markers in ``prose`` give the keys ``names`` (the last marker wins)."""
    out: dict[str, str] = {}
    for match in MARKER_RE.finditer(prose or ""):
        for key, raw in _pairs(match.group(1)):
            if key.lower() in names and raw.strip():
                out[key.lower()] = raw.strip()
    return out


def _piece(raw: Any) -> Piece | None:
    """A lifted piece as it should look, or ``None`` when malformed."""
    if not isinstance(raw, Mapping):
        return None
    label, text = raw.get("label"), raw.get("text")
    if not isinstance(text, str) or not text.strip():
        return None
    text = text.strip()
    if label in POINT_TYPES:
        about = raw.get("about")
        return Piece(label, text, about=about.strip() if isinstance(about, str) and about.strip() else None)
    if label == "term":
        term = raw.get("term")
        return Piece(label, text, term=term.strip()) if isinstance(term, str) and term.strip() else None
    if label == "check":
        covers = raw.get("covers")
        ids = (
            tuple(c.strip().lower() for c in covers if isinstance(c, str) and c.strip())
            if isinstance(covers, list | tuple)
            else ()
        )
        return Piece(label, text, covers=ids)
    return None


def pieces_of(data: Mapping[str, Any] | None, prose: str | None) -> tuple[Piece, ...]:
    """The labelled pieces a message states, payload first, in the order written."""
    raw = _data(data).get("pieces")
    if isinstance(raw, list | tuple):
        found = tuple(p for p in (_piece(r) for r in raw) if p is not None)
        if found:
            return found
    return labelled(prose) if isinstance(prose, str) else ()
