"""contracts/slim-wire.json against mycelium.slim.wire, the one module both sides (the hub's moderator
and the SDK's member) build and read frames with."""

from __future__ import annotations

import json

import pytest

from mycelium.paths import contracts_dir
from mycelium.slim import wire

CONTRACT = json.loads((contracts_dir() / "slim-wire.json").read_text())


def test_the_room_secret_is_the_contract_s_hmac_vector():
    v = CONTRACT["shared_secret_vector"]
    assert wire.room_secret(v["master_secret"], v["room"], v["workspace"]) == v["expected_digest"]
    # a room's secret differs by room and by master secret: another hub's members cannot join
    dev = wire.dev_secret()
    assert wire.room_secret(dev, "a") != wire.room_secret(dev, "b")
    assert wire.room_secret(dev, "a") != wire.room_secret("y" * 32, "a")


def test_a_master_secret_shorter_than_the_contract_s_minimum_is_refused_naming_it():
    with pytest.raises(ValueError, match="at least 32 characters \\(it has 31\\)"):
        wire.room_secret("x" * 31, "atlas")


def test_names_are_the_contract_s_and_a_member_s_name_gives_back_its_handle():
    n = CONTRACT["names"]
    assert wire.channel_name(n["room"]) == n["channel"]
    assert wire.member_name(n["room"], n["handle"]) == n["member"]
    assert wire.moderator_name(n["room"]) == n["moderator"]
    assert wire.handle_of(n["member"], n["room"]) == n["handle"]
    assert wire.handle_of(n["member"] + "/8f3a", n["room"]) == n["handle"]  # SLIM appends an id
    assert wire.handle_of(n["moderator"], n["room"]) is None  # no handle can be the moderator
    assert wire.handle_of(n["channel"], n["room"]) is None
    assert wire.handle_of(wire.member_name("other", "julia"), n["room"]) is None


@pytest.mark.parametrize("name", sorted(CONTRACT["frames"]))
def test_each_frame_of_the_contract_round_trips_and_keeps_its_required_fields(name):
    frame = CONTRACT["frames"][name]
    kind = frame["frame"]
    fields = {k: v for k, v in frame.items() if k != "frame"}
    data = wire.encode(kind, **fields)
    assert wire.decode(data) == frame
    assert set(CONTRACT["required_fields"][kind]) <= set(frame)
    assert wire.payload_type(kind) == CONTRACT["payload_types"][kind]


@pytest.mark.parametrize(("data", "problem"), [
    (b"\xff", "UTF-8 JSON"),
    (b"[1]", "one JSON object"),
    (b'{"frame": "shout"}', "unknown frame 'shout'"),
    (b'{"frame": "post", "request": "r"}', "a post frame needs text"),
    (b'{"frame": "message", "room": "a"}', "a message frame needs position, message"),
])
def test_bytes_that_are_not_a_frame_are_refused_naming_the_problem(data, problem):
    with pytest.raises(wire.FrameError, match=problem):
        wire.decode(data)


def test_a_frame_missing_a_required_field_is_never_sent():
    with pytest.raises(wire.FrameError, match="a welcome frame needs head"):
        wire.encode("welcome", room="a", handle="b")
