"""The negotiation's mechanism: a NEGMAS ``SAOMechanism`` driven one external move at a time.

Each participant is a placeholder negotiator that NEGMAS never asks: every turn's response is
injected (``step(action={id: SAOResponse})``), read from the member's reply in the thread. With
``one_offer_per_step`` each step is exactly one member's turn, so the step cap is NEGMAS's
``n_steps``, and NEGMAS alone says when the negotiation ends (everyone accepts the standing offer,
someone ends it, or the steps run out). Its state is a function of the moves the database
recorded: any worker rebuilds it from them (:meth:`Mechanism.replay`) and reaches the same state; a
worker keeps the one it moved last (:class:`Replayer`) only to spare itself the replay.

NEGMAS is imported here, and only when a negotiation is moved, so nothing else pays for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

N_STEPS = 20


@dataclass(frozen=True)
class Turn:
    """One member's recorded move: ``accept`` the standing offer, or ``offer`` (a counter, which
    rejects the standing one) with the whole offer ``{issue: option}``."""

    handle: str
    action: str
    offer: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Ending:
    outcome: str  # converged | rejected
    agreement: dict[str, str] | None
    reason: str


def warm() -> None:
    """Import NEGMAS's SAO modules (half a second), e.g. on a thread while the opening round waits,
    so the first move does not pay for it."""
    import negmas.gb.common
    import negmas.outcomes
    import negmas.sao  # noqa: F401


def _placeholder_class() -> type:
    from negmas.sao import SAONegotiator

    class Placeholder(SAONegotiator):  # type: ignore[misc]
        """A member of the thread: its moves are injected, it never decides one itself."""

        def propose(self, state: Any, dest: str | None = None) -> Any:
            raise RuntimeError(f"{self.name}'s move comes from the thread, not from NEGMAS")

        def respond(self, state: Any, source: str | None = None) -> Any:
            raise RuntimeError(f"{self.name}'s move comes from the thread, not from NEGMAS")

    return Placeholder


class Mechanism:
    """A SAOMechanism over ``issues`` ({name: options}, in order) with one placeholder per member
    of ``cast`` (in order: the first proposes first).

    With ``asks`` (each member's opening ask) and three or more members, the turn order is upstream's:
    once an offer stands, the next to answer is the member least satisfied with it (relative to its
    opening ask) among those who have not accepted it yet (ties: NEGMAS's own order). Only whose turn
    comes next changes; NEGMAS's termination is untouched (everyone must still accept the offer)."""

    def __init__(
        self,
        issues: Mapping[str, Sequence[str]],
        cast: Sequence[str],
        n_steps: int = N_STEPS,
        asks: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        from negmas.outcomes import make_issue
        from negmas.sao import SAOMechanism

        self.names = list(issues)
        self.sao = SAOMechanism(
            issues=[make_issue(list(opts), name) for name, opts in issues.items()],
            n_steps=n_steps,
            one_offer_per_step=True,
        )
        placeholder = _placeholder_class()
        self.ids: dict[str, str] = {}
        for h in cast:
            neg = placeholder(name=h)
            self.sao.add(neg)
            self.ids[h] = neg.id
        self.handles = {v: k for k, v in self.ids.items()}
        self.steps = 0
        self.issues = {k: list(v) for k, v in issues.items()}
        self.asks = {h: dict(a) for h, a in (asks or {}).items()}
        self.accepted: set[str] = set()  # who accepted the standing offer since it was made

    # -- reading -----------------------------------------------------------------------------

    def offer_of(self, outcome: Sequence[Any] | None) -> dict[str, str] | None:
        return None if outcome is None else dict(zip(self.names, (str(v) for v in outcome), strict=True))

    @property
    def running(self) -> bool:
        return bool(self.sao.state.running) or not self.sao.state.started

    def next_handle(self) -> str:
        """Whose turn it is (NEGMAS's order)."""
        return self.handles[self.sao.next_negotitor_ids()[0]]

    def standing(self) -> dict[str, str] | None:
        return self.offer_of(self.sao.state.current_offer)

    def standing_by(self) -> str | None:
        proposer = self.sao.state.current_proposer
        return self.handles.get(proposer) if proposer else None

    def ending(self) -> Ending | None:
        s = self.sao.state
        if not s.started or s.running:
            return None
        if s.agreement is not None:
            return Ending("converged", self.offer_of(s.agreement), "everyone accepted the standing offer")
        if s.broken:
            return Ending("rejected", None, "a member ended the negotiation")
        if s.timedout:
            return Ending("rejected", None, f"no agreement within NEGMAS's {self.sao.n_steps} steps")
        detail = getattr(s, "error_details", "") or "the mechanism stopped"
        return Ending("rejected", None, str(detail))

    # -- moving ------------------------------------------------------------------------------

    def apply(self, turn: Turn) -> None:
        """Feed one recorded move to the mechanism (it must be that member's turn)."""
        from negmas.gb.common import ResponseType
        from negmas.sao import SAOResponse

        expected = self.next_handle()
        if turn.handle != expected:
            raise ValueError(f"the move log has @{turn.handle} where NEGMAS expects @{expected}")
        if turn.action == "accept":
            response = SAOResponse(ResponseType.ACCEPT_OFFER, self.sao.state.current_offer)
        elif turn.action == "end":
            response = SAOResponse(ResponseType.END_NEGOTIATION, None)
        else:
            assert turn.offer is not None
            response = SAOResponse(ResponseType.REJECT_OFFER, tuple(turn.offer[n] for n in self.names))
        self.sao.step(action={self.ids[turn.handle]: response})
        self.steps += 1
        if turn.action == "accept":
            self.accepted.add(turn.handle)
        else:
            self.accepted = set()
        if self.sao.state.running and self.sao.relative_time >= 1.0:
            # NEGMAS's time is up: its next step ends the negotiation without asking anyone, so
            # nobody is asked a question whose answer NEGMAS would not use.
            self.sao.step()
        elif self.sao.state.running:
            self._least_satisfied_next()

    def _satisfaction(self, handle: str, offer: Mapping[str, str]) -> float:
        ask = self.asks.get(handle, {})
        scores = [
            1 - abs(opts.index(ask[n]) - opts.index(offer[n])) / max(1, len(opts) - 1)
            for n, opts in self.issues.items()
            if ask.get(n) in opts and offer.get(n) in opts
        ]
        return sum(scores) / len(scores) if scores else 1.0

    def _least_satisfied_next(self) -> None:
        standing, by = self.standing(), self.standing_by()
        if not self.asks or len(self.ids) < 3 or standing is None:
            return
        order = [self.handles[i] for i in self.sao.following_negotiators()]
        waiting = [h for h in order if h != by and h not in self.accepted]
        if not waiting:
            return
        least = min(waiting, key=lambda h: (self._satisfaction(h, standing), order.index(h)))
        index = list(self.ids).index(least)
        self.sao._last_checked_negotiator = (index - 1) % len(self.ids)

    @classmethod
    def replay(
        cls,
        issues: Mapping[str, Sequence[str]],
        cast: Sequence[str],
        turns: Sequence[Turn],
        n_steps: int = N_STEPS,
        asks: Mapping[str, Mapping[str, str]] | None = None,
    ) -> Mechanism:
        """A fresh mechanism brought to the state the recorded moves left it in."""
        m = cls(issues, cast, n_steps, asks)
        for t in turns:
            m.apply(t)
        return m


def _shape(
    issues: Mapping[str, Sequence[str]],
    cast: Sequence[str],
    n_steps: int,
    asks: Mapping[str, Mapping[str, str]] | None,
) -> tuple[Any, ...]:
    return (
        tuple((k, tuple(v)) for k, v in issues.items()),
        tuple(cast),
        n_steps,
        tuple(sorted((h, tuple(sorted(a.items()))) for h, a in (asks or {}).items())),
    )


class Replayer:
    """The mechanisms this process moved last, by run, each at the trace turn its last committed
    move left the run at.

    The trace is append-only, so a mechanism brought to the log up to a turn stays right for that
    prefix: a move on a run held here reads only the moves recorded after that turn (none, unless
    another worker moved the run meanwhile) and costs NEGMAS only those. A run not held (a fresh
    process, a run moved here from elsewhere, a move that was not committed) reads and replays its
    whole log. A mechanism's state is a function of its issues, cast, step cap and move log alone,
    so the cache never changes an outcome, only its cost."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._held: dict[Any, tuple[int, tuple[Any, ...], Mechanism]] = {}

    def take(
        self,
        key: Any,
        turn: int,
        issues: Mapping[str, Sequence[str]],
        cast: Sequence[str],
        n_steps: int = N_STEPS,
        asks: Mapping[str, Mapping[str, str]] | None = None,
    ) -> tuple[int, Mechanism | None]:
        """The trace turn after which the log is to be read for a run at ``turn``, and the
        mechanism held at it; ``(0, None)``: read and replay the whole log. What is held is taken
        out, so a move that is not committed leaves nothing behind (:meth:`keep` puts it back)."""
        held = self._held.pop(key, None)
        if held is None or held[0] > turn or held[1] != _shape(issues, cast, n_steps, asks):
            return 0, None
        return held[0], held[2]

    def keep(self, key: Any, turn: int, m: Mechanism) -> None:
        """Hold ``m`` as the state of the run's log up to trace turn ``turn``, committed."""
        self._held[key] = (turn, _shape(m.issues, list(m.ids), m.sao.n_steps, m.asks), m)
        while len(self._held) > self.size:
            self._held.pop(next(iter(self._held)))
