"""``RedisLedgerStorage(url)``: transitions in Redis, one key per transition (``{prefix}{request_id}``,
a JSON object), for teams already running Redis.

Every verb is one Lua script (:mod:`mycelium.ledger.redis_script`) run by the server: the gate and
the write it decides happen in one atomic step, on the Redis server's clock. Nothing is read in
Python and then written. The keys carry no TTL (a transition is never evicted into "never seen").
A failure to reach the server is a :class:`LedgerStorageUnavailableError`; a command is not retried
by the client (a claim whose answer was lost is decided again by the next claim, from the row).

Redis must keep what it acknowledges: run it with ``appendonly yes`` and ``appendfsync always`` (or
accept losing the last second's transitions on a crash, which can run a side effect twice). The store
warns once when the server says append-only persistence is off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from mycelium.ledger import gate as g
from mycelium.ledger import redis_script, rows
from mycelium.ledger.bridge import LoopThread
from mycelium.ledger.errors import LedgerStorageUnavailableError, ledger_error
from mycelium.ledger.local import result_text
from mycelium.ledger.record import Claim, ClaimRequest, Transition

T = TypeVar("T")
log = logging.getLogger("mycelium.ledger.redis")


class RedisLedgerStorage:
    """``RedisLedgerStorage("redis://host:6379/0")``; ``prefix`` names the keys (default
    ``mycelium:transition:``); ``timeout`` bounds each command in seconds."""

    def __init__(self, url: str, *, prefix: str = "mycelium:transition:", timeout: float = 10.0) -> None:
        try:
            import redis.asyncio  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "RedisLedgerStorage needs the redis client: pip install 'mycelium-hub[redis]'"
            ) from exc
        self.url, self.prefix, self.timeout = url, prefix, timeout
        self._clients: dict[asyncio.AbstractEventLoop, tuple[Any, dict[str, Any]]] = {}
        self._guard = threading.Lock()
        self._checked = False
        self._bridge = LoopThread("mycelium-ledger-redis")

    # -- the server --------------------------------------------------------------------------------

    def _client(self) -> tuple[Any, dict[str, Any]]:
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            import redis.asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            client = aioredis.Redis.from_url(
                self.url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                decode_responses=True,
            )
            scripts = {verb: client.register_script(redis_script.script(verb)) for verb in redis_script.VERBS}
            with self._guard:
                found = self._clients.setdefault(loop, (client, scripts))
        return found

    async def _check_persistence(self, client: Any) -> None:
        self._checked = True
        try:
            setting = await client.config_get("appendonly")
        except Exception:  # CONFIG is often disabled on managed servers: nothing to learn
            return
        if setting.get("appendonly") == "no":
            log.warning(
                "Redis at %s runs without append-only persistence: a crash can lose acknowledged "
                "transitions and let a side effect run twice (set appendonly yes, appendfsync always)",
                self.url,
            )

    async def call(self, verb: str, request_id: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one verb's script on the row of ``request_id``; raise its refusal as a ledger error."""
        import redis.exceptions

        client, scripts = self._client()
        payload = json.dumps({k: v for k, v in {"request_id": request_id, **args}.items() if v is not None})
        try:
            if not self._checked:
                await self._check_persistence(client)
            text = await scripts[verb](keys=[self.prefix + request_id], args=[payload])
        except (redis.exceptions.RedisError, OSError) as exc:
            raise LedgerStorageUnavailableError(
                f"the ledger's Redis failed: {type(exc).__name__}: {exc}"
            ) from exc
        answer = json.loads(text)
        if "refuse" in answer:
            row = answer.get("row")
            details = {}
            if row:
                details = {
                    k: row.get(k) for k in ("terminal_outcome", "side_effect_boundary", "owner", "fence")
                }
                details["request_id"] = request_id
            raise ledger_error(answer["refuse"], answer["message"], details)
        return answer

    async def _row(self, script_name: str, request_id: str, /, **args: Any) -> Transition:
        return rows.to_transition((await self.call(script_name, request_id, args))["row"])

    # -- the verbs ---------------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest, *, with_row: bool = True) -> Claim:
        cls = g.side_effect_class(request.side_effect_class)
        if cls is None:
            raise ledger_error(
                "invalid_side_effect_class", f"unknown side_effect_class {request.side_effect_class!r}"
            )
        if not (request.request_id or "").strip():
            raise ledger_error("missing_request_id", "a claim names its request id")
        if not (request.owner or "").strip():
            raise ledger_error("missing_owner", "a claim names its owner (host:pid of the worker)")
        args = {
            "kind": request.kind,
            "transition_key": request.transition_key,
            "tool": request.tool,
            "idempotency_key": request.idempotency_key,
            "agent_id": request.agent_id or "",
            "policy_version": request.policy_version or "",
            "scope_text": json.dumps(request.scope or {}),
            "dispatch_id": request.dispatch_id,
            "args_hash": request.args_hash,
            "side_effect_class": cls,
            "spendability": request.spendability or g.default_spendability(cls),
            "retry_permission": request.retry_permission or g.default_retry_permission(cls),
            "capability": request.capability
            or g.capability_floor(cls, request.key_param is not None, request.has_reconciler),
            "key_param": request.key_param,
            "incoming_key": request.incoming_key,
            "key_ttl_ms": rows.ms(request.key_ttl) if request.key_ttl is not None else None,
            "owner": request.owner,
            "lease_ttl": request.lease_ttl,
            "has_reconciler": request.has_reconciler,
            "reconciled": request.reconciled,
            "defer_read_unknown": request.defer_read_unknown,
            "presumed_dead_after": request.presumed_dead_after,
        }
        answer = await self.call("claim", request.request_id, args)
        return rows.to_claim((answer["gate"], answer["action"], answer["repaired"], answer["row"]), with_row)

    async def renew_lease(self, request_id: str, owner: str, fence: int, lease_ttl: float) -> Transition:
        if lease_ttl is None or lease_ttl <= 0:
            raise ledger_error("invalid_lease_ttl", "a lease is renewed for a positive number of seconds")
        return await self._row("renew_lease", request_id, owner=owner, fence=fence, lease_ttl=lease_ttl)

    async def advance_boundary(self, request_id: str, owner: str, fence: int, boundary: str) -> Transition:
        if boundary not in g.BOUNDARY_RANK:
            raise ledger_error("invalid_boundary", f"unknown side_effect_boundary {boundary!r}")
        return await self._row("advance_boundary", request_id, owner=owner, fence=fence, boundary=boundary)

    async def record_external_operation(
        self, request_id: str, owner: str, fence: int, ref: str
    ) -> Transition:
        if not ref or not ref.strip() or any(ord(c) < 32 or ord(c) == 127 for c in ref):
            raise ledger_error("invalid_external_ref", "an external operation ref is a non-blank single line")
        return await self._row("record_external_operation", request_id, owner=owner, fence=fence, ref=ref)

    async def complete(self, request_id: str, owner: str, fence: int, result: Any) -> None:
        await self.call(
            "complete", request_id, {"owner": owner, "fence": fence, "result_text": result_text(result)}
        )

    async def fail(
        self, request_id: str, owner: str, fence: int, error: str | None, after_effect: bool | None = None
    ) -> Transition:
        return await self._row(
            "fail",
            request_id,
            owner=owner,
            fence=fence,
            error=None if error is None else error[:8000],
            after_effect=after_effect,
        )

    async def _mark(
        self, request_id: str, owner: str, fence: int, outcome: str, error: str | None
    ) -> Transition:
        verb = "mark_blocked" if outcome == "BLOCKED" else "mark_unknown"
        return await self._row(
            "mark",
            request_id,
            owner=owner,
            fence=fence,
            outcome=outcome,
            verb=verb,
            error=None if error is None else error[:8000],
        )

    async def mark_unknown(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._mark(request_id, owner, fence, "UNKNOWN", error)

    async def mark_blocked(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._mark(request_id, owner, fence, "BLOCKED", error)

    async def apply_reconcile_result(
        self, request_id: str, fence: int, status: str, result: Any, by: str | None
    ) -> Transition:
        if status not in ("COMPLETED", "NOT_EXECUTED", "UNKNOWN"):
            raise ledger_error(
                "invalid_reconcile_status",
                f"a reconcile result is COMPLETED, NOT_EXECUTED or UNKNOWN, not {status!r}",
            )
        return await self._row(
            "apply_reconcile_result",
            request_id,
            fence=fence,
            status=status,
            result_text=result_text(result),
            by=by,
        )

    async def release(
        self,
        request_id: str,
        verified: str,
        by: str,
        reason: str,
        result: Any = None,
        expected_fence: int | None = None,
    ) -> Transition:
        if verified not in ("completed", "not_executed"):
            raise ledger_error(
                "invalid_release",
                f"a release states what was verified: completed or not_executed, not {verified!r}",
            )
        if not (by or "").strip() or not (reason or "").strip():
            raise ledger_error(
                "release_unattributed", "a release names who verified it (by) and why (reason)"
            )
        return await self._row(
            "release",
            request_id,
            verified=verified,
            by=by,
            reason=reason,
            result_text=result_text(result),
            expected_fence=expected_fence,
        )

    async def get(self, request_id: str) -> Transition | None:
        row = (await self.call("get", request_id, {})).get("row")
        return None if not row else rows.to_transition(row)

    async def gates(self, cases: list[list[Any]]) -> list[str]:
        """The script's gate for each case (the gate's ten inputs): for the contract test."""
        return await self.call("enumerate", "-", {"cases": cases})  # type: ignore[return-value]

    # -- lifecycle ---------------------------------------------------------------------------------

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._bridge.run(coro)

    def submit_sync(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return self._bridge.submit(coro)

    async def aclose(self) -> None:
        found = self._clients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found[0].aclose()

    def close(self) -> None:
        if self._bridge.in_loop():
            return
        loop = self._bridge.started_loop
        if loop is not None and loop in self._clients:
            self._bridge.run(self.aclose())
        self._bridge.stop()
