"""Fixtures of the distil tests (the task compiler and the synthesizer): a room with a task and an
aligner engine, converged runs made as the aligner makes them (a run in the task's thread, closed
with its agreement), and `mycelium worker --only compile` processes with a scripted model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.engines.conftest import engines_hub, eventually, make_task  # noqa: F401 (fixtures, helpers)
from tests.workers.conftest import worker_processes

CAST = ["julia", "nova"]


async def setup_room(conn: asyncpg.Connection, room: str = "atlas") -> None:
    await conn.execute("SELECT mycelium.create_room($1)", room)
    await conn.execute("SELECT * FROM mycelium.create_engine($1, 'aligner', 'aligner', 'negotiates', 'julia')", room)


async def open_run(conn: asyncpg.Connection, room: str, key: str, episode: str, summon: int = 1) -> int:
    """An open aligner run in the task's thread (what start_engine_run makes), its id."""
    return await conn.fetchval(
        "INSERT INTO mycelium.engine_runs (room, engine, kind, episode, task_key, summon_id, protocol, flow) "
        "VALUES ($1, 'aligner', 'aligner', $2, $3, $4, 'negotiate', $5) RETURNING id",
        room, episode, key, summon, {"cast": CAST})


async def converge(conn: asyncpg.Connection, room: str, run: int, assignments: dict | None,
                   state: str = "converged") -> None:
    """Close a run as the aligner does: its state and agreement in one UPDATE."""
    await conn.execute(
        "UPDATE mycelium.engine_runs SET state = $3, assignments = $4, closed_at = now(), lease_owner = NULL, "
        "lease_until = NULL WHERE room = $1 AND id = $2",
        room, run, state, assignments)


async def converged_task(conn: asyncpg.Connection, title: str, assignments: dict, room: str = "atlas",
                         summon: int = 1) -> tuple[str, str, int]:
    """A task and a run in its thread that converged on ``assignments``: key, thread, run id."""
    key, episode = await make_task(conn, room, title)
    run = await open_run(conn, room, key, episode, summon)
    await converge(conn, room, run, assignments)
    return key, episode, run


async def job_of(conn: asyncpg.Connection, run: int, room: str = "atlas") -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM mycelium.compile_jobs WHERE room = $1 AND run_id = $2", room, run)


async def compiled(conn: asyncpg.Connection, run: int, room: str = "atlas", timeout: float = 60.0) -> asyncpg.Record:
    """The run's compile job once it is done."""
    async def done():
        j = await job_of(conn, run, room)
        return j if j is not None and j["state"] == "done" else None

    return await eventually(done, timeout=timeout)


async def filed_rows(conn: asyncpg.Connection, room: str = "atlas") -> list[asyncpg.Record]:
    """Every work/ row the engine filed, with its frontmatter, oldest first."""
    return await conn.fetch(
        "SELECT key, meta, value ->> 'text' AS text, created_by, version FROM mycelium.memories "
        "WHERE room = $1 AND key LIKE 'work/%' AND created_by = 'aligner' ORDER BY created_at, key", room)


async def filed_notices(conn: asyncpg.Connection, room: str = "atlas") -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT payload FROM mycelium.messages WHERE room = $1 AND payload_type = 'notice' "
        "AND payload ->> 'subkind' = 'filed' AND payload ->> 'by' = 'aligner' ORDER BY position", room)


def script(tmp_path: Path, rules: list[dict], name: str = "model.json") -> str:
    """A model script (JSON is YAML) of these rules; its path."""
    path = tmp_path / name
    path.write_text(json.dumps({"rules": rules}))
    return str(path)


@pytest.fixture
def compile_workers(db_dsn: str, tmp_path: Path) -> Iterator:
    """`mycelium worker --only compile` processes on this test's database (killed at the end)."""
    yield from worker_processes(db_dsn, tmp_path, "compile",
                                {"MYCELIUM_MODEL_SCRIPT": "", "MYCELIUM_LLM_URL": "", "MYCELIUM_PI_MODEL": ""})
