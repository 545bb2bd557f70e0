"""Who is asking: the actor every verb call carries.

With authentication off (today, and the default) the actor is the handle the request declares, in
the field it has always used (``created_by``, ``handle``, ``sender_handle``, ``?by=``…); nobody has
verified it. ``principal`` is where a verified identity will go when a request carries one.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Kind = Literal["person", "agent", "engine", "operator"]
KINDS: tuple[Kind, ...] = ("person", "agent", "engine", "operator")
Role = Literal["agent", "operator", "viewer"]
ROLES: tuple[Role, ...] = ("agent", "operator", "viewer")


class Principal(NamedTuple):
    """Who a verified token says the caller is (the token gate; see mycelium.auth)."""

    handle: str
    """The handle it acts as."""
    role: Role
    """``agent``: acts as its own handle; ``operator``: may act for others and call the
    administrative verbs; ``viewer``: reads only."""
    subject: str
    """The token's ``sub`` (or the handle, when the token has none)."""
    issuer: str
    expires_at: int | None = None


class Actor(NamedTuple):
    """Who asks (a tuple: one is made for every call)."""

    handle: str | None
    """The handle the caller acts as; None: nobody declared (a write then names its author itself)."""
    kind: Kind = "agent"
    principal: str | None = None
    """The verified identity behind the handle (a token's subject); None while nothing verifies it."""

    @classmethod
    def declared(cls, handle: str | None, kind: Kind = "agent") -> Actor:
        """The actor a request declares by naming its author (blank or missing: nobody)."""
        if not handle or handle.isspace():
            return NOBODY
        return cls(handle, kind)

    @property
    def anonymous(self) -> bool:
        return self.handle is None


NOBODY = Actor(None)
HUB_PROCESS = Actor(None, "operator", "hub")
"""The hub's own work (its background loops, heartbeats, health and commands run on the database):
no handle is declared, and what it writes names its author itself (``system``, ``env``)."""


HUB_PRINCIPAL = Principal("hub", "operator", "hub", "hub")
"""The hub's own loops, as the database sees them: an operator (they mirror, index and sweep every
room, private ones included)."""
