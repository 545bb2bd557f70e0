"""``@handle`` wakes, ``@~handle`` only names; e-mails are neither."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mycelium.core.mentions import (
    Mention,
    loud_mentions,
    mentioned_handles,
    mentions_handle,
    parse_mentions,
    silent_mentions,
)

CONTRACT = json.loads(
    (Path(__file__).resolve().parents[2] / "contracts" / "mentions.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("case", CONTRACT["cases"], ids=lambda c: c["text"])
def test_each_contract_case_parses_as_frozen(case):
    assert list(loud_mentions(case["text"])) == case["mentions"]
    assert list(silent_mentions(case["text"])) == case["silent"]


@pytest.mark.parametrize("case", CONTRACT["wake_cases"], ids=lambda c: f"{c['handle']!r} in {c['text']!r}")
def test_each_wake_case_wakes_as_frozen(case):
    assert mentions_handle(case["text"], case["handle"]) is case["wakes"]


@pytest.mark.parametrize("case", CONTRACT["cases"] + CONTRACT["wake_cases"], ids=lambda c: c["text"])
def test_the_await_text_test_agrees_with_the_parser(case):
    text = case["text"]
    candidates = {"alice", "bob", "a", "b", "c", "release-agent", "build_bot", "9z", "bar", "x", "code"}
    for handle in candidates:
        assert mentions_handle(text, handle) == (handle in loud_mentions(text)), (text, handle)


def test_a_silent_mention_never_wakes():
    text = "nice work, cc @~bob"
    assert parse_mentions(text) == (Mention("bob", silent=True),)
    assert not parse_mentions(text)[0].wakes
    assert not mentions_handle(text, "bob")


def test_an_email_address_is_not_a_mention():
    assert parse_mentions("write to bob@host.example") == ()
    assert not mentions_handle("write to bob@host.example", "host")


def test_a_handle_followed_by_a_handle_character_is_a_longer_handle():
    assert loud_mentions("@alice-bot and @alice_2") == ("alice-bot", "alice_2")
    assert not mentions_handle("@alice-bot", "alice")


def test_mentions_come_back_normalised_and_first_seen():
    assert loud_mentions("@Bob then @alice then @BOB") == ("bob", "alice")


def test_one_handle_may_be_named_silently_and_loudly_in_the_same_text():
    assert parse_mentions("@~bob and @bob") == (Mention("bob", True), Mention("bob", False))
    assert mentioned_handles("@~bob and @bob and @~carol") == ("bob", "carol")


def test_a_handle_no_token_can_spell_wakes_on_nothing():
    assert not mentions_handle("@john.doe", "john.doe")
    assert not mentions_handle("@", "")
