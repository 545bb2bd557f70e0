"""HistoryGuard: the token budget (real tokenizer and estimate), count limit, duplicates, drops."""

from __future__ import annotations

import pytest

from mycelium import HistoryGuard, HistoryTruncatedError, Session
from mycelium.guards import tokens


def turns(n: int, text: str = "hello there") -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{text} {i}"} for i in range(n)]


def test_the_default_counts_with_the_installed_tokenizer():
    guard = HistoryGuard(max_tokens=10_000)
    messages = [{"role": "user", "content": "Tokenization isn't characters divided by four."}]
    guard.validate(messages)
    assert guard.tokenizer_name == "tokenizers"
    real = guard.estimate_tokens(messages)
    estimated = HistoryGuard(tokenizer="estimate").estimate_tokens(messages)
    text = messages[0]["content"]
    assert estimated == tokens.PRIMING + tokens.PER_MESSAGE + (len(text) + 3) // 4
    assert real != estimated  # a real count, not the estimate
    assert HistoryGuard(tokenizer=lambda s: len(s.split())).estimate_tokens(messages) == 3 + 4 + 6


def test_over_the_token_budget_raises_with_the_counts():
    guard = HistoryGuard(max_tokens=50, tokenizer="estimate")
    guard.validate(turns(2))
    with pytest.raises(HistoryTruncatedError) as exc:
        guard.validate(turns(2, "x" * 400))
    assert exc.value.reason == "token_limit" and exc.value.message_count == 2
    assert exc.value.estimated_tokens > 50


def test_near_the_budget_is_recorded_in_the_session():
    guard = HistoryGuard(max_tokens=20, warn_at=0.5, tokenizer="estimate")
    with Session() as session:
        guard.validate(turns(2))
    assert "history_near_limit" in [e["event"] for e in session.audit_log()]


def test_the_message_count_limit():
    guard = HistoryGuard(max_messages=3)
    guard.validate(turns(3))
    with pytest.raises(HistoryTruncatedError) as exc:
        guard.validate(turns(4))
    assert exc.value.reason == "message_count" and exc.value.message_count == 4


def test_a_repeated_turn_is_refused_but_equal_text_in_other_roles_is_not():
    same = {"role": "user", "content": "same question"}
    with pytest.raises(HistoryTruncatedError, match="Duplicate turns") as exc:
        HistoryGuard().validate([same, {"role": "assistant", "content": "answer"}, same])
    assert exc.value.reason == "duplicate_turns"
    HistoryGuard().validate([same, {"role": "assistant", "content": "same question"}])
    HistoryGuard(detect_duplicates=False).validate([same, same])


def test_silent_drops_are_found_with_multiplicity():
    guard = HistoryGuard(detect_duplicates=False)
    with pytest.raises(RuntimeError, match="before validate"):
        guard.check_for_drops([])
    messages = [*turns(4), turns(1)[0]]  # the first message twice
    guard.validate(messages)
    guard.check_for_drops(messages + turns(6)[4:])  # appended turns are fine
    with pytest.raises(HistoryTruncatedError) as exc:
        guard.check_for_drops(messages[1:])  # one of the two equal messages lost
    assert exc.value.reason == "dropped_messages"
    with pytest.raises(HistoryTruncatedError, match="3 message"):
        guard.check_for_drops(messages[2:4])


def test_summary_fidelity_tracks_keywords():
    guard = HistoryGuard(track_keywords=["Invoice-42"])
    guard.validate([{"role": "user", "content": "pay invoice-42 today"}])
    guard.check_summary_fidelity([{"role": "system", "content": "summary: paying INVOICE-42"}])
    with pytest.raises(HistoryTruncatedError, match="invoice-42"):
        guard.check_summary_fidelity([{"role": "system", "content": "summary: paying"}])


def test_structured_content_blocks_are_counted():
    guard = HistoryGuard(tokenizer="estimate")
    block = [{"type": "text", "text": "a" * 40}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert guard.estimate_tokens([{"role": "user", "content": block}]) == 3 + 4 + 11


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        HistoryGuard(max_tokens=0)
    with pytest.raises(ValueError, match="tokenizer"):
        HistoryGuard(tokenizer=42).estimate_tokens(turns(1))
