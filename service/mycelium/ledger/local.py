"""Stores on this machine: ``InMemoryLedgerStorage`` (one process) and ``FileLedgerStorage`` (one host).

Both run the verbs of :mod:`mycelium.ledger.rows` under their lock, so a claim's gate and its write
are one step: a thread lock in memory; on disk an ``fcntl`` lock per row shard, taken by every process
on the host, with each row written to a temporary file, flushed to disk and renamed over the old one
(a crash leaves the old row or the new one, never half of either). The clock is this host's.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from mycelium.ledger import rows
from mycelium.ledger.bridge import LoopThread
from mycelium.ledger.errors import LedgerError, LedgerStorageUnavailableError
from mycelium.ledger.record import Claim, ClaimRequest, Transition

T = TypeVar("T")

_encode = msgspec.json.Encoder(enc_hook=str).encode
_decode = msgspec.json.decode


def result_text(value: Any) -> str:
    """A result as JSON text, keys in the order the body returned them."""
    return _encode(value).decode()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _RowStore:
    """The verbs of the protocol, over ``_locked(request_id, step)``: a subclass runs ``step(get, put)``
    with the row's lock held and returns what it returns."""

    _bridge: LoopThread

    async def _locked(self, request_id: str, step: Callable[[rows.Get, rows.Put], T]) -> T:
        raise NotImplementedError

    async def claim(self, request: ClaimRequest, *, with_row: bool = True) -> Claim:
        answer = await self._locked(
            request.request_id, lambda get, put: rows.claim(get, put, request, now_ms())
        )
        return rows.to_claim(answer, with_row)

    async def _row(self, request_id: str, verb: Callable[..., rows.Row], *args: Any) -> Transition:
        row = await self._locked(request_id, lambda get, put: verb(get, put, request_id, *args, now_ms()))
        return rows.to_transition(row)

    async def renew_lease(self, request_id: str, owner: str, fence: int, lease_ttl: float) -> Transition:
        return await self._row(request_id, rows.renew_lease, owner, fence, lease_ttl)

    async def advance_boundary(self, request_id: str, owner: str, fence: int, boundary: str) -> Transition:
        return await self._row(request_id, rows.advance_boundary, owner, fence, boundary)

    async def record_external_operation(
        self, request_id: str, owner: str, fence: int, ref: str
    ) -> Transition:
        return await self._row(request_id, rows.record_external_operation, owner, fence, ref)

    async def complete(self, request_id: str, owner: str, fence: int, result: Any) -> None:
        text = result_text(result)
        await self._locked(
            request_id, lambda get, put: rows.complete(get, put, request_id, owner, fence, text, now_ms())
        )

    async def fail(
        self, request_id: str, owner: str, fence: int, error: str | None, after_effect: bool | None = None
    ) -> Transition:
        return await self._row(request_id, rows.fail, owner, fence, error, after_effect)

    async def mark_unknown(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._row(request_id, rows.mark_outcome, owner, fence, "UNKNOWN", error)

    async def mark_blocked(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return await self._row(request_id, rows.mark_outcome, owner, fence, "BLOCKED", error)

    async def apply_reconcile_result(
        self, request_id: str, fence: int, status: str, result: Any, by: str | None
    ) -> Transition:
        return await self._row(
            request_id, rows.apply_reconcile_result, fence, status, result_text(result), by
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
        return await self._row(
            request_id, rows.release, verified, by, reason, result_text(result), expected_fence
        )

    async def get(self, request_id: str) -> Transition | None:
        row = await self._locked(request_id, lambda get, put: get(request_id))
        return None if row is None else rows.to_transition(row)

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._bridge.run(coro)

    def submit_sync(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return self._bridge.submit(coro)

    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        if not self._bridge.in_loop():
            self._bridge.stop()


class InMemoryLedgerStorage(_RowStore):
    """Transitions in this process's memory: for unit tests and a single process. Another process (or
    a restart) does not see them, so it protects this process only."""

    def __init__(self) -> None:
        self._rows: dict[str, rows.Row] = {}
        self._lock = threading.Lock()
        self._bridge = LoopThread("mycelium-ledger-memory")

    async def _locked(self, request_id: str, step: Callable[[rows.Get, rows.Put], T]) -> T:
        with self._lock:
            return step(self._rows.get, self._rows.__setitem__)

    def rows(self) -> list[Transition]:
        """Every stored transition (a snapshot)."""
        with self._lock:
            return [rows.to_transition(r) for r in self._rows.values()]


class FileLedgerStorage(_RowStore):
    """``FileLedgerStorage(path)``: transitions as files in the folder ``path`` (made if missing), shared
    by every process on this host. ``fsync=False`` skips flushing to disk (a power cut may then lose
    the last writes; a process crash still cannot)."""

    SHARDS = 256

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        try:
            (self.path / "locks").mkdir(parents=True, exist_ok=True)
            (self.path / "rows").mkdir(exist_ok=True)
        except OSError as exc:
            raise LedgerStorageUnavailableError(f"cannot use {self.path} as a ledger folder: {exc}") from exc
        self._threads = [threading.Lock() for _ in range(self.SHARDS)]
        self._bridge = LoopThread("mycelium-ledger-file")

    def _name(self, request_id: str) -> tuple[int, Path]:
        digest = hashlib.sha256(request_id.encode()).hexdigest()
        return int(digest[:2], 16), self.path / "rows" / f"{digest}.json"

    @contextmanager
    def _lock(self, shard: int) -> Iterator[None]:
        with self._threads[shard]:  # fcntl locks are per process: threads queue here first
            fd = os.open(self.path / "locks" / f"{shard:02x}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _read(self, file: Path) -> rows.Row | None:
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return None
        return _decode(data)

    def _write(self, file: Path, row: rows.Row) -> None:
        tmp = file.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, _encode(row))
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, file)
        if self.fsync:
            dfd = os.open(file.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def _step(self, request_id: str, step: Callable[[rows.Get, rows.Put], T]) -> T:
        shard, file = self._name(request_id)
        try:
            with self._lock(shard):
                return step(lambda rid: self._read(file), lambda rid, row: self._write(file, row))
        except LedgerError:
            raise
        except (OSError, msgspec.DecodeError) as exc:
            raise LedgerStorageUnavailableError(f"the ledger folder {self.path} failed: {exc}") from exc

    async def _locked(self, request_id: str, step: Callable[[rows.Get, rows.Put], T]) -> T:
        # the lock may be held by another process for a while: wait for it off the event loop
        return await asyncio.to_thread(self._step, request_id, step)
