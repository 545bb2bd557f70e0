"""The wire envelope every message carries, and the URNs that place it.

A message's content is ``{"content": "<prose>", "l9": {"header": …, "payload": …}}``. The header
says what kind of move the message is (``kind``/``subkind``), who sent it (the first actor) and to
whom (every actor after it), where it sits (``message.episode``, a URN) and what it answers
(``message.parents``); the payload is typed (``payload.type``) structured data. Agents that read only
the prose keep working; the hub, the engines and the inspector read the envelope.

The shape is upstream's (protocol ``SSTP``, subprotocol ``mycelium``, version ``0.0.6``), kept
byte-compatible so its clients carry over. Every closed set here — kinds and their subkinds, actor
roles, payload types, notice subkinds, ping fields, URN forms, the system actor — is frozen in
``contracts/message-envelope.json``, and the tests assert this module against it.

URNs: a room's episode ``urn:ioc:mycelium:episode:<room>:<session>`` where the session is a
thread's short id, ``live`` for the room's own channel, ``knowledge`` for memory sync; the topic
``urn:concept:mycelium:<room>``. A short id is the tail after the last ``:``.

Two control payloads surface activity without waking anyone: a **ping** (a thread moved: which
thread, who wrote, which message — never the prose) and a **notice** (the board moved: a task
filed, claimed, released, resolved, blocked, unblocked, expired, or a thread's floor changed).
:func:`is_addressed_to` is the await loop's rule for what *does* wake a handle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mycelium.core.handles import normalize_handle
from mycelium.core.mentions import mentions_handle

PROTOCOL = "SSTP"
SUBPROTOCOL = "mycelium"
VERSION = "0.0.6"

KINDS: tuple[str, ...] = ("intent", "contingency", "exchange", "commit", "knowledge")
#: Kind → the subkinds it allows. No subkind (``None`` or ``""``) is valid for every kind.
VALID_SUBKINDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "knowledge": frozenset({"distillation", "extraction", "feedback", "query"}),
        "commit": frozenset({"converged", "rejected", "resolved"}),
        "intent": frozenset({"coordinator-assignment", "mission"}),
        "exchange": frozenset({"accept", "amend", "counter", "reject", "team-formation"}),
        "contingency": frozenset({"negotiation"}),
    }
)
ROLES: tuple[str, ...] = ("agent", "human", "coordinator")

SYSTEM_ACTOR_ID = "system"
SYSTEM_ACTOR_ROLE = "coordinator"

#: Every payload type the hub writes or accepts.
PAYLOAD_TYPES: tuple[str, ...] = (
    "reply",
    "message",
    "tick",
    "utterance",
    "consensus",
    "distillation",
    "ping",
    "notice",
    "presence",
    "keepalive",
)
#: Payload types that are never a turn to take, however they are addressed.
UNADDRESSED_PAYLOAD_TYPES: frozenset[str] = frozenset({"presence", "keepalive", "ping", "notice"})

PING_PAYLOAD_TYPE = "ping"
#: A ping's data: exactly these fields (the thread, who wrote, the message id) — never prose.
PING_FIELDS: tuple[str, ...] = ("episode", "sender", "message")

NOTICE_PAYLOAD_TYPE = "notice"
NOTICE_SUBKINDS: tuple[str, ...] = (
    "filed",
    "claimed",
    "released",
    "resolved",
    "blocked",
    "unblocked",
    "expired",
    "floor",
)

EPISODE_URN_PREFIX = "urn:ioc:mycelium:episode:"
TOPIC_URN_PREFIX = "urn:concept:mycelium:"
#: The session of a room's own channel: what is said to the room rather than in a thread.
LIVE_SESSION = "live"
#: The session memory-sync envelopes ride under.
KNOWLEDGE_SESSION = "knowledge"


class EnvelopeError(ValueError):
    """An envelope (or URN, or control payload) that breaks the wire rules."""


# ── URNs ────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class EpisodeRef:
    """An episode URN taken apart: the room it is in and its session (short id)."""

    room: str
    session: str

    @property
    def urn(self) -> str:
        return episode_urn(self.room, self.session)

    @property
    def is_live(self) -> bool:
        return self.session == LIVE_SESSION


def episode_urn(room: str, session: str) -> str:
    """The URN of episode ``session`` in ``room``."""
    if not room:
        raise EnvelopeError("an episode URN needs a room")
    if not session or ":" in session:
        raise EnvelopeError(f"a session id must be non-empty and have no ':' (got {session!r})")
    return f"{EPISODE_URN_PREFIX}{room}:{session}"


def live_episode_urn(room: str) -> str:
    """The URN of ``room``'s own channel."""
    return episode_urn(room, LIVE_SESSION)


