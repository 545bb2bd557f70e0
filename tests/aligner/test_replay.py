"""A move made from the mechanism a worker holds, moved on by the moves recorded after its turn, is
the move a worker replaying the whole log makes (no database: the run row and its log as read)."""

from __future__ import annotations

from typing import Any

from mycelium.engines.aligner import negotiation
from mycelium.engines.aligner.mechanism import Mechanism, Replayer, Turn
from mycelium.engines.conductor import Reply

ISSUES = {"price": ["10", "20", "30"], "vendor": ["acme", "globex"]}
A = {"price": "10", "vendor": "acme"}
B = {"price": "30", "vendor": "globex"}
ASKS = {"ann": A, "bob": B}
LOG: list[dict[str, Any]] = [
    {"step": "opening", "to": ["ann", "bob"], "issues": ISSUES, "asks": ASKS, "turn": 1},
    {"step": "round", "round": 1, "who": "ann", "action": "offer", "offer": A, "how": "marker", "turn": 2},
    {"step": "round", "round": 2, "who": "bob", "action": "offer", "offer": B, "how": "marker", "turn": 3},
    {"step": "round", "round": 3, "who": "ann", "action": "offer", "offer": A, "how": "marker", "turn": 4},
]


def run_row() -> dict[str, Any]:
    flow = negotiation.new_flow(["ann", "bob"], "the price and the vendor", "work/deal", "the deal", n_steps=20)
    pending = {"issues": ISSUES, "asks": ASKS, "settled": {}, "topic": "price-vendor",
               "last_line": {"ann": A, "bob": B}}
    return {"room": "atlas", "id": 7, "short_id": "r7", "engine": "aligner", "flow": flow, "pending": pending,
            "turn": 4, "step": "round", "waiting": ["bob"], "asked_position": 40, "expired": False}


async def no_prior(_topic: str) -> None:
    return None


REPLY = [Reply("bob", "[[mycelium: accept]]", {}, "00000000-0000-0000-0000-000000000001", 41)]


async def test_a_held_mechanism_moved_on_by_the_later_moves_makes_the_whole_log_s_move():
    whole = negotiation.Negotiation(run_row(), None, no_prior, Replayer())
    assert (whole.after, whole.held) == (0, None)
    by_replay = await whole.advance(REPLY, LOG, None)

    replayer = Replayer()
    # this worker committed the move of trace turn 2; another worker made turns 3 and 4 since
    replayer.keep(("atlas", 7), 2, Mechanism.replay(ISSUES, ["ann", "bob"], [Turn("ann", "offer", A)], 20, ASKS))
    held = negotiation.Negotiation(run_row(), None, no_prior, replayer)
    assert held.after == 2 and held.held is not None
    by_held = await held.advance(REPLY, [e for e in LOG if e["turn"] > 2], None)

    assert by_held is not None and by_replay is not None
    assert (by_held.trace, by_held.posts, by_held.pending, by_held.close, by_held.assignments) == (
        by_replay.trace, by_replay.posts, by_replay.pending, by_replay.close, by_replay.assignments)
    assert by_held.close == "converged" and by_held.assignments == A
    held.kept(by_held)  # a closed run keeps nothing
    assert replayer.take(("atlas", 7), 5, ISSUES, ["ann", "bob"], 20, ASKS) == (0, None)


async def test_the_mechanism_is_held_at_the_turn_the_committed_move_reached_and_put_back_when_nothing_moved():
    replayer = Replayer()
    n = negotiation.Negotiation(run_row(), None, no_prior, replayer)
    move = await n.advance([Reply("bob", "[[mycelium: offer price=20 vendor=globex]]", {}, "r", 41)], LOG, None)
    assert move is not None and move.close is None and move.waiting == ["ann"]
    n.kept(move)
    turn, m = replayer.take(("atlas", 7), 5, ISSUES, ["ann", "bob"], 20, ASKS)
    assert turn == 5 and m is not None and m.steps == 4 and m.next_handle() == "ann"

    replayer.keep(("atlas", 7), 5, m)
    row = {**run_row(), "turn": 5, "waiting": ["ann"]}
    waiting = negotiation.Negotiation(row, None, no_prior, replayer)
    assert await waiting.advance([], [], None) is None  # ann has not answered yet
    waiting.kept(None)
    assert replayer.take(("atlas", 7), 5, ISSUES, ["ann", "bob"], 20, ASKS) == (5, m)
