"""The wire envelope: built valid or not at all, byte-compatible, and honest about who it wakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mycelium.core.envelope import (
    SYSTEM_ACTOR,
    Actor,
    EnvelopeError,
    EpisodeRef,
    build_envelope,
    episode_urn,
    is_addressed_to,
    is_live_episode,
    knowledge_episode_urn,
    live_episode_urn,
    notice_data,
    notice_envelope,
    parse_content,
    parse_envelope,
    parse_episode_urn,
    ping_data,
    ping_envelope,
    short_id,
    topic_urn,
)

CONTRACT = json.loads(
    (Path(__file__).resolve().parents[2] / "contracts" / "message-envelope.json").read_text(encoding="utf-8")
)
THREAD = "urn:ioc:mycelium:episode:atlas:k7q2m9"


def reply(**overrides):
    values = {
        "kind": "exchange",
        "episode": THREAD,
        "message_id": "m1",
        "sender": "nova",
        "recipients": ["orbit"],
        "payload_type": "reply",
    }
    return build_envelope(**{**values, **overrides})


# ── shape ───────────────────────────────────────────────────────────────────


def test_a_reply_serialises_byte_for_byte_as_the_contract_freezes():
    spec = CONTRACT["envelope"]
    inputs = spec["inputs"]
    envelope = build_envelope(
        kind="exchange",
        episode=inputs["episode"],
        message_id=inputs["message_id"],
        sender=inputs["sender"],
        recipients=inputs["recipients"],
        parents=inputs["parents"],
        topic=inputs["topic"],
        payload_type=inputs["payload_type"],
        data=inputs["data"],
    )
    produced = envelope.to_content(inputs["text"])
    assert json.dumps(produced) == json.dumps(spec["expected_content"])


def test_a_subkind_appears_only_when_there_is_one():
    assert "subkind" not in reply().to_l9()["header"]
    assert reply(subkind="").subkind is None
    assert reply(subkind="accept").to_l9()["header"]["subkind"] == "accept"


def test_a_subkind_its_kind_does_not_allow_is_refused():
    with pytest.raises(EnvelopeError, match="invalid subkind 'converged' for kind exchange"):
        reply(subkind="converged")


def test_an_unknown_kind_payload_type_or_role_is_refused():
    with pytest.raises(EnvelopeError, match="unknown kind"):
        reply(kind="gossip")
    with pytest.raises(EnvelopeError, match="unknown payload type"):
        reply(payload_type="data")
    with pytest.raises(EnvelopeError, match="unknown actor role"):
        reply(sender_role="robot")


def test_an_envelope_needs_an_episode_and_a_message_id():
    with pytest.raises(EnvelopeError, match="episode"):
        reply(episode="")
    with pytest.raises(EnvelopeError, match="message id"):
        reply(message_id="")


def test_no_topic_means_no_context_and_groups_are_always_present():
    header = reply().to_l9()["header"]
    assert "context" not in header
    assert header["participants"]["groups"] is None
    grouped = reply(groups={"workspace_id": "w", "mas_id": "m"}).to_l9()["header"]
    assert grouped["participants"]["groups"] == {"workspace_id": "w", "mas_id": "m"}


def test_the_system_actor_speaks_as_a_coordinator_by_default():
    envelope = build_envelope(
        kind="commit", subkind="converged", episode=THREAD, message_id="c1", payload_type="consensus"
    )
    assert envelope.sender == SYSTEM_ACTOR == Actor("system", "coordinator")
    assert envelope.recipients == ()


def test_sender_is_the_first_actor_and_recipients_the_rest():
    envelope = reply(recipients=["orbit", "vega"])
    assert envelope.sender_id == "nova"
    assert envelope.recipient_ids == ("orbit", "vega")


# ── parsing ─────────────────────────────────────────────────────────────────


def test_an_envelope_round_trips_through_its_wire_form():
    envelope = reply(
        subkind="counter", parents=["p1", "p2"], topic=topic_urn("atlas"), data={"action": "reply"}
    )
    assert parse_envelope(json.loads(json.dumps(envelope.to_l9()))) == envelope


def test_parsing_names_what_is_wrong():
    good = reply().to_l9()
    with pytest.raises(EnvelopeError, match=r"header.version must be '0.0.6'"):
        parse_envelope({**good, "header": {**good["header"], "version": "9"}})
    with pytest.raises(EnvelopeError, match="at least the sender"):
        parse_envelope({**good, "header": {**good["header"], "participants": {"actors": [], "groups": None}}})
    with pytest.raises(EnvelopeError, match=r"payload\.data must be an object"):
        parse_envelope({**good, "payload": {"type": "reply", "data": [1]}})
    with pytest.raises(EnvelopeError, match="l9 must be an object"):
        parse_envelope("not an envelope")  # type: ignore[arg-type]


def test_a_content_splits_into_envelope_and_prose():
    envelope = reply()
    assert parse_content(envelope.to_content("hi")) == (envelope, "hi")
    assert parse_content({"content": "plain"}) == (None, "plain")


# ── URNs ────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("example", CONTRACT["urn"]["examples"], ids=lambda e: e["episode"])
def test_urn_forms_match_the_contract(example):
    assert episode_urn(example["room"], example["session"]) == example["episode"]
    assert topic_urn(example["room"]) == example["topic"]
    assert short_id(example["episode"]) == example["session"]
    assert parse_episode_urn(example["episode"]) == EpisodeRef(example["room"], example["session"])


def test_the_rooms_own_channel_is_the_live_episode():
    assert live_episode_urn("acme") == "urn:ioc:mycelium:episode:acme:live"
    assert knowledge_episode_urn("acme") == "urn:ioc:mycelium:episode:acme:knowledge"
    assert is_live_episode("acme", None)
    assert is_live_episode("acme", "urn:ioc:mycelium:episode:acme:live")
    assert not is_live_episode("acme", "urn:ioc:mycelium:episode:acme:k7q2m9")
    assert not is_live_episode("other", "urn:ioc:mycelium:episode:acme:live")
    assert parse_episode_urn(live_episode_urn("acme")).is_live


def test_a_short_id_is_the_tail_after_the_last_colon():
    assert short_id("urn:ioc:mycelium:episode:atlas:abc123") == "abc123"
    assert short_id("abc123") == "abc123"


def test_a_room_name_with_a_colon_still_parses_back():
    urn = episode_urn("team:blue", "abc")
    assert parse_episode_urn(urn) == EpisodeRef("team:blue", "abc")
    assert parse_episode_urn(urn).urn == urn


def test_a_urn_that_is_not_ours_parses_to_nothing():
    assert parse_episode_urn("urn:someone:else") is None
    assert parse_episode_urn("urn:ioc:mycelium:episode:abc") is None


def test_a_session_id_cannot_hold_a_colon():
    with pytest.raises(EnvelopeError):
        episode_urn("acme", "a:b")
    with pytest.raises(EnvelopeError):
        episode_urn("", "abc")


# ── control payloads ────────────────────────────────────────────────────────


def test_a_ping_carries_the_thread_the_writer_and_the_message_never_the_prose():
    data = ping_data(episode=THREAD, sender="nova", message="m9")
    assert list(data) == CONTRACT["ping"]["payload_fields"]
    envelope = ping_envelope("atlas", episode=THREAD, sender="nova", message="m9", message_id="p1")
    assert envelope.payload_type == "ping"
    assert envelope.episode == live_episode_urn("atlas")
    assert envelope.sender == SYSTEM_ACTOR
    assert envelope.data == data


def test_a_ping_needs_every_field():
    with pytest.raises(EnvelopeError, match="ping message"):
        ping_data(episode=THREAD, sender="nova", message="")


def test_a_notice_carries_its_subkind_and_key_first():
    data = notice_data("filed", "work/ship-it", kind="action", by="julia")
    assert list(data) == ["subkind", "key", "kind", "by"]
    envelope = notice_envelope("atlas", subkind="floor", key="k7q2m9", message_id="n1", by="conductor")
    assert envelope.data == {"subkind": "floor", "key": "k7q2m9", "by": "conductor"}
    assert envelope.payload_type == "notice"


def test_a_notice_outside_the_closed_set_or_without_a_key_is_refused():
    with pytest.raises(EnvelopeError, match="unknown notice subkind"):
        notice_data("archived", "work/x")
    with pytest.raises(EnvelopeError, match="notice key"):
        notice_data("filed", "")


# ── who wakes ───────────────────────────────────────────────────────────────


def test_a_recipient_is_addressed():
    assert is_addressed_to(reply(recipients=["orbit"]), "hello", "orbit")
    assert is_addressed_to(reply(recipients=["Orbit"]), "hello", "@orbit#a8f3")


def test_a_mention_in_the_prose_addresses_the_handle():
    assert is_addressed_to(reply(recipients=["system"]), "@vega can you check?", "vega")


def test_a_silent_mention_never_wakes():
    assert not is_addressed_to(reply(recipients=["system"]), "thanks, cc @~vega", "vega")


def test_a_handle_is_never_woken_by_its_own_message():
    assert not is_addressed_to(reply(sender="nova", recipients=["nova"]), "@nova note to self", "NOVA")


def test_pings_notices_and_liveness_wake_nobody():
    for payload_type in ("ping", "notice", "presence", "keepalive"):
        assert not is_addressed_to(reply(payload_type=payload_type, recipients=["orbit"]), "@orbit", "orbit")


def test_only_an_exchange_is_a_turn():
    commit = build_envelope(
        kind="commit",
        subkind="converged",
        episode=THREAD,
        message_id="c",
        recipients=["orbit"],
        payload_type="consensus",
    )
    assert not is_addressed_to(commit, "@orbit", "orbit")


def test_a_blank_handle_is_never_addressed():
    assert not is_addressed_to(reply(), "@orbit", "  ")


def test_a_built_envelope_keeps_its_own_copy_of_the_payload():
    data = {"action": "accept"}
    envelope = reply(data=data)
    data["action"] = "reject"
    assert envelope.data == {"action": "accept"}
