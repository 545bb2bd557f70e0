"""One handle normalisation, everywhere a handle is compared, and what a valid handle looks like."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mycelium.core.handles import (
    HANDLE_PATTERN,
    MAX_LENGTH,
    PROBLEMS,
    HandleError,
    handle_problem,
    is_valid_handle,
    normalize_handle,
    parse_handle,
    same_handle,
)

CONTRACT = json.loads(
    (Path(__file__).resolve().parents[2] / "contracts" / "mentions.json").read_text(encoding="utf-8")
)
CASES = CONTRACT["handle"]["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: repr(c["input"]))
def test_every_spelling_in_the_table_normalises_and_validates_as_frozen(case):
    assert normalize_handle(case["input"]) == case["normalised"]
    assert handle_problem(case["input"]) == case["problem"]


def test_the_spellings_of_one_member_are_one_handle():
    for spelling in ("Alice", "@alice", " alice ", "@ALICE ", "alice#a8f3", "@Alice#s1"):
        assert normalize_handle(spelling) == "alice"
        assert same_handle(spelling, "alice")


def test_a_session_suffix_names_the_member_not_the_session():
    assert same_handle("api#a8f3", "api#ffff")
    assert normalize_handle("api#a8f3") == "api"


def test_a_blank_handle_names_nobody():
    assert not same_handle("", "")
    assert not same_handle("@", " @ ")
    assert handle_problem("  @ ") == "blank"


def test_a_refused_handle_raises_a_value_error_naming_the_problem():
    with pytest.raises(HandleError) as refused:
        parse_handle("   ")
    assert isinstance(refused.value, ValueError)
    assert refused.value.code == "blank"
    assert PROBLEMS["blank"] in str(refused.value)

    with pytest.raises(ValueError, match="only a-z, 0-9"):
        parse_handle("john.doe")
    with pytest.raises(ValueError, match="at most 64"):
        parse_handle("x" * (MAX_LENGTH + 1))
    with pytest.raises(ValueError, match="start with"):
        parse_handle("-dash")


def test_a_valid_handle_parses_to_its_normal_form():
    assert parse_handle("  @Release-Agent#9f ") == "release-agent"


def test_lowercasing_touches_ascii_letters_only_so_no_locale_can_change_a_handle():
    assert normalize_handle("ÄBC") == "Äbc"
    assert not is_valid_handle("ÄBC")


def test_the_pattern_agrees_with_the_validator_on_every_table_case():
    pattern = re.compile(HANDLE_PATTERN)
    for case in CASES:
        assert bool(pattern.match(case["normalised"])) == (case["problem"] is None), case


def test_a_dot_is_not_a_handle_character_because_it_ends_a_sentence():
    assert handle_problem("john.doe") == "bad_character"
