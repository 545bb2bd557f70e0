"""The conductor's pure core against upstream's worked examples: the summon grammar, the flow
model's validation, stances and edges, and the leximin pick."""

from __future__ import annotations

import pytest

from mycelium.engines import select
from mycelium.engines.conductor import (
    CannotRun,
    Reply,
    RunState,
    advance,
    bind_roles,
    choose_edge,
    neutralise,
    new_flow,
    split_directive,
    step_stance,
)
from mycelium.engines.flows import BUILT_IN, FlowError, Step, parse_protocol


def test_the_summon_grammar_splits_flow_members_and_ask():
    d = split_directive("@conductor gated @api @sec: ship the pricing page", "conductor")
    assert (d.word, d.members, d.ask) == ("gated", ("api", "sec"), "ship the pricing page")
    d = split_directive("@conductor review @a — tidy it up", "conductor")
    assert (d.word, d.members, d.ask) == ("review", ("a",), "tidy it up")
    assert split_directive("@conductor show gated", "conductor").arg == "gated"
    assert split_directive("@conductor list", "conductor").word == "list"


def test_roles_bind_in_order_and_too_few_members_are_named_in_the_answer():
    assert bind_roles(BUILT_IN["gated"], ["a", "b", "c"]) == {"proposer": "a", "guardian": "b"}
    with pytest.raises(CannotRun, match=r"proposer, guardian.*1 were named"):
        bind_roles(BUILT_IN["gated"], ["a"])


BAD_FLOWS = [
    ({"name": "x", "steps": []}, "at least one step"),
    ({"name": "x", "steps": [{"id": "a", "to": "each", "next": "b"}]}, "next names no step 'b'"),
    ({"name": "x", "steps": [{"id": "a", "to": "each", "next": "a"}]}, "at least one end step"),
    (
        {"name": "x", "steps": [{"id": "a", "to": "each", "next": "z"}, {"id": "z", "end": "done"}]},
        "end is one of",
    ),
    ({"name": "x", "steps": [{"id": "z", "end": "resolved", "to": "all"}]}, "neither addresses anyone"),
    ({"name": "x", "roles": ["each"], "steps": [{"id": "z", "end": "resolved"}]}, "name of a group"),
    ({"name": "x", "roles": ["a", "a"], "steps": [{"id": "z", "end": "resolved"}]}, "distinct"),
    (
        {"name": "x", "steps": [{"id": "a", "to": "ghost", "next": "z"}, {"id": "z", "end": "resolved"}]},
        "to is a role",
    ),
    (
        {
            "name": "x",
            "steps": [{"id": "a", "to": "all", "next": {"maybe": "z"}}, {"id": "z", "end": "resolved"}],
        },
        "branches on",
    ),
    ("name: [unclosed", "not readable YAML"),
    (
        {
            "name": "x",
            "steps": [{"id": "t", "kind": "tally", "next": {"grew": "z"}}, {"id": "z", "end": "resolved"}],
        },
        "reads of: points or of: terms",
    ),
    (
        {
            "name": "x",
            "steps": [
                {"id": "t", "kind": "tally", "of": "points", "to": "all", "next": {"grew": "z"}},
                {"id": "z", "end": "resolved"},
            ],
        },
        "asks nobody",
    ),
    (
        {
            "name": "x",
            "steps": [
                {"id": "t", "kind": "tally", "of": "points", "next": {"clear": "z"}},
                {"id": "z", "end": "resolved"},
            ],
        },
        "branches on grew, settled, empty, default only",
    ),
    (
        {"name": "x", "steps": [{"id": "l", "kind": "lock", "next": "z"}, {"id": "z", "end": "resolved"}]},
        "a lock step branches on",
    ),
    (
        {"name": "x", "steps": [{"id": "a", "to": "each", "rounds": 0, "next": "z"}, {"id": "z", "end": "resolved"}]},
        "rounds is a whole number, 1 or more",
    ),
    (
        {"name": "x", "steps": [{"id": "a", "to": "each", "rounds": "2", "next": "z"}, {"id": "z", "end": "resolved"}]},
        "rounds is a whole number, 1 or more",
    ),
    (
        {"name": "x", "steps": [{"id": "a", "to": "each", "rounds": 1.5, "next": "z"}, {"id": "z", "end": "resolved"}]},
        "rounds is a whole number, 1 or more",
    ),
    (
        {"name": "x", "steps": [{"id": "a", "to": "each", "rounds": True, "next": "z"}, {"id": "z", "end": "resolved"}]},
        "rounds is a whole number, 1 or more",
    ),
    (
        {
            "name": "x",
            "steps": [
                {"id": "t", "kind": "tally", "of": "points", "max_rounds": 0, "next": {"grew": "z"}},
                {"id": "z", "end": "resolved"},
            ],
        },
        "max_rounds is a whole number, 1 or more",
    ),
    (
        {
            "name": "x",
            "steps": [
                {"id": "a", "to": "all", "require": "pieces", "next": "z"},
                {"id": "z", "end": "resolved"},
            ],
        },
        "requires pieces collects them",
    ),
    (
        {
            "name": "x",
            "steps": [{"id": "a", "to": "all", "of": "terms", "next": "z"}, {"id": "z", "end": "resolved"}],
        },
        "belong to a tally step",
    ),
    (
        {
            "name": "x",
            "steps": [
                {"id": "a", "to": "all", "collect": "votes", "next": "z"},
                {"id": "z", "end": "resolved"},
            ],
        },
        "collect is one of",
    ),
    ({"name": "x", "roles": ["contested"], "steps": [{"id": "z", "end": "resolved"}]}, "name of a group"),
]


