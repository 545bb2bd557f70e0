"""A mirror file that cannot be written is reported once per change (the log, /health) while the
follower goes on with every other change and room, and its position still advances."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from mycelium.mirror.files import memory_path
from mycelium.mirror.follower import Unwritable, apply_pending, export_all
from mycelium.mirror.render import parse_file
from mycelium.verbs import verbs_on

FOLLOWER_LOG = "mycelium.mirror.follower"


async def w(conn, room, key, text, by="ana"):
    await conn.execute("SELECT * FROM mycelium.write_memory($1, $2, to_jsonb($3::text), $4)", room, key, text, by)


def block(root: Path, room: str) -> Path:
    """A plain file where the room's ``notes`` folder must go: nothing below it can be written."""
    blocker = root / "rooms" / room / "notes"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("in the way")
    return blocker


class Recorder(logging.Handler):
    """The follower's log records (the hub's own logging setup leaves pytest's capture out)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def wait_for(check, seconds: float = 10.0):
    for _ in range(int(seconds / 0.05)):
        if result := check():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def test_an_unwritable_file_is_skipped_and_everything_else_is_written(admin_conn, db_dsn, tmp_path):
    import asyncpg

    from mycelium.db.pool import setup_connection

    conn = await asyncpg.connect(db_dsn)
    await setup_connection(conn)
    try:
        for room in ("a", "b"):
            await admin_conn.execute("SELECT mycelium.create_room($1)", room)
        block(tmp_path, "a")
        await w(admin_conn, "a", "notes/x", "blocked")
        await w(admin_conn, "a", "top", "fine")
        await w(admin_conn, "b", "notes/x", "fine too")
        unwritable = Unwritable()
        applied = await apply_pending(verbs_on(conn), tmp_path, unwritable=unwritable)
        assert applied.written == 2 and len(applied.failed) == 1
        assert "room 'a' key 'notes/x'" in applied.failed[0]
        assert (tmp_path / "rooms" / "a" / "top.md").exists()
        assert parse_file(memory_path(tmp_path, "b", "notes/x").read_text()).body == "fine too"
        # the position advanced: the failed change is not tried again by itself
        again = await apply_pending(verbs_on(conn), tmp_path, unwritable=unwritable)
        assert (again.changes, again.failed) == (0, [])
        assert len(unwritable.files) == 1
        # export retries every file: still blocked, said so, the rest written
        exported = await export_all(verbs_on(conn), tmp_path)
        assert len(exported.failed) == 1 and "notes/x" in exported.failed[0]
        # a later change of the same memory is tried again, and succeeds once the way is clear
        (tmp_path / "rooms" / "a" / "notes").unlink()
        await w(admin_conn, "a", "notes/x", "unblocked")
        fixed = await apply_pending(verbs_on(conn), tmp_path, unwritable=unwritable)
        assert fixed.written == 1 and fixed.failed == [] and unwritable.files == {}
        assert parse_file(memory_path(tmp_path, "a", "notes/x").read_text()).body == "unblocked"
    finally:
        await conn.close()


@pytest.mark.slow
async def test_the_hub_reports_an_unwritable_file_once_and_keeps_mirroring(
        admin_conn, db_dsn, settings_for, tmp_path):
    from mycelium.api.app import create_app
    from mycelium.hub import Hub
    from mycelium.workers.catalogue import default_loops

    data = tmp_path / "data"
    settings = settings_for(db_dsn, mirror=True, embedder="none", data_dir=data)
    hub = Hub(settings, loops=default_loops(settings))
    recorder = Recorder()
    logging.getLogger(FOLLOWER_LOG).addHandler(recorder)
    try:
        await _report_once(admin_conn, create_app(settings, hub=hub), data, recorder)
    finally:
        logging.getLogger(FOLLOWER_LOG).removeHandler(recorder)


async def _report_once(admin_conn, app, data: Path, recorder: Recorder) -> None:
    async with AsyncTestClient(app=app) as client:
        await admin_conn.execute("SELECT mycelium.create_room('a')")
        await admin_conn.execute("SELECT mycelium.create_room('b')")
        block(data, "a")
        await w(admin_conn, "a", "notes/x", "blocked")
        await admin_conn.execute("SELECT * FROM mycelium.write_memory('b', 'notes/y', '\"written\"', 'ana')")
        b_file = memory_path(data, "b", "notes/y")
        await wait_for(b_file.exists)
        await asyncio.sleep(3.5)  # the follower has looked again three times since

        health = (await client.get("/health")).json()
        loop = next(lp for lp in health["loops"] if lp["loop"] == "mirror")
        assert loop["state"] == "running" and loop["failures"] == 0
        assert loop["warning"].startswith("1 mirror file cannot be written; latest: room 'a' key 'notes/x'")
        assert "NotADirectoryError" in loop["warning"] or "FileExistsError" in loop["warning"]
        assert health["status"] == "degraded" and health["problems"] == [f"mirror: {loop['warning']}"]
        said = [r for r in recorder.records if "notes/x" in r.getMessage()]
        assert len(said) == 1 and said[0].exc_info is None  # once, without a traceback

        # the other rooms go on: a new write in b is mirrored; the way cleared, a's next change is too
        await admin_conn.execute("SELECT * FROM mycelium.write_memory('b', 'z', '\"later\"', 'ana')")
        await wait_for(memory_path(data, "b", "z").exists)
        (data / "rooms" / "a" / "notes").unlink()
        await admin_conn.execute("SELECT * FROM mycelium.write_memory('a', 'notes/x', '\"now\"', 'ana')")
        a_file = memory_path(data, "a", "notes/x")
        await wait_for(a_file.exists)
        await asyncio.sleep(1.5)
        health = (await client.get("/health")).json()
        loop = next(lp for lp in health["loops"] if lp["loop"] == "mirror")
        assert loop["warning"] is None and health["status"] == "ok"
        assert len(recorder.records) == 1
