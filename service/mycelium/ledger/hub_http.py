"""The ledger through the hub's HTTP API (``/api/transitions/…``), for agents without database access.

The hub calls the same SQL verbs, so decisions and refusals are identical to the direct store's. A
result travels as its JSON text (``result_text``) and comes back as the hub kept it, so a redispatch
returns it exactly as the first caller had it. A hub of a release before ``result_text`` refuses the
field (422, naming it, nothing written): the store then completes with the result as a value, as that
hub expects, and keeps doing so for that hub (its row keeps the result as jsonb, so a redispatch gets
the same value, an object's keys in jsonb's order).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from mycelium.ledger.bridge import LoopThread
from mycelium.ledger.errors import LedgerError, LedgerStorageUnavailableError, ledger_error
from mycelium.ledger.record import Claim, ClaimRequest, Transition

T = TypeVar("T")


class HubLedgerStorage:
    """``HubLedgerStorage("http://127.0.0.1:8000")``: transitions via a running hub."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._result_text = True  # False once the hub refused result_text (a release before it)
        self._bridge = LoopThread("mycelium-ledger-http")

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = httpx.AsyncClient(base_url=self.url, timeout=self._timeout)
        return client

    async def _send(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = await self._client().request(method, "/api/transitions" + path, json=body)
        except httpx.HTTPError as exc:
            raise LedgerStorageUnavailableError(f"the hub at {self.url} is unreachable: {exc}") from exc
        if response.status_code >= 500:
            raise LedgerStorageUnavailableError(
                f"the hub at {self.url} failed ({response.status_code}): {response.text[:500]}"
            )
        try:
            data = response.json()
        except ValueError as exc:
            raise LedgerStorageUnavailableError(
                f"the hub answered {response.status_code} without JSON"
            ) from exc
        if response.status_code >= 400:
            data = dict(data) if isinstance(data, dict) else {"message": str(data)}
            code = str(data.pop("error", "refused"))
            raise ledger_error(code, str(data.pop("message", code)), data)
        return data

    async def _fenced(self, path: str, request_id: str, owner: str, fence: int, **extra: Any) -> Transition:
        body = {"request_id": request_id, "owner": owner, "fence": fence, **extra}
        return Transition.from_mapping(await self._send("POST", path, body))

    async def claim(self, request: ClaimRequest, *, with_row: bool = True) -> Claim:
        data = await self._send("POST", "/claim", request.to_json())
        return Claim(
            data["gate"], data["action"], data["repaired"], Transition.from_mapping(data["transition"])
        )

    async def renew_lease(self, request_id: str, owner: str, fence: int, lease_ttl: float) -> Transition:
        return await self._fenced("/renew", request_id, owner, fence, lease_ttl=lease_ttl)

    async def advance_boundary(self, request_id: str, owner: str, fence: int, boundary: str) -> Transition:
        return await self._fenced("/boundary", request_id, owner, fence, boundary=boundary)

    async def record_external_operation(
        self, request_id: str, owner: str, fence: int, ref: str
    ) -> Transition:
        return await self._fenced("/external-operation", request_id, owner, fence, ref=ref)

    async def complete(self, request_id: str, owner: str, fence: int, result: Any) -> None:
        if self._result_text:
            text = _encode(result).decode()
            try:
                await self._fenced("/complete", request_id, owner, fence, result_text=text)
                return
            except LedgerError as exc:
                if not refuses_field(exc, "result_text"):
                    raise
            self._result_text = False  # refused before anything was written: the older hub's way
        await self._fenced("/complete", request_id, owner, fence, result=jsonable(result))

    async def fail(
        self, request_id: str, owner: str, fence: int, error: str | None, after_effect: bool | None = None
    ) -> Transition:
        return await self._fenced("/fail", request_id, owner, fence, error=error, after_effect=after_effect)

    async def mark_unknown(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._fenced("/unknown", request_id, owner, fence, error=error)

    async def mark_blocked(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._fenced("/blocked", request_id, owner, fence, error=error)

    async def apply_reconcile_result(
        self, request_id: str, fence: int, status: str, result: Any, by: str | None
    ) -> Transition:
        body = {
            "request_id": request_id,
            "fence": fence,
            "status": status,
            "result": jsonable(result),
            "by": by,
        }
        return Transition.from_mapping(await self._send("POST", "/reconcile", body))

    async def release(
        self,
        request_id: str,
        verified: str,
        by: str,
        reason: str,
        result: Any = None,
        expected_fence: int | None = None,
    ) -> Transition:
        body = {
            "request_id": request_id,
            "verified": verified,
            "by": by,
            "reason": reason,
            "result": jsonable(result),
            "expected_fence": expected_fence,
        }
        return Transition.from_mapping(await self._send("POST", "/release", body))

    async def get(self, request_id: str) -> Transition | None:
        try:
            return Transition.from_mapping(await self._send("GET", "/" + quote(request_id, safe="")))
        except LedgerError as exc:
            if exc.details.get("error") == "transition_not_found":
                return None
            raise

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._bridge.run(coro)

    def submit_sync(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return self._bridge.submit(coro)

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        if self._bridge.in_loop():
            return
        loop = self._bridge.started_loop
        if loop is not None and loop in self._clients:
            self._bridge.run(self.aclose())
        self._bridge.stop()


_encode = msgspec.json.Encoder(enc_hook=str).encode


def refuses_field(exc: LedgerError, name: str) -> bool:
    """Whether a refusal is the request validation of a hub that does not know field ``name``: its
    body models forbid unknown fields (422 invalid_request, a problem keyed by the field saying extra
    inputs are not permitted), not a hub that knows the field and refuses its value (say, too long)."""
    if exc.details.get("error") != "invalid_request":
        return False
    problems = exc.details.get("problems")
    return isinstance(problems, list) and any(
        isinstance(p, dict) and p.get("key") == name and "extra" in str(p.get("message", "")).lower()
        for p in problems
    )


def jsonable(value: Any) -> Any:
    """A JSON-ready copy (unknown objects as text), as the direct store's codec stores them."""
    return msgspec.json.decode(_encode(value))
