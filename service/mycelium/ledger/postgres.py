"""The ledger on the hub's PostgreSQL, directly: an asyncpg pool calling the SQL verbs.

One pool per event loop (asyncpg connections belong to the loop that made them): async tools use
their own loop's pool; sync tools go through a private loop thread and its pool.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import asyncpg
import msgspec

from mycelium.db.queries import q
from mycelium.errors import refusal_from_db
from mycelium.ledger.bridge import LoopThread
from mycelium.ledger.errors import LedgerError, LedgerStorageUnavailableError, ledger_error
from mycelium.ledger.record import Claim, ClaimRequest, Transition

T = TypeVar("T")

_encode = msgspec.json.Encoder(enc_hook=str).encode


def _encode_json(value: Any) -> str:
    return _encode(value).decode()


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """A released connection keeps its session: the store sets nothing on it but codecs and its role,
    the verbs' settings are transaction-local, and an open transaction is still rolled back by the
    pool. asyncpg's default reset would add a round trip to every verb call."""


def translate(exc: BaseException) -> LedgerError:
    """A database failure as a ledger error: a refusal keeps its meaning; anything else means the
    store is unavailable (the original error stays attached as ``__cause__``)."""
    refusal = refusal_from_db(exc)
    if refusal is not None:
        return ledger_error(refusal.error, refusal.message, refusal.extra)
    return LedgerStorageUnavailableError(f"the ledger database failed: {type(exc).__name__}: {exc}")


class PostgresLedgerStorage:
    """``PostgresLedgerStorage(dsn)``: transitions in the hub's database (schema ``mycelium``)."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        role: str | None = "mycelium_app",
        command_timeout: float = 30.0,
    ) -> None:
        self.dsn = dsn
        self._min, self._max, self._role, self._timeout = min_size, max_size, role, command_timeout
        self._pools: dict[asyncio.AbstractEventLoop, asyncpg.Pool] = {}
        self._pool_locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
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

    async def pool(self) -> asyncpg.Pool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None:
            return pool
        with self._guard:
            lock = self._pool_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            pool = self._pools.get(loop)
            if pool is None:
                try:
                    pool = await asyncpg.create_pool(
                        self.dsn,
                        min_size=self._min,
                        max_size=self._max,
                        init=self._init,
                        reset=_keep_session,
                        command_timeout=self._timeout,
                    )
                except Exception as exc:
                    raise translate(exc) from exc
                assert pool is not None
                self._pools[loop] = pool
        return pool

    async def _row(self, query: str, *args: Any) -> Any:
        pool = await self.pool()
        try:
            return await pool.fetchrow(q(query), *args)
        except LedgerError:
            raise
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, ConnectionError, TimeoutError) as exc:
            raise translate(exc) from exc

    async def _transition(self, query: str, *args: Any) -> Transition:
        return Transition.from_mapping(await self._row(query, *args))

    # -- the verbs ---------------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest) -> Claim:
        row = await self._row("claim_transition", *request.params())
        return Claim(row["gate"], row["action"], row["repaired"], row)

    async def renew_lease(self, request_id: str, owner: str, fence: int, lease_ttl: float) -> Transition:
        return await self._transition("renew_lease", request_id, owner, fence, lease_ttl)

    async def advance_boundary(self, request_id: str, owner: str, fence: int, boundary: str) -> Transition:
        return await self._transition("advance_boundary", request_id, owner, fence, boundary)

    async def record_external_operation(
        self, request_id: str, owner: str, fence: int, ref: str
    ) -> Transition:
        return await self._transition("record_external_operation", request_id, owner, fence, ref)

    async def complete(self, request_id: str, owner: str, fence: int, result: Any) -> None:
        await self._row("complete_transition_ack", request_id, owner, fence, result)

    async def fail(
        self, request_id: str, owner: str, fence: int, error: str | None, after_effect: bool | None = None
    ) -> Transition:
        return await self._transition("fail_transition", request_id, owner, fence, error, after_effect)

    async def mark_unknown(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._transition("mark_unknown", request_id, owner, fence, error)

    async def mark_blocked(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._transition("mark_blocked", request_id, owner, fence, error)

    async def apply_reconcile_result(
        self, request_id: str, fence: int, status: str, result: Any, by: str | None
    ) -> Transition:
        return await self._transition("apply_reconcile_result", request_id, fence, status, result, by)

    async def release(
        self,
        request_id: str,
        verified: str,
        by: str,
        reason: str,
        result: Any = None,
        expected_fence: int | None = None,
    ) -> Transition:
        return await self._transition(
            "release_transition", request_id, verified, by, reason, result, expected_fence
        )

    async def get(self, request_id: str) -> Transition | None:
        row = await self._row("get_transition", request_id)
        return None if row is None else Transition.from_mapping(row)

    # -- lifecycle ---------------------------------------------------------------------------------

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._bridge.run(coro)

    def submit_sync(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return self._bridge.submit(coro)

    async def aclose(self) -> None:
        """Close the pool of the running loop."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    def close(self) -> None:
        """Close the sync bridge's pool and stop its thread (pools of other loops close with them)."""
        if self._bridge.in_loop():
            return
        bridge_loop = self._bridge.started_loop
        if bridge_loop is not None and bridge_loop in self._pools:
            self._bridge.run(self.aclose())
        self._bridge.stop()
