"""Board fixtures: a room, its notices, and ways to move the database clock's view of a lease."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

ROOM = "atlas"


@pytest.fixture
async def room(admin_conn: asyncpg.Connection) -> str:
    await admin_conn.execute("SELECT mycelium.create_room($1)", ROOM)
    return ROOM


async def notices(conn: asyncpg.Connection, room: str = ROOM,
                  subkind: str | None = None) -> list[dict[str, Any]]:
    """The room's notices in timeline order (payload only)."""
    rows = await conn.fetch(
        "SELECT payload FROM mycelium.messages WHERE room = $1 AND payload_type = 'notice'"
        " AND ($2::text IS NULL OR payload->>'subkind' = $2) ORDER BY position",
        room, subkind,
    )
    return [r["payload"] for r in rows]


async def task(conn: asyncpg.Connection, title: str, by: str = "julia", room: str = ROOM, **kw: Any) -> str:
    return await conn.fetchval(
        "SELECT key FROM mycelium.create_task($1, $2, $3, $4, $5, $6)",
        room, title, by, kw.get("key"), kw.get("assignee"), kw.get("parent"),
    )


async def fields(conn: asyncpg.Connection, key: str, values: dict[str, Any], by: str = "julia",
                 room: str = ROOM) -> None:
    await conn.execute("SELECT 1 FROM mycelium.write_fields($1, $2, $3, $4)", room, key, by, values)


async def backdate(conn: asyncpg.Connection, key: str, minutes: float, room: str = ROOM) -> None:
    """Pretend the lease on ``key`` was claimed ``minutes`` ago (as a person in psql could)."""
    await conn.execute(
        "UPDATE mycelium.assignments SET claimed_at = now() - make_interval(secs => $3)"
        " WHERE room = $1 AND key = $2", room, key, minutes * 60)


async def refusal(conn: asyncpg.Connection, sql: str, *args: Any) -> tuple[int, dict[str, Any], str]:
    """Run ``sql`` expecting a refusal; (status, detail, message)."""
    import json

    with pytest.raises(asyncpg.PostgresError) as info:
        await conn.fetch(sql, *args)
    exc = info.value
    state = exc.sqlstate or ""
    assert state.startswith("MY"), f"not a refusal: {state} {exc}"
    return int(state[2:]), json.loads(exc.detail or "{}"), exc.message


async def episode(conn: asyncpg.Connection, key: str, room: str = ROOM) -> str:
    return await conn.fetchval("SELECT mycelium.episode_of($1, $2)", room, key)


def later(dsn: str, delay: float, sql: str, *args: Any) -> Any:
    """Run ``sql`` on its own connection from another thread after ``delay`` seconds (the in-process
    test client blocks the test's event loop while a request runs). Returns the thread to join."""
    import asyncio
    import threading
    import time

    def run() -> None:
        async def go() -> None:
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute(sql, *args)
            finally:
                await conn.close()

        time.sleep(delay)
        asyncio.run(go())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