def knowledge_episode_urn(room: str) -> str:
    """The URN memory-sync envelopes of ``room`` ride under."""
    return episode_urn(room, KNOWLEDGE_SESSION)


def topic_urn(room: str) -> str:
    """The concept URN a room's messages are about."""
    if not room:
        raise EnvelopeError("a topic URN needs a room")
    return f"{TOPIC_URN_PREFIX}{room}"


def short_id(urn: str) -> str:
    """The short id of an episode URN: the tail after the last ``:`` (a bare id is its own)."""
    return urn.rsplit(":", 1)[-1]


def parse_episode_urn(urn: str) -> EpisodeRef | None:
    """``urn`` as room and session, or ``None`` when it is not an episode URN of ours."""
    if not urn.startswith(EPISODE_URN_PREFIX):
        return None
    room, sep, session = urn[len(EPISODE_URN_PREFIX) :].rpartition(":")
    return EpisodeRef(room, session) if sep and room and session else None


def is_live_episode(room: str, episode: str | None) -> bool:
    """Whether ``episode`` is ``room`` itself rather than a thread in it (``None`` is the room)."""
    return episode is None or episode == live_episode_urn(room)


# ── the envelope ────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Actor:
    """One participant: the sender is the first actor, recipients the rest."""

    id: str
    role: str = "agent"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise EnvelopeError("an actor needs an id")
        if self.role not in ROLES:
            raise EnvelopeError(f"unknown actor role {self.role!r} (one of {', '.join(ROLES)})")


SYSTEM_ACTOR = Actor(SYSTEM_ACTOR_ID, SYSTEM_ACTOR_ROLE)


def validate_subkind(kind: str, subkind: str | None) -> None:
    """Refuse a kind outside :data:`KINDS` or a subkind its kind does not allow."""
    if kind not in VALID_SUBKINDS:
        raise EnvelopeError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if subkind and subkind not in VALID_SUBKINDS[kind]:
        allowed = ", ".join(sorted(VALID_SUBKINDS[kind]))
        raise EnvelopeError(f"invalid subkind {subkind!r} for kind {kind} (allowed: {allowed})")


