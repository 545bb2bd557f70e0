"""Fixtures of the aligner tests: the engines tests' scripted agents, in-process engines loops and
`mycelium worker` processes, plus a room with a task and an aligner."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from tests.engines.conftest import (  # noqa: F401 (fixtures)
    agents,
    engine_workers,
    engines_hub,
    eventually,
    hub_process,
    make_task,
    run_of,
)

Rule = Callable[[str], str | None]


async def setup_room(conn: asyncpg.Connection, room: str = "atlas", engine: str = "aligner") -> None:
    await conn.execute("SELECT mycelium.create_room($1)", room)
    await conn.execute(
        "SELECT * FROM mycelium.create_engine($1, $2, 'aligner', 'brokers negotiations', 'julia')", room, engine
    )


async def summon(conn: asyncpg.Connection, room: str, key: str, text: str, by: str = "julia") -> None:
    """``board coordinate <key> aligner "<text>"``, from psql."""
    await conn.execute("SELECT * FROM mycelium.coordinate($1, $2, 'aligner', $3, $4)", room, key, text, by)


def scripted(opening: str | None, moves: list[str | None] | Callable[[str], str | None]) -> Rule:
    """A member that answers the opening with ``opening`` and its n-th turn with ``moves[n]`` (the
    last one again when the list runs out; None: silence), or with ``moves(text)``."""
    n = {"i": 0}

    def rule(text: str) -> str | None:
        if "· opening positions ·" in text:
            return opening
        if "· clarify terms ·" in text:
            return "By that I mean what I said."
        if "· move " not in text:
            return None
        if callable(moves):
            return moves(text)
        i = min(n["i"], len(moves) - 1)
        n["i"] += 1
        return moves[i]

    return rule


async def closed(
    conn: asyncpg.Connection, episode: str, timeout: float = 60.0, room: str = "atlas"
) -> asyncpg.Record:
    async def done():
        r = await run_of(conn, room, episode)
        return r if r is not None and r["state"] != "open" else None

    return await eventually(done, timeout=timeout, step=0.05)


async def trace(conn: asyncpg.Connection, run_id: int, room: str = "atlas") -> list[dict]:
    rows = await conn.fetch(
        "SELECT entry FROM mycelium.engine_trace WHERE room = $2 AND run_id = $1 ORDER BY turn", run_id, room
    )
    return [r["entry"] for r in rows]


async def questions(conn: asyncpg.Connection, episode: str) -> list[dict]:
    """Every question the aligner posted in the thread, read from the timeline itself."""
    rows = await conn.fetch(
        "SELECT payload -> 'aligner' AS line FROM mycelium.messages WHERE episode = $1 AND sender = 'aligner' "
        "AND payload -> 'aligner' ->> 'event' = 'turn' ORDER BY position",
        episode,
    )
    return [r["line"] for r in rows]
