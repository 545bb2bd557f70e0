"""Rooms as SLIM group channels (AGNTCY SLIM, MLS), beside HTTP.

Every room is a channel whose moderator is the hub: the process holding the room's advisory lock
(sql/slim.sql) creates the channel, invites the members the database admits, publishes the room's
timeline by position, and passes what members post through the verb gateway. ``wire`` is the
shared wire (contracts/slim-wire.json); ``runtime`` loads the native library; ``node`` runs a SLIM
node; ``channel`` and ``publisher`` are the hub's side; ``client`` is the SDK's
(``mycelium.slim.join``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mycelium.slim.client import Member


def join(room: str, handle: str, **options: Any) -> Member:
    """A member of ``room``'s channel as ``handle`` (``async with mycelium.slim.join(…) as m``;
    ``async for message in m``; ``await m.post(text)``). See :class:`mycelium.slim.client.Member`."""
    from mycelium.slim.client import Member

    return Member(room, handle, **options)
