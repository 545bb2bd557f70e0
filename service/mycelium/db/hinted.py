"""Writes whose wake hints the hub sends itself, once they have committed.

The named queries of the board and conversation verbs wrap their room in ``mycelium.defer_wakes``,
so the triggers keep their hints instead of issuing NOTIFY inside the transaction (which would make
every such commit wait for every other notifying one: see ``mycelium.db.listener``), and return
them in a ``wake_hints`` column. A statement on a pooled connection commits before its result is
handed back, so by then the hints are true; the process's one listener wakes the local waiters at
once and tells the other replicas in its next batch. A refused write raises and hints nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mycelium.hub import Hub


async def write_row(hub: Hub, query: str, *args: Any) -> Any:
    """The one row of a hinted write (``fetchrow``), its hints sent."""
    row = await hub.db.fetchrow(query, *args)
    if row is not None:
        hub.wakes.hint(row["wake_hints"])
    return row


async def write_rows(hub: Hub, query: str, *args: Any) -> list[Any]:
    """Every row of a hinted write (``fetch``), its hints sent (each row carries all of them)."""
    rows = await hub.db.fetch(query, *args)
    if rows:
        hub.wakes.hint(rows[0]["wake_hints"])
    return rows
