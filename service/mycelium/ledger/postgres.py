"""The ledger on the hub's PostgreSQL, directly: asyncpg connections calling the SQL verbs.

One connection set per event loop (asyncpg connections belong to the loop that made them): async
tools use their own loop's; sync tools go through a private loop thread and its set.

The store's first connection checks the hub's schema, before anything else runs on it. A database
that never had it gets it installed (``install_schema=True``, the default: the same definitions
``mycelium db upgrade`` applies, recorded at the same revision, so the hub's migrations carry on from
there), or is refused at once (``install_schema=False``). A database at an older revision is never
upgraded from here: the store refuses it and names ``mycelium db upgrade``; so is a database the
connecting user may not install into. Every such refusal is a :class:`LedgerSchemaError`. A later
release's revision is used as it is (see :func:`ensure_schema`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, TypeVar

import asyncpg
import msgspec

from mycelium.db.queries import query
from mycelium.errors import refusal_from_db
from mycelium.ledger.bridge import LoopThread
from mycelium.ledger.connections import ConnectionSet
from mycelium.ledger.errors import (
    LedgerError,
    LedgerSchemaError,
    LedgerStorageUnavailableError,
    ledger_error,
)
from mycelium.ledger.record import Claim, ClaimRequest, Transition
from mycelium.verbs.actor import NOBODY, Actor
from mycelium.verbs.gateway import bind

T = TypeVar("T")

log = logging.getLogger("mycelium.ledger.postgres")

_encode = msgspec.json.Encoder(enc_hook=str).encode


def _encode_json(value: Any) -> str:
    return _encode(value).decode()


def as_transition(row: Any) -> Transition:
    """A row as a Transition, its result decoded from the caller's JSON text where that was kept (the
    jsonb column sorts an object's keys)."""
    t = Transition.from_mapping(row)
    text = row.get("result_text") if hasattr(row, "get") else None
    return t if text is None else replace(t, result=msgspec.json.decode(text))


def translate(exc: BaseException) -> LedgerError:
    """A database failure as a ledger error: a refusal keeps its meaning; anything else means the
    store is unavailable (the original error stays attached as ``__cause__``)."""
    refusal = refusal_from_db(exc)
    if refusal is not None:
        return ledger_error(refusal.error, refusal.message, refusal.extra)
    return LedgerStorageUnavailableError(f"the ledger database failed: {type(exc).__name__}: {exc}")


async def ensure_schema(conn: asyncpg.Connection, install: bool) -> None:
    """Make sure the hub's schema is there, as the module docstring says; raise LedgerSchemaError
    when it is not and will not be.

    A revision this release does not know is a later release's: its migrations keep the verbs this
    release calls (expand, then contract a release later), so the store uses it, as an older hub
    replica does during a rolling upgrade.
    """
    from mycelium.db import schema

    before = await schema.installed_revision(conn)
    if before is not None:
        known = schema.revisions()
        if before in known and before != schema.head():
            raise LedgerSchemaError(
                f"the database is at schema revision {before}, this release needs {schema.head()}: "
                "run `mycelium db upgrade --database-url <dsn>` (the hub's CLI: pip install "
                "'mycelium-hub[hub]'); the ledger never migrates a database itself"
            )
        return
    database, user = await conn.fetchrow("SELECT current_database(), current_user")
    if not install:
        raise LedgerSchemaError(
            f"database {database!r} has no hub schema (schema mycelium) and this store does not "
            "install it (install_schema is off): run `mycelium db upgrade --database-url <dsn>` "
            "(the hub's CLI: pip install 'mycelium-hub[hub]'), or let the store install it "
            f"(install_schema=True) as a user who may (connected as {user!r})"
        )
    try:
        revision = await schema.install(conn)
    except schema.SchemaRefused as exc:
        raise LedgerSchemaError(str(exc)) from exc
    except asyncpg.PostgresError as exc:  # the server refused a statement of the install
        raise LedgerSchemaError(
            f"installing the hub's schema failed ({type(exc).__name__}: {exc}); nothing was "
            "installed: fix the cause, then run `mycelium db upgrade --database-url <dsn>`"
        ) from exc
    log.warning(
        "database %r had no hub schema: it is at revision %s now, installed from this package as %r "
        "(schema mycelium, its roles and extensions; `mycelium db upgrade` carries it on)",
        database, revision, user,
    )


