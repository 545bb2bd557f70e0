"""The one gateway to the SQL verbs: ``await verbs.call(actor, "claim_task", room=…, key=…)``.

A verb is a named query of ``sql/queries`` (``mycelium.db.queries``) called with named parameters;
its ``-- returns:`` line says whether a call gives back a row, rows, a value or nothing. Three
parameters are the gateway's own, filled on every call and never passed by a caller:

* ``:actor`` and ``:actor_kind``: who asks (:class:`~mycelium.verbs.actor.Actor`). A write passes
  them to ``mycelium.acting(…)`` around its verb's first argument, which declares the actor for the
  verb in the verb's own statement: no round trip of its own; the verb takes its author from it;
* ``:defer_wakes``: whether this process sends the write's wake hints itself. When it does (a hub
  with its listener), the triggers keep their hints and the statement returns them in a
  ``wake_hints`` column; they are sent once the write has committed (a statement on a pooled
  connection commits before its result comes back; in :meth:`Verbs.transaction`, after the commit).
  Without a listener the triggers NOTIFY as they would for psql. See ``mycelium.db.listener``.

A refusal of the database (SQLSTATE ``MYnnn``, or a constraint) comes out as
:class:`~mycelium.errors.Refusal`, the one error shape; anything else is raised as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg

from mycelium.db.queries import Query, query
from mycelium.errors import Refusal, refusal_from_db
from mycelium.verbs.actor import HUB_PRINCIPAL, Actor, Principal

if TYPE_CHECKING:
    from mycelium.hub import Hub

Hint = Callable[[str | None], None]
Runner = asyncpg.Pool | asyncpg.Connection

GATEWAY_PARAMS = frozenset({"actor", "actor_kind", "defer_wakes"})


def bind(q: Query, actor: Actor, defer: bool, params: Mapping[str, Any]) -> list[Any]:
    """The positional arguments of one call, or TypeError naming what is wrong with ``params``."""
    given = _given(q)
    if len(params) != len(given) or not GATEWAY_PARAMS.isdisjoint(params):
        extra = sorted(set(params) - given | GATEWAY_PARAMS.intersection(params))
        if extra:
            raise TypeError(f"verb {q.name!r} takes no parameter {', '.join(map(repr, extra))}")
    merged = {**params, "actor": actor.handle, "actor_kind": None if actor.handle is None else actor.kind,
              "defer_wakes": defer}
    try:
        return [merged[name] for name in q.params]
    except KeyError as missing:
        raise TypeError(f"verb {q.name!r} needs parameter {missing.args[0]!r}") from None


_GIVEN: dict[str, frozenset[str]] = {}


def _given(q: Query) -> frozenset[str]:
    """The parameters a caller passes to ``q`` (all but the gateway's own)."""
    found = _GIVEN.get(q.name)
    if found is None:
        found = _GIVEN[q.name] = frozenset(q.params) - GATEWAY_PARAMS
    return found


async def run(db: Runner, q: Query, args: list[Any]) -> Any:
    """One statement on ``db``; a database refusal raised as :class:`Refusal`."""
    try:
        if q.returns == "row":
            return await db.fetchrow(q.sql, *args)
        if q.returns == "value":
            return await db.fetchval(q.sql, *args)
        if q.returns == "none":
            await db.execute(q.sql, *args)
            return None
        return await db.fetch(q.sql, *args)
    except asyncpg.PostgresError as exc:
        refusal = refusal_from_db(exc)
        if refusal is None:
            raise
        raise refusal from exc


def admit(principal: Principal | None, q: Query, actor: Actor) -> Actor:
    """The actor a call runs as once the token gate has verified ``principal`` (None: the gate is
    off, and the declared actor is taken as it is). An operator may act for the handle the request
    declares; anyone else acts as their own handle (so a write naming another author is refused by
    the database's author rule, 403 ``actor_mismatch``), and a viewer calls no verb that writes.
    (Who may call the administrative verbs the database decides: sql/base.sql ``operator_only``.)
    The hub's own loops (``HUB_PRINCIPAL``) are taken as they declare themselves."""
    if principal is None or principal is HUB_PRINCIPAL:
        return actor
    if q.needs == "writer" and principal.role == "viewer":
        raise Refusal(403, "read_only", f"@{principal.handle} is a viewer and may only read",
                      {"verb": q.name, "role": "viewer"})
    if "actor" not in q.params:
        return actor  # it names no actor (a transition is fenced by its lease's owner instead)
    if principal.role == "operator":
        if actor.handle is None:
            return Actor(principal.handle, "operator", principal.subject)
        return Actor(actor.handle, actor.kind, principal.subject)
    kind = actor.kind if actor.handle is not None and actor.kind in ("person", "agent") else "agent"
    return Actor(principal.handle, kind, principal.subject)


def declaration(principal: Principal | None, *, local: bool = True) -> str:
    """The statement that tells the database who asks (sql/privacy.sql; None: nobody), for the rest
    of the transaction or, not ``local``, for the session: a simple query, its values quoted as
    literals (standard conforming strings: only the quote is doubled), so it can share a round trip
    with a BEGIN."""
    handle, role = ("", "") if principal is None else (
        v.replace("'", "''") for v in (principal.handle, principal.role))
    scope = "true" if local else "false"
    return (f"SELECT set_config('mycelium.principal', '{handle}', {scope}), "
            f"set_config('mycelium.principal_role', '{role}', {scope})")


def _declared_as(principal: Principal | None) -> str:
    return "" if principal is None else f"{principal.role}:{principal.handle}"


async def _declare(conn: asyncpg.Connection, principal: Principal | None) -> bool:
    """Make ``conn`` declare ``principal`` (None: nobody) for what runs on it next. A hub pool's
    connection (``HubConnection``) remembers what its session declares: the same principal again
    costs nothing, another one a round trip (a session-level declaration, made outside any
    transaction so no rollback can undo it; inside one, a transaction-local one). False for a
    connection that does not remember (it declares nothing: the caller declares per transaction)."""
    try:
        held = conn.declared_principal()
    except AttributeError:
        return False
    want = _declared_as(principal)
    if held == want:
        return True
    if conn.is_in_transaction():
        await conn.execute(declaration(principal))
        return True
    conn.note_principal(None)  # unknown until the declaration comes back
    await conn.execute(declaration(principal, local=False))
    conn.note_principal(want)
    return True


async def _as_principal(conn: asyncpg.Connection, principal: Principal, q: Query, args: list[Any]) -> Any:
    """One call in a transaction of its own that first declares the principal (on a connection that
    does not remember its declaration): the BEGIN and the declaration go in one round trip, the verb
    in the next, the COMMIT in a third. (A call cancelled half-way leaves the transaction open: the
    pool rolls it back when the connection comes back.)"""
    await conn.execute("BEGIN; " + declaration(principal))
    try:
        result = await run(conn, q, args)
    except Exception:
        await conn.execute("ROLLBACK")
        raise
    await conn.execute("COMMIT")
    return result


def hints_of(q: Query, result: Any) -> str | None:
    """The wake hints a write returned (every row carries all of them), if it is a hinted one."""
    if "defer_wakes" not in q.params or not result:
        return None
    first = result if q.returns == "row" else result[0]
    hints: str | None = first["wake_hints"]
    return hints


class Verbs:
    """The verbs on a pool, or on one connection (a loop's own, which may hold a session lock);
    ``hint`` sends wake hints after the commit (None: let the triggers NOTIFY)."""

    __slots__ = ("_db", "_hint", "principal")

    def __init__(self, db: Runner, hint: Hint | None = None, principal: Principal | None = None) -> None:
        self._db = db
        self._hint = hint
        self.principal = principal
        """Who a verified token says is asking (None: the gate is off, or the hub's own work)."""

    async def call(self, actor: Actor, verb: str, /, **params: Any) -> Any:
        """Call ``verb`` as ``actor``: a row (or None), rows, a value or None, as the verb returns."""
        q = query(verb)
        actor = admit(self.principal, q, actor)
        args = bind(q, actor, self._hint is not None, params)
        async with _connection(self._db) as conn:  # row-level security reads the declared principal
            if await _declare(conn, self.principal) or self.principal is None:
                result = await run(conn, q, args)
            else:
                result = await _as_principal(conn, self.principal, q, args)
        if self._hint is not None:
            hints = hints_of(q, result)
            if hints:
                self._hint(hints)
        return result

    @asynccontextmanager
    async def transaction(self, *, readonly: bool = False, isolation: str | None = None
                          ) -> AsyncIterator[Session]:
        """Several calls in one transaction on one connection; their hints are sent after it
        commits (a refusal rolls it all back and sends nothing)."""
        async with _connection(self._db) as conn:
            session = Session(conn, defer=self._hint is not None, readonly=readonly, principal=self.principal)
            kwargs: dict[str, Any] = {"readonly": readonly}
            if isolation is not None:
                kwargs["isolation"] = isolation
            remembered = await _declare(conn, self.principal)
            async with conn.transaction(**kwargs):
                if not remembered and self.principal is not None:
                    await conn.execute(declaration(self.principal))
                yield session
        if self._hint is not None:
            for hints in session.hints:
                self._hint(hints)


@asynccontextmanager
async def _connection(db: Runner) -> AsyncIterator[asyncpg.Connection]:
    """A connection of the pool for the block, or the one connection the verbs run on."""
    if isinstance(db, asyncpg.Connection):
        yield db
        return
    async with db.acquire() as conn:
        yield conn


class Session:
    """Calls inside one transaction (see :meth:`Verbs.transaction`)."""

    __slots__ = ("_conn", "_defer", "_readonly", "hints", "principal")

    def __init__(self, conn: asyncpg.Connection, *, defer: bool, readonly: bool,
                 principal: Principal | None = None) -> None:
        self._conn = conn
        self._defer = defer
        self._readonly = readonly
        self.principal = principal
        self.hints: list[str] = []

    async def call(self, actor: Actor, verb: str, /, **params: Any) -> Any:
        q = query(verb)
        actor = admit(self.principal, q, actor)
        result = await run(self._conn, q, bind(q, actor, self._defer, params))
        hints = hints_of(q, result)
        if hints:
            self.hints.append(hints)
        return result

    async def select(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Rows of a read composed at run time (message search builds its query per request);
        only in a read-only transaction, so composed SQL never writes."""
        if not self._readonly:
            raise RuntimeError("composed SQL runs only in a read-only transaction")
        return await run(self._conn, _composed(sql), list(args))  # type: ignore[no-any-return]


def _composed(sql: str) -> Query:
    return Query("(composed)", sql, (), "rows")


def verbs_of(hub: Hub, principal: Principal | None = None) -> Verbs:
    """The gateway of a started hub: its pool, its listener to send the hints, and the principal a
    verified token names (a request through the token gate)."""
    listener = hub.listener
    return Verbs(hub.db, listener.hint if listener is not None else None, principal)


def verbs_on(conn: asyncpg.Connection, principal: Principal | None = None) -> Verbs:
    """The gateway on one connection (a background loop's own, a command's): its writes' triggers
    send their wake hints themselves."""
    return Verbs(conn, None, principal)
