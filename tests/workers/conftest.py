"""Helpers for the background-loop tests: `mycelium worker` processes, who holds a loop's lock, and
the deployment report."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import asyncpg

from tests.support.processes import CliProcess

READY = re.compile(r"^mycelium worker ([0-9a-f-]{36}): loops ", re.MULTILINE)


class WorkerProcess(CliProcess):
    """A `mycelium worker` subprocess on a given database."""

    def __init__(self, *, data_dir: Path, database_url: str, extra: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(["worker", "--data-dir", str(data_dir), "--database-url", database_url, *extra],
                         data_dir.parent / f"worker-{data_dir.name}.log",
                         {"MYCELIUM_EMBEDDER": "none", "HF_HUB_OFFLINE": "1", **(env or {})})
        self.worker_id = ""

    def wait_ready(self, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = READY.search(self.log.read_text())
            if found:
                self.worker_id = found.group(1)
                return self.worker_id
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise TimeoutError(f"worker not ready:\n{self.log.read_text()}")


def worker_processes(db_dsn: str, tmp_path: Path, loop: str, base_env: dict[str, str]
                     ) -> Iterator[Callable[..., WorkerProcess]]:
    """A fixture's body: start ``mycelium worker --only <loop>`` processes on the test's database
    (``start(**env)``, each with ``base_env`` and then ``env``); every one still running is killed at
    the end."""
    procs: list[WorkerProcess] = []

    def start(**env: str) -> WorkerProcess:
        w = WorkerProcess(data_dir=tmp_path / f"w{len(procs)}", database_url=db_dsn, extra=["--only", loop],
                          env={"MYCELIUM_MIGRATE_ON_START": "false", **base_env, **env})
        procs.append(w)
        return w

    yield start
    for w in procs:
        if w.proc.poll() is None:
            w.kill()


async def lock_holders(conn: asyncpg.Connection, lock: str) -> list[str]:
    """The application names of the sessions holding a loop's lock (``pg_try_advisory_lock(hashtext(lock))``),
    read from the server's own lock table."""
    rows = await conn.fetch(
        """SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtext($1)::bigint""",
        lock,
    )
    return [r["application_name"] for r in rows]


async def report(conn: asyncpg.Connection, alive_within: float = 10.0) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM mycelium.worker_report(make_interval(secs => $1))", alive_within)


async def leaders(conn: asyncpg.Connection, loop: str) -> list[str]:
    """The workers the report says lead ``loop``."""
    return [str(r["worker_id"]) for r in await report(conn) if r["loop"] == loop and r["leader"]]
