"""The NEGMAS mechanism driven one injected move at a time, rebuilt from its move log."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mycelium.engines.aligner.mechanism import Mechanism, Replayer, Turn

ISSUES = {"price": ["10", "15", "20"], "vendor": ["acme", "globex"]}
A = {"price": "10", "vendor": "acme"}
B = {"price": "20", "vendor": "globex"}


def test_unanimity_ends_the_mechanism_at_once():
    m = Mechanism(ISSUES, ["alice", "bob", "carol"], 20)
    m.apply(Turn("alice", "offer", A))
    m.apply(Turn("bob", "accept"))
    assert m.ending() is None and m.next_handle() == "carol"  # two of three: still running
    m.apply(Turn("carol", "accept"))
    end = m.ending()
    assert end is not None and (end.outcome, end.agreement) == ("converged", A)
    assert m.steps == 3 and m.sao.state.step == 3


def test_the_step_cap_is_negmas_n_steps_and_no_turn_is_asked_after_it():
    m = Mechanism(ISSUES, ["alice", "bob"], 5)
    for i in range(5):
        assert m.ending() is None
        m.apply(Turn(m.next_handle(), "offer", A if i % 2 == 0 else B))
    end = m.ending()
    assert end is not None and end.outcome == "rejected" and end.agreement is None
    assert m.sao.state.timedout and m.steps == 5


def test_a_log_out_of_negmas_order_is_refused_not_forced():
    m = Mechanism(ISSUES, ["alice", "bob"], 5)
    with pytest.raises(ValueError, match="NEGMAS expects @alice"):
        m.apply(Turn("bob", "offer", B))


def test_the_replayer_gives_a_held_mechanism_out_once_and_only_for_its_run_as_it_stands():
    log = [Turn("alice", "offer", A), Turn("bob", "offer", B), Turn("alice", "offer", A)]
    r = Replayer()
    m = Mechanism.replay(ISSUES, ["alice", "bob"], log[:1], 20)
    r.keep("run", 4, m)  # the log up to trace turn 4 (an opening entry, then rounds)
    assert r.take("run", 6, ISSUES, ["alice", "bob"], 20) == (4, m)
    assert r.take("run", 6, ISSUES, ["alice", "bob"], 20) == (0, None)  # taken out: a failed move leaves nothing
    r.keep("run", 4, m)
    assert r.take("run", 3, ISSUES, ["alice", "bob"], 20) == (0, None)  # a log behind the one held
    r.keep("run", 4, m)
    assert r.take("run", 6, ISSUES, ["alice", "bob"], 30) == (0, None)  # another step cap: another mechanism
    r.keep("run", 4, m)
    assert r.take("other", 6, ISSUES, ["alice", "bob"], 20) == (0, None)
    # moved on by the moves recorded after its turn, it is where a replay of the whole log is
    turn, held = r.take("run", 6, ISSUES, ["alice", "bob"], 20)
    assert (turn, held) == (4, m)
    for t in log[1:]:
        held.apply(t)
    fresh = Mechanism.replay(ISSUES, ["alice", "bob"], log, 20)
    assert (held.standing(), held.next_handle(), held.steps) == (fresh.standing(), fresh.next_handle(), 3)
    small = Replayer(1)
    small.keep("a", 1, m)
    small.keep("b", 1, fresh)
    assert small.take("a", 1, ISSUES, ["alice", "bob"], 20) == (0, None)  # the oldest gave way


def test_negmas_is_imported_only_when_a_negotiation_moves():
    code = (
        "import sys, mycelium.workers.engines, mycelium.engines.aligner.negotiation, mycelium.cli.main; "
        "print('negmas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_with_three_members_the_least_satisfied_with_the_standing_offer_answers_first():
    asks = {"alice": A, "bob": {"price": "15", "vendor": "acme"}, "carol": B}
    m = Mechanism(ISSUES, ["alice", "bob", "carol"], 20, asks)
    assert m.next_handle() == "alice"  # nothing stands yet: NEGMAS's order
    m.apply(Turn("alice", "offer", A))
    # carol asked the opposite of everything (satisfaction 0), bob is half way: carol first
    assert m.next_handle() == "carol"
    m.apply(Turn("carol", "accept"))
    assert m.next_handle() == "bob"  # carol accepted; bob is the only one left to ask
    m.apply(Turn("bob", "accept"))
    assert m.ending() is not None and m.ending().agreement == A and m.steps == 3
    # the order is a function of the log: a replay reaches the same turn
    log = [Turn("alice", "offer", A)]
    assert Mechanism.replay(ISSUES, ["alice", "bob", "carol"], log, 20, asks).next_handle() == "carol"
    # without asks (or with two members) NEGMAS's own round robin is kept
    assert Mechanism.replay(ISSUES, ["alice", "bob", "carol"], log, 20).next_handle() == "bob"
