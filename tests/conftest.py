"""Test harness: a real PostgreSQL (the embedded one, or ``DATABASE_URL``), one migrated template
database per session, and a fresh copy of it per test (``CREATE DATABASE … TEMPLATE``)."""

from __future__ import annotations

import itertools
import os
import signal
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, and so would
# every process it starts: the Ctrl-C tests would send a signal nobody hears. Processes inherit a
# handler as the default action, which Python turns into KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Hubs the suite starts run no SLIM node and no channel publisher unless a test asks for them
# (tests/slim), so parallel tests never contend for the node's port.
os.environ.setdefault("MYCELIUM_SLIM", "off")

from mycelium.db import migrate  # noqa: E402
from mycelium.db.embedded import EmbeddedPostgres  # noqa: E402
from tests.support.apps import app_for  # noqa: E402
from tests.support.hubs import hub_processes, shared_hub, shared_room  # noqa: E402, F401 (fixtures)
from tests.support.wheel import wheel  # noqa: E402, F401 (the session's one wheel, a fixture)

_counter = itertools.count()


def with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


class Server:
    """The PostgreSQL server the suite runs on, and how to make databases on it."""

    def __init__(self, admin_dsn: str, embedded: EmbeddedPostgres | None) -> None:
        self.admin_dsn = admin_dsn
        self.embedded = embedded
        self.template = f"mycelium_tpl_{os.getpid()}"

    def dsn(self, database: str) -> str:
        return with_database(self.admin_dsn, database)

    async def admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn("postgres"))

    async def create_database(self, template: str | None = None) -> str:
        name = f"mycelium_t{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
        conn = await self.admin()
        try:
            source = template or self.template
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}" STRATEGY FILE_COPY')
        finally:
            await conn.close()
        return name

    async def drop_database(self, name: str) -> None:
        conn = await self.admin()
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    url = os.environ.get("DATABASE_URL")
    embedded = None
    if url:
        admin = url
    else:
        folder = Path(tempfile.mkdtemp(prefix="mycelium-test-"))
        embedded = EmbeddedPostgres(folder)
        admin = embedded.attach()
    server = Server(admin, embedded)
    import asyncio

    async def make_template() -> None:
        conn = await server.admin()
        try:
            if embedded is not None:
                # a throwaway server in a temporary folder: nothing needs to survive a power cut, so
                # no fsync (a clone and a drop per test, 99 ms with it, take 30 ms without)
                for setting in ("fsync", "full_page_writes", "synchronous_commit"):
                    await conn.execute(f"ALTER SYSTEM SET {setting} = off")
                await conn.fetchval("SELECT pg_reload_conf()")
            await conn.execute(f'DROP DATABASE IF EXISTS "{server.template}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{server.template}"')
        finally:
            await conn.close()

    asyncio.run(make_template())
    migrate.upgrade(server.dsn(server.template))
    try:
        yield server
    finally:
        async def drop_template() -> None:
            conn = await server.admin()
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{server.template}" WITH (FORCE)')
            finally:
                await conn.close()

        asyncio.run(drop_template())
        if embedded is not None:
            embedded.detach()


@pytest.fixture
async def db_dsn(pg_server: Server) -> AsyncIterator[str]:
    """A DSN (as the server's admin user) to a fresh, migrated database of this test's own."""
    name = await pg_server.create_database()
    try:
        yield pg_server.dsn(name)
    finally:
        await pg_server.drop_database(name)


@pytest.fixture
async def empty_dsn(pg_server: Server) -> AsyncIterator[str]:
    """A DSN (as the admin) to a database made from template1: nothing of the hub in it."""
    name = await pg_server.create_database(template="template1")
    try:
        yield pg_server.dsn(name)
    finally:
        await pg_server.drop_database(name)


@pytest.fixture
async def admin_conn(db_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection as the admin (superuser on the embedded server): "a person in psql"."""
    from mycelium.db.pool import setup_connection

    conn = await asyncpg.connect(db_dsn)
    await setup_connection(conn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def embedder():
    """The real offline model, loaded once for the session."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mycelium.embed import make_embedder

    return make_embedder("minilm", url=None, model="", api_key=None)


@pytest.fixture
def settings_for(tmp_path: Path):
    """Settings for a hub on a given test database (mirror off unless asked)."""
    from mycelium.settings import Settings

    def make(dsn: str, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "database_url": dsn, "data_dir": tmp_path / "data", "migrate_on_start": False,
            "mirror": False, "pool_min_size": 1, "pool_max_size": 10,
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    return make


@pytest.fixture
async def hub(db_dsn: str, settings_for, embedder):
    """A started hub (no HTTP) on this test's database, with the real embedder."""
    from mycelium.hub import Hub

    h = Hub(settings_for(db_dsn, embedder="none"))
    await h.start()
    h.embedder = embedder
    try:
        yield h
    finally:
        await h.stop()


@pytest.fixture
async def client(db_dsn: str, settings_for, embedder):
    """An HTTP client on the real Litestar app (ASGI, in process) over this test's database."""
    from litestar.testing import AsyncTestClient

    from mycelium.hub import Hub

    h = Hub(settings_for(db_dsn, embedder="none"))

    def ready(started: Hub) -> None:
        started.embedder = embedder

    with app_for(h, ready) as app:
        async with AsyncTestClient(app=app) as c:
            yield c
