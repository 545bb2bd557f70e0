"""Signed receipts written by the SDK, for the stores that are not the hub's database.

The hub's database chains receipts itself (sql/receipts.sql). With a memory, file or Redis store the
SDK does it: each terminal transition (completed, failed, marked UNKNOWN or BLOCKED, settled by a
reconciler) and each operator release appends one receipt to a JSON-lines file, in the format
``mycelium receipts export`` writes: the same fields, the same preimage and hash chain
(:func:`mycelium.ledger.receipts.receipt_hash`), an Ed25519 signature over the hash. So
``mycelium receipts verify --file receipts.jsonl --public-key receipts.jsonl.keys.json`` checks the
SDK's receipts and the hub's alike.

The key comes from the environment variable ``signing_key_env`` names: a PEM Ed25519 private key, or
any other secret, from which the key is derived (SHA-256 of a fixed label and the secret), so every
process given the same secret signs with the same key. The public keyring is written beside the file
(``<path>.keys.json``). Appends are serialised across the host's processes by an ``fcntl`` lock;
the SDK's receipts form one chain per agent (lane 0).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mycelium.ledger.errors import LedgerError
from mycelium.ledger.local import result_text
from mycelium.ledger.receipts import ReceiptKey, key_id_of, public_raw, receipt_hash
from mycelium.ledger.record import Claim, ClaimRequest, Transition
from mycelium.ledger.storage import LedgerStorage

T = TypeVar("T")
_DERIVE = b"mycelium-sdk-receipt-key/v1\n"


def key_from_secret(secret: str) -> ReceiptKey:
    """A signing key from a PEM Ed25519 private key, or derived from any other secret."""
    if "-----BEGIN" in secret:
        private = serialization.load_pem_private_key(secret.encode(), password=None)
        if not isinstance(private, Ed25519PrivateKey):
            raise ValueError("audit_receipt: the signing key is not an Ed25519 private key")
    else:
        private = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(_DERIVE + secret.encode()).digest())
    return ReceiptKey(key_id_of(public_raw(private.public_key())), private)


def key_from_env(name: str) -> ReceiptKey:
    secret = os.environ.get(name, "")
    if not secret.strip():
        raise ValueError(f"audit_receipt.signing_key_env: environment variable {name} is not set")
    return key_from_secret(secret)


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ReceiptLog:
    """``ReceiptLog(path, key)``: appends signed, chained receipts to the JSON-lines file ``path``."""

    def __init__(self, path: str | os.PathLike[str], key: ReceiptKey) -> None:
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread_lock = threading.Lock()
        self._offset = 0
        self._last: dict[str, list[Any]] = {}
        self._write_keyring()

    @property
    def keyring_path(self) -> Path:
        return self.path.with_name(self.path.name + ".keys.json")

    def _write_keyring(self) -> None:
        ring: dict[str, Any] = {"keys": []}
        if self.keyring_path.exists():
            ring = json.loads(self.keyring_path.read_text())
        if all(k["key_id"] != self.key.key_id for k in ring["keys"]):
            ring["keys"].append(
                {"key_id": self.key.key_id, "algorithm": "ed25519", "public_key": self.key.public_bytes.hex()}
            )
            tmp = self.keyring_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(ring, indent=2) + "\n")
            tmp.replace(self.keyring_path)

    def _heads(self, f: Any) -> dict[str, list[Any]]:
        """Each agent's last (seq, hash), read under the lock: what other processes appended since the
        last look is read from where that look ended."""
        f.seek(self._offset)
        for line in f.read().splitlines():
            if line.strip():
                r = json.loads(line)
                self._last[r["agent_id"]] = [r["seq"], r["hash"]]
        self._offset = f.tell()
        return self._last

    def append(self, row: Transition, *, released: bool = False) -> dict[str, Any]:
        """Write the receipt of ``row`` (a terminal transition, or a release of one) and return it."""
        record: dict[str, Any] = {
            "receipt_id": "rcpt-" + uuid.uuid4().hex[:16],
            "agent_id": row.agent_id,
            "lane": 0,
            "kind": "release" if released else row.kind,
            "action": row.tool,
            "request_id": row.request_id,
            "transition_key": row.transition_key,
            "side_effect_class": row.side_effect_class,
            "policy_version": row.policy_version,
            "inputs_hash": row.args_hash,
            "outputs_hash": None
            if row.result is None
            else hashlib.sha256(result_text(row.result).encode()).hexdigest(),
            "outcome": row.terminal_outcome,
            "boundary": row.side_effect_boundary,
            "fence": row.fence,
            "external_operation_ref": row.external_operation_ref,
            "error": row.error,
            "verified": row.operator_resolution if released else None,
            "resolved_by": row.resolved_by if released else None,
            "resolution_reason": row.resolution_reason if released else None,
            "started_at": _ts(row.started_at),
            "finished_at": _ts(row.finished_at),
            "recorded_at": _ts(datetime.now(UTC)),
        }
        with self._thread_lock, open(self.path, "a+", encoding="utf-8") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            seq, prev = self._heads(f).get(row.agent_id, [0, None])
            record["seq"] = seq + 1
            record["prev_hash"] = prev
            record["hash"] = receipt_hash(prev, record)
            record["key_id"] = self.key.key_id
            record["signature"] = self.key.sign(record["hash"]).hex()
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
            self._offset = f.tell()
            self._last[row.agent_id] = [record["seq"], record["hash"]]
        return record


class ReceiptingStorage:
    """A store whose terminal transitions and releases also go to a :class:`ReceiptLog`."""

    def __init__(self, inner: LedgerStorage, log: ReceiptLog) -> None:
        self.inner = inner
        self.receipts = log

    def _receipt(self, row: Transition, *, released: bool = False) -> Transition:
        try:
            self.receipts.append(row, released=released)
        except OSError as exc:
            raise LedgerError(f"the receipt of {row.request_id} could not be written: {exc}") from exc
        return row

    async def claim(self, request: ClaimRequest, *, with_row: bool = True) -> Claim:
        return await self.inner.claim(request, with_row=with_row)

    async def renew_lease(self, request_id: str, owner: str, fence: int, lease_ttl: float) -> Transition:
        return await self.inner.renew_lease(request_id, owner, fence, lease_ttl)

    async def advance_boundary(self, request_id: str, owner: str, fence: int, boundary: str) -> Transition:
        return await self.inner.advance_boundary(request_id, owner, fence, boundary)

    async def record_external_operation(
        self, request_id: str, owner: str, fence: int, ref: str
    ) -> Transition:
        return await self.inner.record_external_operation(request_id, owner, fence, ref)

    async def complete(self, request_id: str, owner: str, fence: int, result: Any) -> None:
        await self.inner.complete(request_id, owner, fence, result)
        row = await self.inner.get(request_id)
        if row is not None:
            self._receipt(row)

    async def fail(
        self, request_id: str, owner: str, fence: int, error: str | None, after_effect: bool | None = None
    ) -> Transition:
        return self._receipt(await self.inner.fail(request_id, owner, fence, error, after_effect))

    async def mark_unknown(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return self._receipt(await self.inner.mark_unknown(request_id, owner, fence, error))

    async def mark_blocked(self, request_id: str, owner: str, fence: int, error: str | None) -> Transition:
        return self._receipt(await self.inner.mark_blocked(request_id, owner, fence, error))

    async def apply_reconcile_result(
        self, request_id: str, fence: int, status: str, result: Any, by: str | None
    ) -> Transition:
        row = await self.inner.apply_reconcile_result(request_id, fence, status, result, by)
        return self._receipt(row) if status == "COMPLETED" else row

    async def release(
        self,
        request_id: str,
        verified: str,
        by: str,
        reason: str,
        result: Any = None,
        expected_fence: int | None = None,
    ) -> Transition:
        row = await self.inner.release(request_id, verified, by, reason, result, expected_fence)
        return self._receipt(row, released=True)

    async def get(self, request_id: str) -> Transition | None:
        return await self.inner.get(request_id)

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.inner.run_sync(coro)

    def submit_sync(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return self.inner.submit_sync(coro)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def close(self) -> None:
        self.inner.close()
