"""The pure cores: task lines read from a model's answer (only participants tagged, nothing else
trusted), the raw agreement, and the synthesizer's summon."""

from __future__ import annotations

import re

from mycelium.engines import compiler, synthesizer
from mycelium.engines.models import NoModel, Rule, ScriptedModel


def test_checklist_lines_keep_one_participant_tag_and_drop_invented_ones():
    answer = (
        "# Plan\n"
        "Here is the plan:\n"
        "- [ ] Invoice at 20 @Julia\n"
        "* [] Ship within 2 days @nova @julia\n"
        "1. [ ] Tell finance @mallory\n"
        "- [x] Already done @nova\n"
        "- [ ] Invoice at 20 @julia\n"  # the same task twice is one row
        "- [ ]   \n"
        "- plain bullet @nova\n"
    )
    lines, dropped = compiler.parse_lines(answer, ["julia", "nova"])
    assert lines == [
        compiler.Line("Invoice at 20", "julia"),
        compiler.Line("Ship within 2 days", "nova"),
        compiler.Line("Tell finance", None),
    ]
    assert dropped == ["mallory"]


def test_lines_are_capped_in_number_and_length():
    answer = "\n".join(f"- [ ] Task {i} " + "x" * 300 for i in range(30))
    lines, _ = compiler.parse_lines(answer, [])
    assert len(lines) == compiler.MAX_LINES
    assert all(len(line.text) == compiler.MAX_TEXT and line.text.endswith("…") for line in lines)


def test_the_raw_agreement_is_one_term_per_line_by_issue():
    got = compiler.raw_lines({"price": 20, "deadline": "2 days", "scope": ["a", "b"]})
    assert [line.text for line in got] == ["deadline=2 days", "price=20", 'scope=["a", "b"]']
    assert all(line.assignee is None for line in got)


async def test_compile_falls_back_to_the_raw_agreement_with_the_reason():
    agreement = {"price": 20}
    none = await compiler.compile_agreement(NoModel(), agreement, ["julia"], "Price")
    assert none.source == "raw" and none.note.startswith("none: no model is configured")
    prose = ScriptedModel([Rule(re.compile("Agreed terms"), reply="Sounds good to me.")])
    wordy = await compiler.compile_agreement(prose, agreement, ["julia"], "Price")
    assert (wordy.source, wordy.note, [x.text for x in wordy.lines]) == (
        "raw", "scripted answered with no task line", ["price=20"])
    lines = ScriptedModel([Rule(re.compile(r"Participants \(the only handles you may tag\): @julia"),
                                reply="- [ ] Invoice @julia")])
    ok = await compiler.compile_agreement(lines, agreement, ["julia"], "Price")
    assert (ok.source, ok.note, ok.lines) == ("model", None, [compiler.Line("Invoice", "julia")])


def test_the_summon_asks_for_everything_with_all():
    assert synthesizer.read_summon("@synth --all").everything
    assert synthesizer.read_summon("--all please").everything
    assert not synthesizer.read_summon("@synth catch up on --allowed things").everything
    assert not synthesizer.read_summon("@synth").everything