@dataclass(frozen=True)
class Envelope:
    """One message's header and payload. Built valid or not at all."""

    kind: str
    episode: str
    message_id: str
    sender: Actor
    recipients: tuple[Actor, ...] = ()
    subkind: str | None = None
    parents: tuple[str, ...] = ()
    topic: str | None = None
    payload_type: str = "message"
    data: Mapping[str, Any] = field(default_factory=dict, hash=False)
    groups: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        validate_subkind(self.kind, self.subkind)
        if not self.subkind:
            object.__setattr__(self, "subkind", None)
        if not isinstance(self.episode, str) or not self.episode:
            raise EnvelopeError("an envelope needs an episode")
        if not isinstance(self.message_id, str) or not self.message_id:
            raise EnvelopeError("an envelope needs a message id")
        if any(not isinstance(p, str) or not p for p in self.parents):
            raise EnvelopeError("parents must be message ids")
        if self.payload_type not in PAYLOAD_TYPES:
            raise EnvelopeError(
                f"unknown payload type {self.payload_type!r} (one of {', '.join(PAYLOAD_TYPES)})"
            )
        if not isinstance(self.data, Mapping):
            raise EnvelopeError("payload data must be an object")
        if self.groups is not None and not isinstance(self.groups, Mapping):
            raise EnvelopeError("participant groups must be an object or null")
        # Hold our own copies, so a caller's later edit cannot change a built envelope.
        object.__setattr__(self, "data", dict(self.data))
        if self.groups is not None:
            object.__setattr__(self, "groups", dict(self.groups))

    @property
    def sender_id(self) -> str:
        return self.sender.id

    @property
    def recipient_ids(self) -> tuple[str, ...]:
        return tuple(a.id for a in self.recipients)

    def to_l9(self) -> dict[str, Any]:
        """The envelope as it rides under the content's ``l9`` key (upstream's exact shape)."""
        header: dict[str, Any] = {
            "protocol": PROTOCOL,
            "subprotocol": SUBPROTOCOL,
            "version": VERSION,
            "kind": self.kind,
        }
        if self.subkind:
            header["subkind"] = self.subkind
        header["participants"] = {
            "actors": [{"id": a.id, "role": a.role} for a in (self.sender, *self.recipients)],
            "groups": dict(self.groups) if self.groups is not None else None,
        }
        header["message"] = {"id": self.message_id, "parents": list(self.parents), "episode": self.episode}
        if self.topic is not None:
            header["context"] = {"topic": self.topic}
        return {"header": header, "payload": {"type": self.payload_type, "data": dict(self.data)}}

    def to_content(self, prose: str) -> dict[str, Any]:
        """The full message content: the prose and this envelope."""
        return {"content": prose, "l9": self.to_l9()}


def build_envelope(
    *,
    kind: str,
    episode: str,
    message_id: str,
    sender: str = SYSTEM_ACTOR_ID,
    sender_role: str | None = None,
    recipients: Iterable[str] = (),
    recipient_role: str = "agent",
    subkind: str | None = None,
    parents: Iterable[str] = (),
    topic: str | None = None,
    payload_type: str = "message",
    data: Mapping[str, Any] | None = None,
    groups: Mapping[str, Any] | None = None,
) -> Envelope:
    """An :class:`Envelope` from plain values.

    The sender defaults to the system actor; a sender's role defaults to ``coordinator`` for the
    system actor and ``agent`` for anyone else. Every recipient gets ``recipient_role``.
    """
    role = sender_role or (SYSTEM_ACTOR_ROLE if sender == SYSTEM_ACTOR_ID else "agent")
    return Envelope(
        kind=kind,
        subkind=subkind,
        episode=episode,
        message_id=message_id,
        sender=Actor(sender, role),
        recipients=tuple(Actor(r, recipient_role) for r in recipients),
        parents=tuple(parents),
        topic=topic,
        payload_type=payload_type,
        data=dict(data or {}),
        groups=groups,
    )