@pytest.mark.parametrize(("spec", "problem"), BAD_FLOWS)
def test_a_flow_that_cannot_run_is_refused_with_what_is_wrong(spec, problem):
    with pytest.raises(FlowError, match=problem):
        parse_protocol(spec)


def test_every_built_in_round_trips_through_its_yaml():
    for name, p in BUILT_IN.items():
        assert parse_protocol(p.yaml(), name) == p


def test_step_stance_and_edge_choice():
    assert step_stance(["silent", "silent"]) == "silent"
    assert step_stance(["accept", "reject"]) == "reject"
    assert step_stance(["accept", "accept"]) == "accept"
    assert step_stance(["accept", "silent"]) is None
    s = Step("s", to="all", next={"accept": "a", "reject": "r", "default": "d"})
    assert [choose_edge(s, x) for x in ("accept", "reject", None, "silent")] == ["a", "r", "d", "d"]
    assert choose_edge(Step("s", to="all", next={"accept": "a", "reject": "r"}), None) == "r"
    assert choose_edge(Step("s", to="all", next={"accept": "a"}), None) == "a"
    assert choose_edge(Step("s", to="all", next="n"), "reject") == "n"


def test_neutralise_breaks_mentions_and_markers():
    text = neutralise("hi @nova and @~sec [[mycelium: stance=accept]] mail a@b.c")
    assert "@nova" not in text and "@~sec" not in text and "[[mycelium" not in text and "a@b.c" in text


def test_select_picks_the_least_unhappy_option():
    ratings = {
        "s": {"A": 95, "B": 40, "C": 80},
        "f": {"A": 20, "B": 95, "C": 75},
        "l": {"A": 90, "B": 90, "C": 72},
    }
    got = select.pick(["A", "B", "C"], ["s", "f", "l"], ratings)
    assert (got.pick, got.outcome, got.lowest) == ("C", "feasible", 72)


def test_select_ties_missing_ratings_fixers_and_stuck():
    # tie on the lowest, broken by the second lowest; a full tie goes to the earlier letter
    assert select.pick(["A", "B"], ["x", "y"], {"x": {"A": 50, "B": 50}, "y": {"A": 60, "B": 90}}).pick == "B"
    assert select.pick(["A", "B"], ["x", "y"], {"x": {"A": 80, "B": 80}, "y": {"A": 80, "B": 80}}).pick == "A"
    # a missing rating counts 0 for the ranking but is recorded as missing
    got = select.pick(["A", "B"], ["x", "y"], {"x": {"A": 100, "B": 60}, "y": {"B": 60}})
    assert got.pick == "B" and got.missing == () and got.outcome == "infeasible"
    only_missing = select.pick(["A"], ["x", "y"], {"x": {"A": 90}})
    assert only_missing.outcome == "stuck" and only_missing.missing == ("y",)
    # the fixer is the lowest rater of the pick, the earlier in the cast on a tie
    tie = select.pick(["A"], ["x", "y", "z"], {"x": {"A": 50}, "y": {"A": 50}, "z": {"A": 90}})
    assert tie.least_happy == "x" and tie.outcome == "infeasible"
    assert select.pick(["A"], ["x"], {"x": {"A": 10}}, repairs_done=1).outcome == "infeasible"
    assert select.pick(["A"], ["x"], {"x": {"A": 10}}, repairs_done=2).outcome == "stuck"


def test_duplicate_suggestions_fold_and_credit_both_authors_and_the_scorecard_marks_the_pick():
    options, new = select.add_options(
        [], [("a", "Ship Friday"), ("b", "  ship   friday "), ("c", ""), ("d", "Wait")]
    )
    assert [(o.label, o.text, o.authors) for o in options] == [
        ("A", "Ship Friday", ("a", "b")),
        ("B", "Wait", ("d",)),
    ]
    assert new == ["A", "B"]
    card = select.scorecard(options, ["a", "b", "c"], {"a": {"A": 90, "B": 50}, "b": {"A": 80}}, "A")
    assert (
        "| **A** ◀ | 90 | 80 | ? |" in card and "| **B** | 50 | ? | ? |" in card and "The bar is 70." in card
    )
    many, _ = select.add_options([], [("x", f"option {i}") for i in range(30)])
    assert len(many) == 26


def test_a_run_that_reaches_the_step_cap_is_rejected_without_asking_again():
    flow = new_flow(BUILT_IN["gated"], ["p", "g"], "ask", "work/x", "X")
    state = RunState("check", 6, ("g",), True, {})
    move = advance(flow, state, [Reply("g", "no [[mycelium: stance=block]]", {}, "m1", 9)], False, "abc")
    assert move is not None and move.close == "rejected" and "step cap" in move.reason
    assert [p["event"] for p in move.posts] == ["edge", "close"]
