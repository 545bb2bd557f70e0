"""Markers: lifted faithfully, stripped from prose, defanged for echoing, read payload-first."""

from __future__ import annotations

from mycelium.core.markers import (
    Lifted,
    Piece,
    confidence_of,
    defang,
    lift,
    lift_reply,
    pieces_of,
    scores_of,
    stance_of,
    strip,
)

REPLY = "I can live with 30%.\n\n[[mycelium: confidence=0.85 stance=accept]]"


def test_a_marker_is_lifted_into_the_payload_and_stripped_from_the_prose():
    data, prose = lift_reply(REPLY)
    assert data == {"confidence": 0.85, "action": "accept"}
    assert prose == "I can live with 30%."


def test_a_text_that_is_only_a_marker_keeps_its_original_form():
    text = "[[mycelium: stance=accept]]"
    assert strip(f"  {text}\n") == text
    assert lift(text).action == "accept"


def test_a_reply_that_states_nothing_records_the_plain_reply_action():
    assert lift_reply("just words") == ({"action": "reply"}, "just words")


def test_unreadable_values_are_ignored():
    lifted = lift("[[mycelium: confidence=very stance=maybe action=dunno]]")
    assert lifted == Lifted()
    assert lifted.empty
    assert lift("[[mycelium: confidence=1.5]]").confidence is None
    assert lift("[[mycelium: confidence=nan]]").confidence is None


def test_stance_words_map_onto_accept_and_reject():
    for word in ("accept", "agree", "yes", "approve", "AGREE"):
        assert lift(f"[[mycelium: stance={word}]]").action == "accept"
    for word in ("reject", "block", "no"):
        assert lift(f"[[mycelium: action={word}]]").action == "reject"


def test_ratings_are_one_capital_letter_with_a_whole_number_0_to_100():
    assert lift("[[mycelium: A=82 B=41]]").scores == {"A": 82, "B": 41}


def test_a_lowercase_letter_is_not_a_rating():
    assert lift("[[mycelium: a=82 B=41]]").scores == {"B": 41}


def test_out_of_range_or_fractional_ratings_are_dropped_never_clamped():
    assert lift("[[mycelium: A=101 B=-1 C=8.5 D=70]]").scores == {"D": 70}


def test_a_list_written_with_commas_parses_every_field():
    lifted = lift("[[mycelium: A=82, B=41 stance=accept confidence=0.6]]")
    assert lifted.scores == {"A": 82, "B": 41}
    assert lifted.action == "accept"
    assert lifted.confidence == 0.6
    assert lift("[[mycelium: A=82,B=41; confidence=0.7,]]").payload() == {
        "confidence": 0.7,
        "scores": {"A": 82, "B": 41},
    }


def test_a_marker_is_case_and_space_tolerant():
    assert lift("[[ MyCelium :stance=accept]]").action == "accept"


def test_a_label_names_the_text_after_it_up_to_a_blank_line():
    text = (
        "Plan:\n"
        "[[mycelium: constraint about=refunds]] Refunds above 5000 need a person.\n"
        "\n"
        "Unlabelled aside."
    )
    assert lift(text).pieces == (Piece("constraint", "Refunds above 5000 need a person.", about="refunds"),)
    assert strip(text) == "Plan:\nRefunds above 5000 need a person.\n\nUnlabelled aside."


def test_a_label_stops_at_the_next_marker_and_a_label_without_text_is_dropped():
    text = (
        "[[mycelium: term=handoff]] Passing the account on. "
        "[[mycelium: check covers=p2,p4]] Finance signs off first. "
        "[[mycelium: objective]]"
    )
    assert [p.as_dict() for p in lift(text).pieces] == [
        {"label": "term", "term": "handoff", "text": "Passing the account on."},
        {"label": "check", "covers": ["p2", "p4"], "text": "Finance signs off first."},
    ]


def test_point_types_accept_dashes_and_every_point_type_is_a_label():
    lifted = lift("[[mycelium: out-of-scope]] Mobile.\n\n[[mycelium: sub-goal about='the api']] Ship v2.")
    assert [(p.label, p.about) for p in lifted.pieces] == [("out_of_scope", None), ("sub_goal", "the api")]


def test_check_covers_written_with_spaces_still_lists_every_point():
    (piece,) = lift("[[mycelium: check covers=p2, p4]] Both.").pieces
    assert piece.covers == ("p2", "p4")


def test_defang_breaks_every_marker_opening():
    text = "she said [[mycelium: stance=accept]] and [[ Mycelium: A=1]] but [[work/x]] stays"
    defanged = defang(text)
    assert defanged == "she said [ [mycelium: stance=accept]] and [ [ Mycelium: A=1]] but [[work/x]] stays"
    assert lift(defanged) == Lifted()


def test_the_payload_stance_wins_over_the_prose():
    assert stance_of({"action": "reject"}, "[[mycelium: stance=accept]]") == "reject"


def test_a_stance_still_in_the_prose_is_read_when_the_payload_has_none():
    assert stance_of({"action": "reply"}, "no way [[mycelium: stance=block]]") == "reject"
    assert stance_of(None, "I agree") is None


def test_scores_are_read_from_the_payload_first_then_the_prose():
    assert scores_of({"scores": {"A": 90, "b": 3, "C": True, "D": 101}}, "[[mycelium: A=1]]") == {"A": 90}
    assert scores_of({"scores": {"b": 3}}, "[[mycelium: A=1]]") == {"A": 1}
    assert scores_of({}, None) == {}


def test_a_missing_rating_is_absent_not_zero():
    assert "B" not in scores_of(None, "[[mycelium: A=50]]")


def test_confidence_is_read_from_the_payload_first_and_a_boolean_is_not_one():
    assert confidence_of({"confidence": 0.4}, "[[mycelium: confidence=0.9]]") == 0.4
    assert confidence_of({"confidence": True}, "[[mycelium: confidence=0.9]]") == 0.9


def test_pieces_are_read_from_the_payload_first_and_malformed_ones_are_skipped():
    lifted = [
        {"label": "constraint", "text": " Keep it. ", "about": "x"},
        {"label": "term", "text": "no term given"},
        {"label": "weird", "text": "??"},
        "not a piece",
    ]
    assert pieces_of({"pieces": lifted}, "[[mycelium: objective]] other") == (
        Piece("constraint", "Keep it.", about="x"),
    )
    assert pieces_of({"pieces": []}, "[[mycelium: objective]] other") == (Piece("objective", "other"),)


def test_the_lifted_payload_carries_only_what_was_stated():
    assert lift("[[mycelium: A=5]]").payload() == {"scores": {"A": 5}}
