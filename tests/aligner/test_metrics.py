"""The quality metrics and satisfaction against worked examples of research hub.md §11.3."""

from __future__ import annotations

from mycelium.engines.aligner.metrics import Revision, grounded, quality, revision_cause, satisfaction


def test_agents_who_firm_up_on_the_agreed_side_agree_genuinely():
    # a: 0.6 → 0.8, b: 0.5 → 0.9: MPC 0.85 (> 0.5), both moved up → GAR 1; both moved more than
    # 0.05 with nothing grounded → social compliance for both → SCR 1 → provenance weight 0
    first, last = {"a": 0.6, "b": 0.5}, {"a": 0.8, "b": 0.9}
    causes = {h: revision_cause(Revision(), first[h], last[h], []) for h in "ab"}
    assert causes == {"a": "social_compliance", "b": "social_compliance"}
    assert quality(["a", "b"], first, last, causes) == {
        "mpc": 0.85, "gar": 1.0, "scr": 1.0, "provenance_weight": 0.0, "participants": 2
    }


def test_a_member_moving_against_the_group_is_not_genuine_and_a_grounded_move_is_an_argument():
    # MPC = (0.9 + 0.8 + 0.4) / 3 = 0.7; c fell from 0.6 to 0.4 against it → GAR 2/3
    first, last = {"a": 0.5, "b": 0.8, "c": 0.6}, {"a": 0.9, "b": 0.8, "c": 0.4}
    causes = {
        "a": revision_cause(Revision(addresses=frozenset({"e1", "e2"})), 0.5, 0.9, ["e1"]),  # 1/2 ≥ 0.4
        "b": revision_cause(Revision(), 0.8, 0.8, []),  # did not move: no revision
        "c": revision_cause(Revision(accepted=True, deferred_to="a"), 0.6, 0.4, []),
    }
    assert causes == {"a": "grounded_argument", "b": None, "c": "social_compliance"}
    q = quality(["a", "b", "c"], first, last, causes)
    assert q == {"mpc": 0.7, "gar": 0.6667, "scr": 0.5, "provenance_weight": 0.3333, "participants": 3}


def test_at_exactly_one_half_only_those_who_did_not_move_count():
    q = quality(["a", "b"], {"a": 0.5, "b": 0.3}, {"a": 0.5, "b": 0.5})
    assert q is not None and q["mpc"] == 0.5 and q["gar"] == 0.5


def test_too_few_reporters_have_no_metrics():
    assert quality(["a", "b"], {"a": 0.5}, {"a": 0.7}) is None
    assert quality(["a", "b", "c", "d"], {}, {"a": 0.7, "b": 0.6}) is None  # 2 < 4 - 1
    assert quality(["a", "b", "c"], {}, {"a": 0.7, "b": 0.6}) is not None  # one silent member is allowed


def test_a_reported_cause_wins_and_grounding_needs_forty_percent():
    assert revision_cause(Revision(reported="new_evidence"), 0.5, 0.9, []) == "new_evidence"
    assert revision_cause(Revision(reported="made_up"), 0.5, 0.52, []) is None
    assert grounded({"e1", "e2", "e3"}, {"e1"}) is False  # 1/3 < 0.40
    assert grounded({"e1", "e2"}, {"e1"}) is True
    assert grounded(set(), {"e1"}) is False


def test_satisfaction_is_the_mean_distance_from_the_opening_ask_on_each_grid():
    issues = {"price": ["10", "15", "20", "25", "30"], "vendor": ["acme", "globex"]}
    asks = {"alice": {"price": "10", "vendor": "acme"}, "bob": {"price": "30", "vendor": "globex"}}
    got = satisfaction(issues, asks, {"price": "20", "vendor": "acme"})
    # alice: price 1 - 2/4 = 0.5, vendor 1 → 0.75; bob: price 0.5, vendor 1 - 1/1 = 0 → 0.25
    assert got == {"alice": 0.75, "bob": 0.25}
    assert satisfaction(issues, {"carol": {}}, {"price": "20", "vendor": "acme"}) == {}
