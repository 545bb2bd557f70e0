"""Who is in a room and whose turn it is: ``GET /api/rooms/{room}/sessions/members``.

Members are the handles whose presence lease runs (every ``await`` poll and ``reply`` refreshes it);
floors are the threads whose floor is held, each named by its task row where it has one.
"""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.params import FromPath

from mycelium.api.deps import HubDep
from mycelium.api.rooms import require_room
from mycelium.core.envelope import short_id
from mycelium.db.queries import q


@get("/api/rooms/{room:str}/sessions/members")
async def members(hub: HubDep, room: FromPath[str]) -> dict[str, Any]:
    await require_room(hub, room)
    present = await hub.db.fetch(q("room_members"), room)
    floors = await hub.db.fetch(q("room_floors"), room)
    return {
        "room": room,
        "members": [{"handle": m["handle"], "kind": m["kind"], "seen_at": m["seen_at"].isoformat(),
                     "expires_at": m["expires_at"].isoformat()} for m in present],
        "floors": [{"thread": short_id(f["episode"]), "episode": f["episode"], "key": f["key"],
                    "title": f["title"], "holder": f["holder"], "speakers": list(f["speakers"])}
                   for f in floors],
    }


ROUTES = [members]
