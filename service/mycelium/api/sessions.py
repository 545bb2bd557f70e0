"""Who is in a room and whose turn it is: ``GET /api/rooms/{room}/sessions/members``.

Members are the handles whose presence lease runs (every ``await`` poll and ``reply`` refreshes it);
floors are the threads whose floor is held, each named by its task row where it has one.
"""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.params import FromPath

from mycelium.api.deps import VERBS, VerbsDep
from mycelium.core.envelope import short_id
from mycelium.verbs import NOBODY


@get("/api/rooms/{room:str}/sessions/members", dependencies=VERBS)
async def members(verbs: VerbsDep, room: FromPath[str]) -> dict[str, Any]:
    present = await verbs.call(NOBODY, "room_members", room=room)
    floors = await verbs.call(NOBODY, "room_floors", room=room)
    return {
        "room": room,
        "members": [{"handle": m["handle"], "kind": m["kind"], "seen_at": m["seen_at"].isoformat(),
                     "expires_at": m["expires_at"].isoformat()} for m in present],
        "floors": [{"thread": short_id(f["episode"]), "episode": f["episode"], "key": f["key"],
                    "title": f["title"], "holder": f["holder"], "speakers": list(f["speakers"])}
                   for f in floors],
    }


ROUTES = [members]
