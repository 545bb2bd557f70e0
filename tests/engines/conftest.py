"""Fixtures of the engines tests: a room with a task and a conductor, scripted agents that await
their turns and answer them (through the database's own verbs, as `mycelium await`/`respond` do), an
engines loop in this process, and `mycelium worker` processes running only the engines."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest

from tests.conversations.conftest import hub_process  # noqa: F401 (`mycelium up` processes)
from tests.workers.conftest import worker_processes

Rule = Callable[[str], str | None]


async def eventually(check, timeout: float = 30.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s (last: {got!r})")
        await asyncio.sleep(step)


async def make_task(conn: asyncpg.Connection, room: str, title: str, by: str = "julia") -> tuple[str, str]:
    """A task row in ``room``: its key and its thread."""
    row = await conn.fetchrow("SELECT key, episode FROM mycelium.create_task($1, $2, $3)", room, title, by)
    return row["key"], row["episode"]


async def setup_room(conn: asyncpg.Connection, room: str = "atlas", engine: str = "conductor") -> None:
    await conn.execute("SELECT mycelium.create_room($1)", room)
    await conn.execute(
        "SELECT * FROM mycelium.create_engine($1, $2, 'conductor', 'walks flows', 'julia')", room, engine
    )


async def coordinate(
    conn: asyncpg.Connection, room: str, key: str, text: str, by: str = "julia", engine: str = "conductor"
) -> None:
    await conn.execute("SELECT * FROM mycelium.coordinate($1, $2, $3, $4, $5)", room, key, engine, text, by)


@dataclass
class Agent:
    """A scripted member: takes its next turn from its inbox and answers it in the thread it came
    from, with the first rule that returns text (no answer: it stays silent)."""

    dsn: str
    room: str
    handle: str
    rule: Rule
    answered: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    async def run(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            while True:
                row = await conn.fetchrow("SELECT * FROM mycelium.take_next($1, $2)", self.room, self.handle)
                if row is None:
                    await asyncio.sleep(0.03)
                    continue
                self.seen.append(row["text"])
                if row["sender"] == "system":
                    continue
                text = self.rule(row["text"])
                if text is None:
                    continue
                await conn.execute(
                    "SELECT * FROM mycelium.reply($1, $2, $3, NULL, $4)",
                    self.room,
                    self.handle,
                    text,
                    row["episode"],
                )
                self.answered.append(text)
        finally:
            await conn.close()


@pytest.fixture
async def agents(db_dsn: str) -> AsyncIterator[Callable[..., Agent]]:
    tasks: list[asyncio.Task[None]] = []

    def start(handle: str, rule: Rule, room: str = "atlas") -> Agent:
        a = Agent(db_dsn, room, handle, rule)
        tasks.append(asyncio.create_task(a.run()))
        return a

    yield start
    for t in tasks:
        t.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


@pytest.fixture
async def engines_hub(db_dsn: str, settings_for, monkeypatch) -> AsyncIterator[Callable[..., object]]:
    """Start hubs in this process that run only the engines loop."""
    from mycelium.hub import Hub
    from mycelium.workers.engines import ENGINES

    started: list[Hub] = []

    async def start(**env: str) -> Hub:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        h = Hub(settings_for(db_dsn, embedder="none"), loops=[ENGINES], kind="worker")
        await h.start()
        started.append(h)
        return h

    yield start
    for h in started:
        await h.stop()


@pytest.fixture
def engine_workers(db_dsn: str, tmp_path: Path):
    """`mycelium worker --only engines` processes on this test's database (killed at the end)."""
    yield from worker_processes(db_dsn, tmp_path, "engines", {})


async def run_of(conn: asyncpg.Connection, room: str, episode: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT * FROM mycelium.engine_runs WHERE room = $1 AND episode = $2 ORDER BY id DESC LIMIT 1",
        room,
        episode,
    )


async def closed_run(
    conn: asyncpg.Connection, room: str, episode: str, timeout: float = 60.0
) -> asyncpg.Record:
    async def closed():
        r = await run_of(conn, room, episode)
        return r if r is not None and r["state"] != "open" else None

    return await eventually(closed, timeout=timeout)


async def trace_of(conn: asyncpg.Connection, room: str, run_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT * FROM mycelium.engine_trace WHERE room = $1 AND run_id = $2 ORDER BY turn", room, run_id
    )


async def posts_of(conn: asyncpg.Connection, room: str, run_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        """SELECT p.seq, p.event, p.turn, m.content, m.recipients, m.kind, m.subkind, m.payload, m.position
           FROM mycelium.engine_posts p JOIN mycelium.messages m ON m.room = p.room AND m.id = p.message_id
           WHERE p.room = $1 AND p.run_id = $2 ORDER BY p.seq""",
        room,
        run_id,
    )
