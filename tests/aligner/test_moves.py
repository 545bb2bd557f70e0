"""Reading replies into moves: markers need no model, empty prose never reaches one, the model's
reading is snapped or refused, and whatever cannot be read holds the member's own line."""

from __future__ import annotations

import re

from mycelium.core.markers import lift_reply
from mycelium.engines.aligner.moves import own_line, read_reply
from mycelium.engines.conductor import Reply
from mycelium.engines.models import Rule, ScriptedModel

ISSUES = {"price": ["10", "15", "20", "25", "30"], "vendor": ["acme", "globex"]}
STANDING = {"price": "20", "vendor": "acme"}
MINE = {"price": "30", "vendor": "globex"}


class Counting(ScriptedModel):
    """A scripted model that counts its calls (the model seam's own deterministic model)."""

    def __init__(self, rules: list[Rule]) -> None:
        super().__init__(rules)
        self.calls: list[str] = []

    async def complete(self, system, messages, *, handle=""):
        self.calls.append(messages[-1]["content"])
        return await super().complete(system, messages, handle=handle)


def refusing() -> Counting:
    return Counting([Rule(re.compile("."), fail="no model should be asked")])


def reply(text: str, lifted: bool = False) -> Reply:
    payload, prose = lift_reply(text) if lifted else ({}, text)
    return Reply("bob", prose, payload, "m1", 7)


async def test_markers_are_authoritative_and_need_no_model():
    model = refusing()
    for text, lifted in (("[[mycelium: accept]]", False), ("OK then. [[mycelium: accept]]", True)):
        got = await read_reply("bob", reply(text, lifted), ISSUES, STANDING, MINE, model)
        assert (got.action, got.offer, got.how) == ("accept", None, "marker")
    got = await read_reply("bob", reply("[[mycelium: offer Price=24 vendor=ACME]]"), ISSUES, STANDING, MINE, model)
    assert (got.action, got.offer, got.how) == ("offer", {"price": "25", "vendor": "acme"}, "marker")
    got = await read_reply("bob", reply("No. [[mycelium: reject confidence=0.4]]", True), ISSUES, STANDING, MINE, model)
    assert (got.action, got.offer, got.confidence) == ("offer", MINE, 0.4)  # reject holds bob's own line
    assert model.calls == []


async def test_what_cannot_be_read_holds_the_members_own_line_never_the_standing_offer():
    model = refusing()
    cases = [
        None,  # silence
        reply("[[mycelium: offer price=1000 vendor=acme]]"),  # off the grid
        reply("[[mycelium: offer price=20]]"),  # an issue missing
        reply("[[mycelium: confidence=0.9]]"),  # no words and no move: never reaches a model
        reply("   "),
    ]
    for r in cases:
        got = await read_reply("bob", r, ISSUES, STANDING, MINE, model)
        assert (got.action, got.offer) == ("offer", MINE) and got.offer != STANDING
    assert model.calls == []
    # an accept with nothing on the table is no agreement either
    got = await read_reply("bob", reply("[[mycelium: accept]]"), ISSUES, None, MINE, model)
    assert (got.action, got.offer) == ("offer", MINE)


async def test_an_offer_of_the_standing_terms_accepts_them():
    got = await read_reply("bob", reply("[[mycelium: offer price=20 vendor=acme]]"), ISSUES, STANDING, MINE, None)
    assert got.action == "accept"


async def test_prose_goes_to_the_model_and_its_reading_is_snapped_or_refused():
    model = Counting(
        [
            Rule(re.compile(r"Reply from bob:\nmeet at twenty"), reply='{"action": "counter", "offer": '
                 '{"Price": "21", "vendor": "Acme Inc"}}'),
            Rule(re.compile(r"Reply from bob:\nfine"), reply='Sure: {"action": "accept"}'),
            Rule(re.compile(r"Reply from bob:\nmake it a thousand"), reply='{"action": "counter", "offer": '
                 '{"price": "1000", "vendor": "acme"}}'),
            Rule(re.compile(r"Reply from bob:\nhm"), reply="I am not sure what they mean"),
            Rule(re.compile(r"Reply from bob:\nboom"), fail="the endpoint answered HTTP 500"),
        ]
    )
    got = await read_reply("bob", reply("meet at twenty"), ISSUES, STANDING, MINE, model)
    assert (got.action, got.how) == ("accept", "model")  # it is what is on the table
    got = await read_reply("bob", reply("meet at twenty"), ISSUES, {"price": "10", "vendor": "acme"}, MINE, model)
    assert (got.action, got.offer, got.how) == ("offer", {"price": "20", "vendor": "acme"}, "model")
    got = await read_reply("bob", reply("fine"), ISSUES, STANDING, MINE, model)
    assert (got.action, got.how) == ("accept", "model")
    for text in ("make it a thousand", "hm"):
        got = await read_reply("bob", reply(text), ISSUES, STANDING, MINE, model)
        assert (got.action, got.offer, got.how) == ("offer", MINE, "held")
    got = await read_reply("bob", reply("boom"), ISSUES, STANDING, MINE, model)
    assert (got.offer, got.how, got.error) == (MINE, "held", "the endpoint answered HTTP 500")
    assert "could not read" in got.said
    # the model saw the issue space and the reply, with any marker of the member's defanged
    assert "price: 10, 15, 20, 25, 30" in model.calls[0] and "On the table: price=20" in model.calls[0]


def test_a_members_own_line_is_its_last_offer_else_its_opening_ask_else_the_first_option():
    assert own_line("bob", ISSUES, {"bob": {"price": "25", "vendor": "acme"}}, {}) == {"price": "25", "vendor": "acme"}
    assert own_line("bob", ISSUES, {}, {"bob": {"price": "30"}}) == {"price": "30", "vendor": "acme"}


def test_reply_lifts_a_move_marker_into_the_payload_and_strips_it_from_the_prose():
    data, prose = lift_reply('Meet halfway. [[mycelium: offer price=20 vendor="acme corp" A=5 confidence=0.7]]')
    assert data == {"confidence": 0.7, "move": {"action": "offer", "offer": {"price": "20", "vendor": "acme corp",
                                                                             "A": "5"}}}
    assert prose == "Meet halfway."
    assert lift_reply("[[mycelium: reject]] Too dear.")[0] == {"move": {"action": "reject"}}
    # a marker that only rates or states a stance is no move
    assert "move" not in lift_reply("[[mycelium: A=80 stance=accept]]")[0]
    assert "move" not in lift_reply("[[mycelium: offer]] nothing offered")[0]
