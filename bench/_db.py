"""Shared by the benchmarks: a fresh, migrated database of the bench's own.

On the server at ``DATABASE_URL`` when it is set, else on an embedded server in a temporary folder
(stopped again when the bench leaves).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from mycelium.db import migrate
from mycelium.db.embedded import EmbeddedPostgres


def with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


class BenchDatabase(NamedTuple):
    dsn: str
    postmaster: int | None  # the embedded server's postmaster pid (its CPU is the server's); None on DATABASE_URL


@asynccontextmanager
async def bench_database(name: str) -> AsyncIterator[BenchDatabase]:
    """Yield database ``name``, dropped and created afresh, migrated to head."""
    server = None
    if os.environ.get("DATABASE_URL"):
        admin = os.environ["DATABASE_URL"]
    else:
        scratch = Path(tempfile.mkdtemp(prefix="mycelium-bench-"))
        server = EmbeddedPostgres(scratch)
        admin = await asyncio.to_thread(server.attach)
    try:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        dsn = with_database(admin, name)
        await asyncio.to_thread(migrate.upgrade, dsn)
        yield BenchDatabase(dsn, server.postmaster_pid() if server is not None else None)
    finally:
        if server is not None:
            await asyncio.to_thread(server.detach)
            shutil.rmtree(scratch, ignore_errors=True)  # the server's data: nothing here outlives the run
