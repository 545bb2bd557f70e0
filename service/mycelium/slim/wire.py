"""The wire of rooms as SLIM channels (``contracts/slim-wire.json``): names, each room's shared secret,
and the frames. Pure: no slim-bindings here, so both sides (the hub's moderator, the SDK's client)
and the tests share it without the native library."""

from __future__ import annotations

import hashlib
import hmac
import json
from functools import cache
from typing import Any, Literal

from mycelium import contracts

Frame = Literal["message", "welcome", "post", "accepted", "refused"]


class FrameError(ValueError):
    """Bytes that are not a frame of the wire (the refusal names what is wrong)."""


@cache
def contract() -> dict[str, Any]:
    return contracts.load("slim-wire.json")


def dev_secret() -> str:
    """The development master secret (the default; never for a hub others reach)."""
    return str(contract()["dev_master_secret"])


def channel_name(room: str) -> str:
    c = contract()
    return f"{c['workspace']}/{room}/{c['channel_leaf']}"


def member_name(room: str, handle: str) -> str:
    return f"{contract()['workspace']}/{room}/{handle}"


def moderator_name(room: str) -> str:
    c = contract()
    return f"{c['moderator_workspace']}/{room}/{c['moderator_leaf']}"


def handle_of(name: str, room: str) -> str | None:
    """The handle a member's SLIM name (``mycelium/<room>/<handle>``, with or without the id SLIM
    appends) names in ``room``, or None when it is no member's name of that room."""
    parts = str(name).split("/")
    if len(parts) < 3 or parts[0] != contract()["workspace"] or parts[1] != room:
        return None
    leaf = parts[2]
    return None if leaf == contract()["channel_leaf"] or not leaf else leaf


def check_secret(master: str) -> str:
    if len(master) < contract()["min_secret_len"]:
        raise ValueError(f"the SLIM master secret must be at least {contract()['min_secret_len']} "
                         f"characters (it has {len(master)})")
    return master


def room_secret(master: str, room: str, workspace: str | None = None) -> str:
    """The shared secret of ``room``'s channel: HMAC-SHA256(master, '<workspace>/<room>'), hex."""
    scope = f"{workspace or contract()['workspace']}/{room}"
    return hmac.new(check_secret(master).encode(), scope.encode(), hashlib.sha256).hexdigest()


def payload_type(frame: Frame) -> str:
    return str(contract()["payload_types"][frame])


def encode(frame: Frame, **fields: Any) -> bytes:
    body = {"frame": frame, **fields}
    missing = [f for f in contract()["required_fields"][frame] if f not in body]
    if missing:
        raise FrameError(f"a {frame} frame needs {', '.join(missing)}")
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes) -> dict[str, Any]:
    """A frame from the bytes of one SLIM message (FrameError naming what is wrong)."""
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"a frame is one UTF-8 JSON object ({exc})") from None
    if not isinstance(body, dict):
        raise FrameError("a frame is one JSON object")
    frame = body.get("frame")
    required = contract()["required_fields"]
    if frame not in required:
        raise FrameError(f"unknown frame {frame!r} (frames: {', '.join(required)})")
    missing = [f for f in required[frame] if f not in body]
    if missing:
        raise FrameError(f"a {frame} frame needs {', '.join(missing)}")
    return body
