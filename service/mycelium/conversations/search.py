"""Message search: the grammar's typed query (``core.search_grammar``) run as SQL in Postgres.

The query is composed per request with SQLAlchemy Core over ``mycelium.message_search`` (one document
per readable message with every searchable field, kept by the database as messages arrive; the
text has a trigram index), or, when the scope includes notices, over ``mycelium.message_documents``
(those documents and the notices', which are derived at query time rather than stored on every
board move), joined to the memory bound to each thread, and sent through asyncpg.
It reproduces the reference rules of the grammar module:

* **matching and score**: every word and phrase must appear (case-insensitive substring), no
  excluded word may; a phrase scores ``3 × count``, a word ``min(count, 5) + whole-word count``;
* **fields**: the same field twice is an OR, different fields AND, ``-field:value`` drops; a
  closed value outside its set matches nothing (and the parser already reported it);
* **scope**: prose only (no pings, notices, presence or events) unless ``type:`` names one;
  expired transient events never show;
* **facets** are disjunctive: a field's buckets are counted over the messages that pass every
  *other* field's clauses (and the text and time), top 12 by count;
* **paging**: ``<created_at>|<id>`` for newest/oldest (resuming by time if that message is gone),
  an integer offset for relevance. Snippets are cut by the grammar module's reference function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import (
    Boolean,
    ColumnElement,
    DateTime,
    Integer,
    Select,
    Text,
    and_,
    column,
    false,
    func,
    literal,
    not_,
    or_,
    select,
    table,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect

from mycelium.core import search_grammar as grammar
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Session, Verbs

#: Message types outside the default scope: control signals, and events (a ledger, not prose).
NOT_PROSE = ("ping", "notice", "presence", "keepalive", "event")
#: Fields whose values are counted as facets (``thread`` is not: its values are URNs).
FACET_FIELDS = tuple(f for f in grammar.FIELDS if f != "thread")
FACET_SIZE = 12

_TEXT_ARRAY = ARRAY(Text)
_SCALAR_COLUMNS = ("room", "episode", "text", "lowered", "from_handle", "in_value", "type_value",
                   "kind_value", "status_value", "stance", "step", "day")


def _documents(name: str) -> Any:
    """A relation of search documents (every one has the same columns)."""
    return table(
        name,
        *(column(name, Text) for name in _SCALAR_COLUMNS),
        column("position", Integer), column("id"), column("created_at", DateTime(timezone=True)),
        column("edited_at", DateTime(timezone=True)), column("expires_at", DateTime(timezone=True)),
        *(column(name, _TEXT_ARRAY) for name in ("to_handles", "mention_handles", "is_values", "has_values")),
        schema="mycelium",
    )


#: The stored documents: every message a search looks through unless its scope includes notices.
stored_docs = _documents("message_search")
#: Those and the notices' documents, derived from the timeline (notices store none).
all_docs = _documents("message_documents")
memories = table("memories", column("room", Text), column("episode", Text), column("key", Text),
                 column("value"), column("meta"), schema="mycelium")
_dialect = asyncpg_dialect()
_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")
_LIKE_SPECIAL = re.compile(r"([\\%_])")


def compile_sql(stmt: Select[Any]) -> tuple[str, list[Any]]:
    """SQL text with ``$n`` parameters, and the values in order, for asyncpg."""
    compiled = stmt.compile(dialect=_dialect, compile_kwargs={"render_postcompile": True})
    return str(compiled), [compiled.params[name] for name in compiled.positiontup or ()]


# ── predicates ──────────────────────────────────────────────────────────────


def _count(haystack: ColumnElement[str], needle: str) -> ColumnElement[int]:
    """Non-overlapping occurrences of ``needle`` (what ``str.count`` counts)."""
    removed = func.length(haystack) - func.length(func.replace(haystack, needle, ""))
    return removed.self_group().op("/")(len(needle))  # integer division


def contains(lowered: ColumnElement[str], needle: str) -> ColumnElement[bool]:
    """``needle`` is in the text, written as LIKE so the trigram index can find it."""
    return lowered.like("%" + _LIKE_SPECIAL.sub(r"\\\1", needle) + "%")


def text_matches(query: grammar.SearchQuery, lowered: ColumnElement[str]) -> list[ColumnElement[bool]]:
    """Every word and phrase present, no excluded word."""
    return ([contains(lowered, n) for n in (*query.phrases, *query.words)]
            + [not_(contains(lowered, x)) for x in query.excluded])


def text_score(query: grammar.SearchQuery, lowered: ColumnElement[str]) -> ColumnElement[Any]:
    """The grammar's score of a message's text that matches (see :func:`text_matches`)."""
    score: ColumnElement[Any] = literal(0, Integer)
    for phrase in query.phrases:
        score = score + grammar.PHRASE_WEIGHT * _count(lowered, phrase)
    for word in query.words:
        whole = r"(?<!\w)" + _REGEX_SPECIAL.sub(r"\\\1", word) + r"(?!\w)"
        capped = func.least(_count(lowered, word), grammar.TERM_COUNT_CAP)
        score = score + capped + func.regexp_count(lowered, whole)
    return score


def clause_predicate(c: Any, clause: grammar.Clause) -> ColumnElement[bool]:
    """Whether a document (columns ``c``) matches one ``field:value`` (never NULL)."""
    v = clause.value
    match clause.field:
        case "from":
            pred = c.from_handle == v
        case "to":
            pred = c.to_handles.contains([v])
        case "mentions":
            pred = c.mention_handles.contains([v])
        case "task":
            options = [c.task_key == v, func.regexp_replace(c.task_key, "^.*/", "") == v]
            if len(v) > 2:
                options.append(func.strpos(func.lower(c.task_title), v) > 0)
            pred = or_(*options)
        case "in":
            pred = c.in_value == v
        case "type":
            pred = c.type_value == v
        case "kind":
            pred = func.lower(c.kind_value) == v
        case "status":
            pred = func.lower(c.status_value) == v
        case "stance":
            pred = c.stance == v
        case "step":
            pred = c.step == v
        case "is":
            pred = c.is_values.contains([v])
        case "has":
            pred = c.has_values.contains([v])
        case "day":
            pred = c.day == v
        case "thread":
            pred = func.mycelium.thread_matches(c.episode, v, type_=Boolean)
        case _:  # a field the grammar knows and this module does not: match nothing, loudly visible
            pred = false()
    return func.coalesce(pred, false())


def field_predicate(c: Any, clauses: Sequence[grammar.Clause]) -> ColumnElement[bool]:
    """One field's clauses: any positive value (OR), and none of the negated ones."""
    positives = [clause_predicate(c, x) for x in clauses if not x.negate]
    negatives = [not_(clause_predicate(c, x)) for x in clauses if x.negate]
    parts = ([or_(*positives)] if positives else []) + negatives
    return and_(true(), *parts)