class PostgresLedgerStorage:
    """``PostgresLedgerStorage(dsn)``: transitions in the hub's database (schema ``mycelium``).

    ``install_schema`` (default True): on a database that never had the hub's schema, install it at
    the first connection; False refuses such a database instead. A database at an older revision is
    refused either way (``mycelium db upgrade`` moves it on); a later release's is used.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        role: str | None = "mycelium_app",
        command_timeout: float = 30.0,
        install_schema: bool = True,
    ) -> None:
        self.dsn = dsn
        self.install_schema = install_schema
        self._min, self._max, self._role, self._timeout = min_size, max_size, role, command_timeout
        self._schema_checked = False
        self._conns: dict[asyncio.AbstractEventLoop, ConnectionSet] = {}
        self._conn_locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._guard = threading.Lock()
        self._bridge = LoopThread("mycelium-ledger-pg")

    # -- connections -------------------------------------------------------------------------------

    async def _init(self, conn: asyncpg.Connection) -> None:
        for typename in ("json", "jsonb"):
            await conn.set_type_codec(
                typename, encoder=_encode_json, decoder=msgspec.json.decode, schema="pg_catalog"
            )
        if self._role:
            allowed = await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)"
                " AND pg_has_role(current_user, $1, 'MEMBER')",
                self._role,
            )
            if allowed:
                await conn.execute(f'SET ROLE "{self._role}"')

    async def _open(self) -> asyncpg.Connection:
        # no command_timeout: the connection set times statements out (one timer, not one per statement)
        conn = await asyncpg.connect(self.dsn)
        try:
            # the set times only the verbs: the set-up statements keep the store's timeout here
            async with asyncio.timeout(self._timeout):
                if not self._schema_checked:
                    # as the connecting user, before _init's SET ROLE (the app role installs nothing)
                    await ensure_schema(conn, self.install_schema)
                    self._schema_checked = True
                await self._init(conn)
        except BaseException:
            conn.terminate()
            raise
        return conn

    async def connections(self) -> ConnectionSet:
        """This event loop's connections (asyncpg connections belong to the loop that opened them)."""
        loop = asyncio.get_running_loop()
        conns = self._conns.get(loop)
        if conns is not None:
            return conns
        with self._guard:
            lock = self._conn_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            conns = self._conns.get(loop)
            if conns is None:
                conns = ConnectionSet(self._open, self._max, self._timeout)
                try:
                    await conns.fill(self._min)
                except LedgerError:
                    await conns.close()
                    raise
                except Exception as exc:
                    await conns.close()
                    raise translate(exc) from exc
                self._conns[loop] = conns
        return conns

    async def _row(self, verb: str, actor: Actor = NOBODY, /, **params: Any) -> Any:
        """One verb through the gateway's binding (named parameters, the declared actor), on this
        store's connections."""
        q = query(verb)
        args = bind(q, actor, False, params)
        conns = await self.connections()
        try:
            return await conns.fetchrow(q.sql, *args)
        except LedgerError:
            raise
        except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError,
                ConnectionError, TimeoutError) as exc:
            raise translate(exc) from exc

    async def _transition(self, verb: str, **params: Any) -> Transition:
        return as_transition(await self._row(verb, **params))

    # -- the verbs ---------------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest, *, with_row: bool = True) -> Claim:
        if with_row:
            row = await self._row("claim_transition", **request.named())
            return Claim(row["gate"], row["action"], row["repaired"], as_transition(row))
        # the row's 46 columns cost both sides more than the verb's own statements do; run needs none
        row = await self._row("claim_transition_lean", **request.named())
        found = row["transition"]
        return Claim(
            row["gate"], row["action"], row["repaired"], None if found is None else as_transition(found),
            row["fence"],
        )

    async def renew_lease(self, request_id: str, owner: str, fence: int, lease_ttl: float) -> Transition:
        return await self._transition("renew_lease", request_id=request_id, owner=owner, fence=fence,
                                      lease_ttl=lease_ttl)

    async def advance_boundary(self, request_id: str, owner: str, fence: int, boundary: str) -> Transition:
        return await self._transition("advance_boundary", request_id=request_id, owner=owner, fence=fence,
                                      boundary=boundary)

    async def record_external_operation(
        self, request_id: str, owner: str, fence: int, ref: str
    ) -> Transition:
        return await self._transition("record_external_operation", request_id=request_id, owner=owner,
                                      fence=fence, ref=ref)

    async def complete(self, request_id: str, owner: str, fence: int, result: Any) -> None:
        # the JSON text goes once: the database parses it into the jsonb and keeps it as the text
        text = None if result is None else _encode_json(result)
        await self._row("complete_transition_ack", request_id=request_id, owner=owner, fence=fence,
                        result=text)

    async def fail(
        self, request_id: str, owner: str, fence: int, error: str | None, after_effect: bool | None = None
    ) -> Transition:
        return await self._transition("fail_transition", request_id=request_id, owner=owner, fence=fence,
                                      error=error, after_effect=after_effect)

    async def mark_unknown(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._transition("mark_unknown", request_id=request_id, owner=owner, fence=fence,
                                      error=error)

    async def mark_blocked(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._transition("mark_blocked", request_id=request_id, owner=owner, fence=fence,
                                      error=error)

    async def apply_reconcile_result(
        self, request_id: str, fence: int, status: str, result: Any, by: str | None
    ) -> Transition:
        return await self._transition("apply_reconcile_result", request_id=request_id, fence=fence,
                                      status=status, result=result, by=by)

    async def release(
        self,
        request_id: str,
        verified: str,
        by: str,
        reason: str,
        result: Any = None,
        expected_fence: int | None = None,
    ) -> Transition:
        # the releaser is the actor: an operator's verb
        return as_transition(await self._row(
            "release_transition", Actor.declared(by, "operator"), request_id=request_id, verified=verified,
            by=by, reason=reason, result=result, expected_fence=expected_fence,
        ))

    async def get(self, request_id: str) -> Transition | None:
        row = await self._row("get_transition", request_id=request_id)
        return None if row is None else as_transition(row)

    # -- lifecycle ---------------------------------------------------------------------------------

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._bridge.run(coro)

    def submit_sync(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return self._bridge.submit(coro)

    async def aclose(self) -> None:
        """Close the connections of the running loop."""
        conns = self._conns.pop(asyncio.get_running_loop(), None)
        if conns is not None:
            await conns.close()

    def close(self) -> None:
        """Close the sync bridge's connections and stop its thread (other loops' close with them)."""
        if self._bridge.in_loop():
            return
        bridge_loop = self._bridge.started_loop
        if bridge_loop is not None and bridge_loop in self._conns:
            self._bridge.run(self.aclose())
        self._bridge.stop()
