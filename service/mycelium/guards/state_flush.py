"""``StateFlush``: keep an agent run's in-progress state when the run ends early.

``with flush.run(run_id) as run:`` opens a ``Session`` and a run handle; ``run.record({...})`` merges
state (``config.prepare_messages`` records the messages itself). On leaving, the state is written
with status ``completed`` (``flush_on_complete``), ``aborted`` on cancellation (``cancel``) or
``error`` on an exception (``error``), as ``flush_on`` allows; ``flush.resume(run_id)`` returns it.
Storages: in memory, or a JSON file (one host; written under an exclusive lock, replaced atomically).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mycelium.guards.session import Session

FLUSH_REASONS = ("cancel", "disconnect", "error")


class StateFlushError(Exception):
    """No state for the run, or the state cannot be read or written."""


@dataclass(frozen=True)
class StateSnapshot:
    run_id: str
    status: str  # in-progress | completed | aborted | error
    state: dict[str, Any]
    updated_at: float = field(default_factory=time.time)
    reason: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "state": self.state,
                "updated_at": self.updated_at, "reason": self.reason, "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StateSnapshot:
        return cls(str(data["run_id"]), str(data["status"]), dict(data.get("state") or {}),
                   float(data.get("updated_at", 0.0)), data.get("reason"), data.get("error"))


class InMemoryStateFlushStorage:
    def __init__(self) -> None:
        self._snapshots: dict[str, StateSnapshot] = {}

    def get(self, run_id: str) -> StateSnapshot | None:
        return self._snapshots.get(run_id)

    def set(self, snapshot: StateSnapshot) -> None:
        self._snapshots[snapshot.run_id] = snapshot


class FileStateFlushStorage:
    """Snapshots by run id in one JSON file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StateFlushError(f"cannot read {self.path}: {exc}") from exc
        if not isinstance(data, dict):
            raise StateFlushError(f"{self.path} does not hold a mapping of run ids")
        return data

    def get(self, run_id: str) -> StateSnapshot | None:
        raw = self._read().get(run_id)
        return None if raw is None else StateSnapshot.from_dict(raw)

    def set(self, snapshot: StateSnapshot) -> None:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            data[snapshot.run_id] = snapshot.to_dict()
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
            os.replace(tmp, self.path)


_active: ContextVar[FlushRun | None] = ContextVar("mycelium_flush_run", default=None)


def get_active_flush_run() -> FlushRun | None:
    return _active.get()


class FlushRun:
    """The handle of one run: ``record`` state, ``flush`` / ``complete`` / ``disconnect`` it."""

    def __init__(self, flush: StateFlush, run_id: str) -> None:
        self._flush = flush
        self.run_id = run_id
        self._state: dict[str, Any] = {}
        self.flushed = False

    @property
    def state(self) -> dict[str, Any]:
        return dict(self._state)

    def record(self, patch: dict[str, Any]) -> None:
        self._state.update(patch)

    def flush(self, status: str, *, reason: str | None = None, error: str | None = None) -> StateSnapshot:
        snapshot = StateSnapshot(self.run_id, status, dict(self._state), reason=reason, error=error)
        self._flush.storage.set(snapshot)
        self.flushed = True
        return snapshot

    def complete(self) -> StateSnapshot:
        return self.flush("completed")

    def disconnect(self) -> StateSnapshot:
        if "disconnect" not in self._flush.flush_on:
            return self.flush("completed")
        return self.flush("aborted", reason="disconnect")


class StateFlush:
    def __init__(self, storage: Any = None, *, flush_on: list[str] | None = None,
                 flush_on_complete: bool = True) -> None:
        unknown = set(flush_on or ()) - set(FLUSH_REASONS)
        if unknown:
            raise ValueError(f"flush_on: unknown reason(s) {', '.join(sorted(unknown))} "
                             f"(known: {', '.join(FLUSH_REASONS)})")
        self.storage = storage if storage is not None else InMemoryStateFlushStorage()
        self.flush_on = frozenset(FLUSH_REASONS if flush_on is None else flush_on)
        self.flush_on_complete = flush_on_complete

    def load(self, run_id: str) -> StateSnapshot | None:
        return self.storage.get(run_id)

    def resume(self, run_id: str) -> dict[str, Any]:
        snapshot = self.load(run_id)
        if snapshot is None:
            raise StateFlushError(f"no flushed state for run {run_id!r}")
        return dict(snapshot.state)

    def run(self, run_id: str, *, use_session: bool = True) -> FlushContext:
        return FlushContext(self, run_id, use_session=use_session)


class FlushContext:
    """``with`` / ``async with``: a Session (optional) and the active run handle."""

    def __init__(self, flush: StateFlush, run_id: str, *, use_session: bool) -> None:
        self._flush = flush
        self._run_id = run_id
        self._session = Session() if use_session else None
        self._run: FlushRun | None = None
        self._token: Token[FlushRun | None] | None = None

    def __enter__(self) -> FlushRun:
        if self._session is not None:
            self._session.__enter__()
        self._run = FlushRun(self._flush, self._run_id)
        self._token = _active.set(self._run)
        return self._run

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        run, flush = self._run, self._flush
        try:
            if run is not None and not run.flushed:
                if exc is None:
                    if flush.flush_on_complete:
                        run.complete()
                elif isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
                    if "cancel" in flush.flush_on:
                        run.flush("aborted", reason="cancel", error=str(exc) or type(exc).__name__)
                elif "error" in flush.flush_on:
                    run.flush("error", reason="error", error=f"{type(exc).__name__}: {exc}")
        finally:
            if self._token is not None:
                _active.reset(self._token)
                self._token = None
            if self._session is not None:
                self._session.__exit__(exc_type, exc, tb)
        return False

    async def __aenter__(self) -> FlushRun:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> bool:
        return self.__exit__(*exc)