def _facet_value(c: Any, name: str) -> tuple[ColumnElement[Any], ColumnElement[Any], bool]:
    """The value a facet counts, its label, and whether the value column is an array."""
    arrays = {"to": c.to_handles, "mentions": c.mention_handles, "is": c.is_values, "has": c.has_values}
    if name in arrays:
        return arrays[name], arrays[name], True
    scalars = {"from": c.from_handle, "in": c.in_value, "type": c.type_value, "kind": c.kind_value,
               "status": c.status_value, "stance": c.stance, "step": c.step, "day": c.day}
    if name == "task":
        return c.task_key, c.task_title, False
    return scalars[name], scalars[name], False


# ── paging ──────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Cursor:
    offset: int = 0
    at: datetime | None = None
    message_id: UUID | None = None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def time_cursor(at: datetime, message_id: Any) -> str:
    """The cursor after a message, by its time and id: ``<microseconds since 1970>.<id>``, only
    characters a URL keeps as they are, so it can be pasted into one raw."""
    micros = (at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{message_id}"


def parse_cursor(raw: str | None, sort: str) -> Cursor:
    if raw is None or not raw.strip():
        return Cursor()
    text = raw.strip()
    try:
        if sort == "relevance":
            offset = int(text)
            if offset < 0:
                raise ValueError
            return Cursor(offset=offset)
        if "|" in text:  # the older form, '<ISO time>|<id>' (it needs escaping in a URL)
            stamp, _, ident = text.partition("|")
            at = datetime.fromisoformat(stamp)
            at = at if at.tzinfo else at.replace(tzinfo=UTC)
        else:
            micros, _, ident = text.partition(".")
            if not micros.lstrip("-").isdigit():
                raise ValueError
            at = _EPOCH + timedelta(microseconds=int(micros))
        return Cursor(at=at, message_id=UUID(ident) if ident else None)
    except (ValueError, OverflowError):
        shape = "an offset" if sort == "relevance" else "'<microseconds>.<id>'"
        raise Refusal(422, "invalid_cursor", f"cursor: {raw!r} is not {shape} (pass back next_cursor)",
                      {"field": "cursor"}) from None


# ── the search ──────────────────────────────────────────────────────────────


@dataclass
class SearchResult:
    query: str
    parsed: grammar.SearchQuery
    hits: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    scanned: int = 0
    facets: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    next_cursor: str | None = None

    def body(self, read: Callable[[Any], Any]) -> dict[str, Any]:
        """The response: hits with their messages shown by ``read``."""
        scope = self.parsed.scope()
        for bound in ("after", "before"):
            if scope[bound] is not None:
                scope[bound] = scope[bound].isoformat()
        scope["problems"] = [{"token": p.token, "reason": p.reason} for p in self.parsed.problems]
        hits = [
            {**{k: v for k, v in hit.items() if k not in ("row", "before", "after")},
             "message": read(hit["row"]),
             "context_before": [read(r) for r in hit["before"]],
             "context_after": [read(r) for r in hit["after"]]}
            for hit in self.hits
        ]
        return {"query": self.query, "scope": scope, "hits": hits, "total": self.total,
                "scanned": self.scanned, "facets": self.facets, "fields": list(grammar.FIELDS),
                "next_cursor": self.next_cursor}


async def search_messages(
    verbs: Verbs, room: str, raw: str, *, limit: int = 20, cursor: str | None = None, context: int = 0
) -> SearchResult:
    """One read-only snapshot: the room (404 without it), the counts, the hits, their context and
    the facets."""
    async with verbs.transaction(isolation="repeatable_read", readonly=True) as tx:
        now: datetime = await tx.call(NOBODY, "room_clock", room=room)
        query = grammar.parse(raw, now=now)
        paging = parse_cursor(cursor, query.sort)

        scope_types = [t for t in NOT_PROSE if t not in query.named_types]
        docs = stored_docs if "notice" in scope_types else all_docs
        bound = and_(memories.c.room == docs.c.room, memories.c.episode == docs.c.episode)
        title = func.mycelium.memory_title(memories.c.value, memories.c.meta, type_=Text)
        # what a search looks through: the room's documents of the types in scope, not expired
        in_scope = (docs.c.room == room,
                    docs.c.type_value.not_in(scope_types) if scope_types else true(),
                    or_(docs.c.expires_at.is_(None), docs.c.expires_at > func.now()))
        base = (
            select(*docs.c, memories.c.key.label("task_key"), title.label("task_title"),
                   text_score(query, docs.c.lowered).label("score"))
            .select_from(docs.outerjoin(memories, bound))
            .where(*in_scope, *text_matches(query, docs.c.lowered))
            .cte("base")
        )
        c = base.c
        common: list[ColumnElement[bool]] = []
        if query.after is not None:
            common.append(c.created_at >= query.after)
        if query.before is not None:
            common.append(c.created_at < query.before)
        by_field = query.by_field()
        field_preds = {name: field_predicate(c, clauses) for name, clauses in by_field.items()}
        matches = and_(true(), *common, *field_preds.values())

        scanned_in_scope = select(func.count()).select_from(docs).where(*in_scope).scalar_subquery()
        counts_sql, counts_args = compile_sql(
            select(func.count().filter(matches), scanned_in_scope).select_from(base))
        total, scanned = (await tx.select(counts_sql, *counts_args))[0]

        hits_stmt = select(*c).where(matches)
        if query.sort == "relevance":
            hits_stmt = hits_stmt.order_by(c.score.desc(), c.position.desc()).offset(paging.offset)
        else:
            newest = query.sort == "newest"
            if paging.at is not None:
                position = None
                if paging.message_id is not None:
                    position = await tx.call(NOBODY, "message_position", room=room, id=paging.message_id)
                if position is not None:
                    hits_stmt = hits_stmt.where(c.position < position if newest else c.position > position)
                else:
                    hits_stmt = hits_stmt.where(
                        c.created_at < paging.at if newest else c.created_at > paging.at)
            hits_stmt = hits_stmt.order_by(c.position.desc() if newest else c.position.asc())
        hits_sql, hits_args = compile_sql(hits_stmt.limit(limit + 1))
        rows = list(await tx.select(hits_sql, *hits_args))
        more = len(rows) > limit
        rows = rows[:limit]
        shown = await tx.call(NOBODY, "timeline_rows", room=room, positions=[r["position"] for r in rows])
        full = {r["position"]: r for r in shown}

        result = SearchResult(query=raw, parsed=query, total=total, scanned=scanned)
        if more and rows:
            last = rows[-1]
            result.next_cursor = (str(paging.offset + limit) if query.sort == "relevance"
                                  else time_cursor(last["created_at"], last["id"]))

        neighbours: dict[int, dict[str, list[Any]]] = {}
        if context and rows:
            found = await tx.call(NOBODY, "message_neighbours", room=room,
                                  episodes=[r["episode"] for r in rows],
                                  positions=[r["position"] for r in rows], around=context)
            for n in found:
                neighbours.setdefault(n["hit"], {"before": [], "after": []})[n["side"]].append(n)
        for r in rows:
            around = neighbours.get(r["position"], {"before": [], "after": []})
            result.hits.append({
                "row": full[r["position"]],
                "snippet": grammar.snippet(r["text"], query.needles),
                "score": int(r["score"]),
                "task_key": r["task_key"],
                "task_title": r["task_title"],
                "thread": None if r["in_value"] == "channel" else r["episode"],
                "recipients": list(r["to_handles"]),
                "mentions": list(r["mention_handles"]),
                "stance": r["stance"],
                "before": around["before"],
                "after": around["after"],
            })

        result.facets = await _facets(tx, base, common, field_preds)
        return result


async def _facets(
    tx: Session, base: Any, common: list[ColumnElement[bool]], field_preds: dict[str, ColumnElement[bool]]
) -> dict[str, list[dict[str, Any]]]:
    """Disjunctive facet counts: each field over what passes every other field's clauses."""
    c = base.c
    parts = []
    for name in FACET_FIELDS:
        others = [p for f, p in field_preds.items() if f != name]
        value, label, is_array = _facet_value(c, name)
        if is_array:
            unnested = func.unnest(value).table_valued("v").render_derived()
            part = select(literal(name, Text).label("field"), unnested.c.v.label("value"),
                          unnested.c.v.label("label")).select_from(base).join(unnested, true())
        else:
            part = select(literal(name, Text).label("field"), value.label("value"), label.label("label")) \
                .select_from(base).where(value.is_not(None))
        parts.append(part.where(and_(true(), *common, *others)))
    bucketed = union_all(*parts).subquery("buckets")
    counted = (
        select(bucketed.c.field, bucketed.c.value, func.max(bucketed.c.label).label("label"),
               func.count().label("n"),
               func.row_number().over(partition_by=bucketed.c.field,
                                      order_by=(func.count().desc(), bucketed.c.value)).label("rank"))
        .group_by(bucketed.c.field, bucketed.c.value)
        .subquery("counted")
    )
    stmt = (select(counted.c.field, counted.c.value, counted.c.label, counted.c.n)
            .where(counted.c.rank <= FACET_SIZE)
            .order_by(counted.c.field, counted.c.rank))
    sql, args = compile_sql(stmt)
    facets: dict[str, list[dict[str, Any]]] = {name: [] for name in FACET_FIELDS}
    for r in await tx.select(sql, *args):
        facets[r["field"]].append({"value": r["value"], "label": r["label"], "count": r["n"]})
    return facets

