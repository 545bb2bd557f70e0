"""MessageValidator: each violation found by validate, fixed (or refused) by repair."""

from __future__ import annotations

import copy

import pytest

from mycelium import MessageValidationError, MessageValidator


def call(ident: str, name: str = "lookup", index: int | None = None) -> dict:
    tc = {"id": ident, "type": "function", "function": {"name": name, "arguments": "{}"}}
    if index is not None:
        tc["index"] = index
    return tc


def transcript(*calls: dict, results: tuple[str, ...] = ()) -> list[dict]:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "look it up"},
                {"role": "assistant", "content": "", "tool_calls": list(calls)}]
    messages += [{"role": "tool", "tool_call_id": r, "content": "ok"} for r in results]
    return messages


def violation(messages: list) -> tuple[str, int]:
    with pytest.raises(MessageValidationError) as exc:
        MessageValidator().validate(messages)
    return exc.value.violation, exc.value.message_index


def test_a_clean_transcript_passes_unchanged():
    messages = transcript(call("call_1"), call("call_2"), results=("call_1", "call_2"))
    assert MessageValidator().validate(messages) is messages
    assert MessageValidator().repair(messages) == messages


def test_an_orphan_tool_result_is_found_and_dropped_by_repair():
    messages = transcript(call("call_1"), results=("call_1", "call_9"))
    assert violation(messages) == ("orphaned_tool_result", 4)
    repaired = MessageValidator().repair(messages)
    assert [m.get("tool_call_id") for m in repaired if m["role"] == "tool"] == ["call_1"]
    # a result before its call is an orphan too
    early = [{"role": "tool", "tool_call_id": "call_1", "content": "x"}, *transcript(call("call_1"))]
    assert violation(early) == ("orphaned_tool_result", 0)


def test_duplicate_tool_call_ids_keep_the_last_and_duplicate_results_keep_the_first():
    first, last = call("call_1", "a"), call("call_1", "b")
    messages = transcript(first, last, results=("call_1",))
    assert violation(messages) == ("duplicate_tool_call_ids", 2)
    assert MessageValidator().repair(messages)[2]["tool_calls"] == [last]
    twice = transcript(call("call_1"), results=("call_1", "call_1"))
    assert violation(twice) == ("duplicate_tool_result", 4)
    assert len(MessageValidator().repair(twice)) == 4


def test_streaming_partials_beside_finals_are_dropped():
    messages = transcript(call("fc_1"), call("call_1"), results=("call_1",))
    assert violation(messages) == ("duplicate_tool_call_blocks", 2)
    assert [tc["id"] for tc in MessageValidator().repair(messages)[2]["tool_calls"]] == ["call_1"]


def test_one_based_indices_are_renumbered():
    messages = transcript(call("call_1", index=1), call("call_2", index=2), results=("call_1", "call_2"))
    assert violation(messages) == ("nonzero_tool_call_index", 2)
    assert [tc["index"] for tc in MessageValidator().repair(messages)[2]["tool_calls"]] == [0, 1]
    assert MessageValidator(check_indices=False).validate(messages) is messages


def test_a_parsed_artifact_is_stripped():
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "{}", "parsed": {"a": 1}, "refusal": None}]
    assert violation(messages) == ("parsed_artifact", 1)
    assert MessageValidator().repair(messages)[1] == {"role": "assistant", "content": "{}"}


def test_invalid_roles_and_tool_results_without_an_id_cannot_be_repaired():
    bad_role = [{"role": "robot", "content": "beep"}]
    no_id = [*transcript(call("call_1")), {"role": "tool", "content": "ok"}]
    missing_role = [{"content": "who said this"}]
    for messages, expected in ((bad_role, "invalid_role"), (no_id, "missing_tool_call_id"),
                               (missing_role, "invalid_role")):
        assert violation(messages)[0] == expected
        with pytest.raises(MessageValidationError) as exc:
            MessageValidator().repair(messages)
        assert exc.value.violation == expected
    assert MessageValidator(strict_roles=False).validate(bad_role) is bad_role


def test_repair_never_mutates_its_input():
    messages = transcript(call("fc_1", index=1), call("call_1", index=2), call("call_1", index=3),
                          results=("call_1", "call_7"))
    messages[1]["parsed"] = {"x": 1}
    before = copy.deepcopy(messages)
    repaired = MessageValidator().repair(messages)
    assert messages == before
    assert MessageValidator().validate(repaired) is repaired


def test_langchain_message_objects_are_read_by_their_type():
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    good = [HumanMessage("hi"), AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "call_1"}]),
            ToolMessage("ok", tool_call_id="call_1")]
    assert MessageValidator().validate(good) is good
    orphan = [HumanMessage("hi"), ToolMessage("ok", tool_call_id="call_2")]
    assert violation(orphan) == ("orphaned_tool_result", 1)
    assert MessageValidator().repair(orphan) == [orphan[0]]