def _obj(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise EnvelopeError(f"{where} must be an object")
    return raw


def _text(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise EnvelopeError(f"{where} must be a non-empty string")
    return raw


def parse_envelope(raw: Mapping[str, Any]) -> Envelope:
    """The envelope in ``raw`` (the ``l9`` object), or :class:`EnvelopeError` saying what is wrong."""
    l9 = _obj(raw, "l9")
    header = _obj(l9.get("header"), "header")
    payload = _obj(l9.get("payload"), "payload")
    for key, expected in (("protocol", PROTOCOL), ("subprotocol", SUBPROTOCOL), ("version", VERSION)):
        if header.get(key) != expected:
            raise EnvelopeError(f"header.{key} must be {expected!r} (got {header.get(key)!r})")
    participants = _obj(header.get("participants"), "header.participants")
    actors_raw = participants.get("actors")
    if not isinstance(actors_raw, list) or not actors_raw:
        raise EnvelopeError("header.participants.actors must list at least the sender")
    actors = []
    for i, a in enumerate(actors_raw):
        actor = _obj(a, f"header.participants.actors[{i}]")
        actors.append(
            Actor(_text(actor.get("id"), f"actors[{i}].id"), _text(actor.get("role"), f"actors[{i}].role"))
        )
    groups = participants.get("groups")
    if groups is not None:
        groups = _obj(groups, "header.participants.groups")
    message = _obj(header.get("message"), "header.message")
    parents = message.get("parents", [])
    if not isinstance(parents, list):
        raise EnvelopeError("header.message.parents must be a list")
    context = header.get("context")
    topic = _text(_obj(context, "header.context").get("topic"), "header.context.topic") if context else None
    subkind = header.get("subkind")
    if subkind is not None and not isinstance(subkind, str):
        raise EnvelopeError("header.subkind must be a string")
    data = payload.get("data", {})
    return Envelope(
        kind=_text(header.get("kind"), "header.kind"),
        subkind=subkind or None,
        episode=_text(message.get("episode"), "header.message.episode"),
        message_id=_text(message.get("id"), "header.message.id"),
        sender=actors[0],
        recipients=tuple(actors[1:]),
        parents=tuple(parents),
        topic=topic,
        payload_type=_text(payload.get("type"), "payload.type"),
        data=_obj(data, "payload.data"),
        groups=groups,
    )


def parse_content(content: Mapping[str, Any]) -> tuple[Envelope | None, str]:
    """A message content taken apart: its envelope (``None`` when it carries none) and its prose."""
    prose = content.get("content")
    l9 = content.get("l9")
    return (parse_envelope(l9) if l9 is not None else None), (prose if isinstance(prose, str) else "")


# ── control payloads ────────────────────────────────────────────────────────


def ping_data(*, episode: str, sender: str, message: str) -> dict[str, str]:
    """A ping's payload data: the thread that moved, who wrote, and the message id."""
    values = {"episode": episode, "sender": sender, "message": message}
    for name in PING_FIELDS:
        _text(values[name], f"ping {name}")
    return {name: values[name] for name in PING_FIELDS}


def notice_data(subkind: str, key: str, **fields: Any) -> dict[str, Any]:
    """A notice's payload data: ``subkind`` (closed set), the ``key`` it is about, then ``fields``."""
    if subkind not in NOTICE_SUBKINDS:
        raise EnvelopeError(f"unknown notice subkind {subkind!r} (one of {', '.join(NOTICE_SUBKINDS)})")
    _text(key, "notice key")
    if "subkind" in fields or "key" in fields:
        raise EnvelopeError("a notice's subkind and key are given once")
    return {"subkind": subkind, "key": key, **fields}


def ping_envelope(room: str, *, episode: str, sender: str, message: str, message_id: str) -> Envelope:
    """The ping raised into ``room``'s channel when ``sender`` wrote ``message`` into ``episode``.

    It comes from the system actor, addressed to no one, so it can never be a turn.
    """
    return build_envelope(
        kind="exchange",
        episode=live_episode_urn(room),
        message_id=message_id,
        topic=topic_urn(room),
        payload_type=PING_PAYLOAD_TYPE,
        data=ping_data(episode=episode, sender=sender, message=message),
    )


def notice_envelope(room: str, *, subkind: str, key: str, message_id: str, **fields: Any) -> Envelope:
    """The notice raised into ``room``'s channel when its board moved."""
    return build_envelope(
        kind="exchange",
        episode=live_episode_urn(room),
        message_id=message_id,
        topic=topic_urn(room),
        payload_type=NOTICE_PAYLOAD_TYPE,
        data=notice_data(subkind, key, **fields),
    )


# ── who a message is for ────────────────────────────────────────────────────


def is_addressed_to(envelope: Envelope, prose: str, handle: str) -> bool:
    """Whether a message wakes ``handle`` in ``await``.

    Addressed = an ``exchange`` whose payload is not a control signal (presence, keepalive, ping,
    notice), not sent by the handle itself (the loop guard), and either naming the handle as a
    recipient or mentioning it in the prose as ``@handle``. Handles compare normalised.
    """
    me = normalize_handle(handle)
    if not me or envelope.kind != "exchange" or envelope.payload_type in UNADDRESSED_PAYLOAD_TYPES:
        return False
    if normalize_handle(envelope.sender_id) == me:
        return False
    if any(normalize_handle(r) == me for r in envelope.recipient_ids):
        return True
    return mentions_handle(prose, me)
