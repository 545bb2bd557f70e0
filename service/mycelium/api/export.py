"""``GET /api/rooms/{room}/export[?since=…]``: the room's compliance bundle (a zip; see
mycelium.export.bundle), signed with this hub's receipt key. Every read is an operator's verb."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from litestar import Response, get
from litestar.params import FromPath, FromQuery

from mycelium.api.deps import VERBS, HubDep, VerbsDep
from mycelium.export import bundle
from mycelium.ledger.receipts import KeyStore
from mycelium.verbs import HUB_PRINCIPAL, NOBODY, verbs_of
from mycelium.workers.receipts import register, sign_pending

EXPORT_PAGE = 10_000


@get("/api/rooms/{room:str}/export", dependencies=VERBS)
async def export_room(hub: HubDep, verbs: VerbsDep, room: FromPath[str],
                      since: FromQuery[datetime | None] = None) -> Response[bytes]:
    room_row = await verbs.call(NOBODY, "export_room", room=room)
    key = await asyncio.to_thread(KeyStore.for_data_dir(hub.settings.resolved_data_dir()).current)
    own = verbs_of(hub, HUB_PRINCIPAL)  # the hub's own signer
    await register(own, key)  # (a replica without the signer loop has not yet)
    await sign_pending(own, key)  # every receipt so far signed before it is exported
    receipts: list[Any] = []
    while True:
        page = await verbs.call(NOBODY, "export_receipts", since=since, agent=None,
                                after=receipts[-1]["id"] if receipts else 0, limit=EXPORT_PAGE)
        receipts += page
        if len(page) < EXPORT_PAGE:
            break
    parts = {
        "room.jsonl": [room_row],
        "messages.jsonl": await verbs.call(NOBODY, "export_messages", room=room, since=since),
        "memories.jsonl": await verbs.call(NOBODY, "export_memories", room=room),
        "memory_versions.jsonl": await verbs.call(NOBODY, "export_memory_versions", room=room),
        "leases.jsonl": await verbs.call(NOBODY, "export_leases", room=room),
        "transitions.jsonl": await verbs.call(NOBODY, "export_transitions", since=since),
        "receipts.jsonl": receipts,
        "audit.jsonl": await verbs.call(NOBODY, "export_audit"),
        "keys.jsonl": await verbs.call(NOBODY, "export_public_keys"),
    }
    data = await asyncio.to_thread(bundle.build, room, since, parts, key)
    return Response(data, media_type="application/zip",
                    headers={"Content-Disposition": 'attachment; filename="mycelium-export.zip"'})
