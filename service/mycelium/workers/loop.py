"""What a background loop is, and what the supervisor records about each one.

A loop's body runs for as long as the loop runs: it calls :meth:`LoopContext.succeeded` after each
unit of work (a batch, a sweep, an idle look) and raises when something goes wrong; the supervisor
records the error, backs off and starts the body again. A ``once`` loop returns after its one
success. A loop with a ``lead`` lock runs in one process at a time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from mycelium.verbs.actor import HUB_PRINCIPAL
from mycelium.verbs.gateway import Verbs, verbs_of, verbs_on

if TYPE_CHECKING:
    import asyncpg

    from mycelium.hub import Hub

State = Literal["starting", "running", "waiting", "failing", "done", "stopped"]

#: A loop is stuck when it has neither succeeded nor checked for leadership for this many intervals.
STUCK_INTERVALS = 5
#: Backoff after consecutive failures: 1 s, 2 s, 4 s … at most this many seconds.
BACKOFF_CAP_SECONDS = 30.0


@dataclass(frozen=True)
class Loop:
    name: str
    body: Callable[[LoopContext], Awaitable[None]]
    interval: float
    """The longest a healthy loop goes between two successes (seconds)."""
    lead: str | None = None
    """The advisory lock that makes this loop run in one process at a time (None: every process runs it)."""
    connection: bool = False
    """The loop gets a connection of its own (a leader always has one: it holds the lock)."""
    once: bool = False
    """Done after one success."""


def now() -> datetime:
    return datetime.now(UTC)


def backoff_seconds(failures: int) -> float:
    """How long to wait before the next try after ``failures`` consecutive failures (±10 %)."""
    base = min(BACKOFF_CAP_SECONDS, 2.0 ** max(failures - 1, 0))
    return base * random.uniform(0.9, 1.1)


@dataclass
class LoopStatus:
    """What the supervisor knows about one loop in this process."""

    name: str
    interval: float
    state: State = "starting"
    leader: bool = False
    backend_pid: int | None = None
    last_success_at: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None
    warning: str | None = None
    """A problem of a loop that still runs (e.g. mirror files that cannot be written): the
    process reports itself degraded while it is set."""
    failures: int = 0
    _progress: float = field(default_factory=time.monotonic)
    on_change: Callable[[], None] = field(default=lambda: None, repr=False)

    def _shape(self) -> tuple[str, bool, bool, str | None]:
        return self.state, self.leader, self.failures > 0, self.warning

    def _change(self, before: tuple[str, bool, bool, str | None]) -> None:
        """Tell the supervisor when the loop's state, leadership, health or warning moved (it beats
        at once)."""
        if self._shape() != before:
            self.on_change()

    def succeeded(self) -> None:
        before = self._shape()
        self.last_success_at = now()
        self._progress = time.monotonic()
        self.failures = 0
        self.state = "running"
        self._change(before)

    def failed(self, exc: BaseException) -> None:
        before = self._shape()
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:2000]
        self.last_error_at = now()
        self.leader, self.backend_pid = False, None
        self.state = "failing"
        self._change(before)

    def warn(self, warning: str | None) -> None:
        """Set (or, with None, clear) the loop's warning."""
        before = self._shape()
        self.warning = warning
        self._change(before)

    def waiting(self) -> None:
        """Looked for leadership and another process has it: alive, not working."""
        before = self._shape()
        self._progress = time.monotonic()
        self.state = "waiting"
        self._change(before)

    def started(self, leader: bool, backend_pid: int | None) -> None:
        """The body starts (as the leader, if the loop has a lock); a loop that failed stays failing
        until its first success."""
        before = self._shape()
        self._progress = time.monotonic()
        self.leader, self.backend_pid = leader, backend_pid
        if self.failures == 0:
            self.state = "running"
        self._change(before)

    def finished(self) -> None:
        before = self._shape()
        self.leader, self.backend_pid = False, None
        self.state = "done"
        self._change(before)

    def stopped(self) -> None:
        self.leader, self.backend_pid = False, None
        self.state = "stopped"

    @property
    def stuck(self) -> bool:
        if self.state in ("done", "stopped"):
            return False
        return time.monotonic() - self._progress > STUCK_INTERVALS * self.interval

    def report(self) -> dict[str, Any]:
        return {
            "loop": self.name,
            "state": self.state,
            "leader": self.leader,
            "backend_pid": self.backend_pid,
            "interval_seconds": self.interval,
            "last_success_at": self.last_success_at.isoformat() if self.last_success_at else None,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at.isoformat() if self.last_error_at else None,
            "warning": self.warning,
            "failures": self.failures,
            "stuck": self.stuck,
        }


@dataclass
class LoopContext:
    """What a loop's body gets: the hub, its own status, and its connection if it has one."""

    hub: Hub
    status: LoopStatus
    conn: asyncpg.Connection | None = None

    def succeeded(self) -> None:
        self.status.succeeded()

    @property
    def verbs(self) -> Verbs:
        """The verbs on the loop's own connection if it has one (a leader's lock is held there),
        else on the hub's pool; as the hub itself (an operator: it sees every room)."""
        if self.conn is None:
            return verbs_of(self.hub, HUB_PRINCIPAL)
        return verbs_on(self.conn, HUB_PRINCIPAL)
