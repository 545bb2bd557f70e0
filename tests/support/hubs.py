"""`mycelium up` processes for tests, as fixtures (tests/conftest.py exposes them):

- ``hub_processes``: start hubs on this test's own database (``db_dsn``); all stopped at its end;
- ``shared_hub``: one hub for the whole session (per xdist worker), on a database of its own, for
  tests that only drive it over HTTP or the CLI and need no database of their own: each keeps to a
  room of its own (``shared_room``) so they stay independent of each other and of their order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from tests.support.processes import HubProcess


@contextlib.contextmanager
def running_hubs(folder: Path, database_url: str | None) -> Iterator[Callable[..., HubProcess]]:
    """``start(extra=..., env=..., database_url=...)`` starts a hub in ``folder`` and waits until it
    answers; every hub started is stopped on leaving."""
    started: list[HubProcess] = []

    def start(extra: Sequence[str] = ("--no-mirror",), env: dict[str, str] | None = None,
              database_url: str | None = database_url, wait: bool = True) -> HubProcess:
        hub = HubProcess(data_dir=folder / f"hub{len(started)}", database_url=database_url, extra=extra,
                         env=env)
        started.append(hub)
        if wait:
            hub.wait_ready()
        return hub

    try:
        yield start
    finally:
        for hub in started:
            with contextlib.suppress(Exception):
                hub.stop()


@pytest.fixture
def hub_processes(db_dsn: str, tmp_path: Path) -> Iterator[Callable[..., HubProcess]]:
    """Start ``mycelium up`` processes on this test's database (stopped at the end)."""
    with running_hubs(tmp_path, db_dsn) as start:
        yield start


@contextlib.contextmanager
def hub_on_a_new_database(pg_server, folder: Path, extra: Sequence[str] = ("--no-mirror",)
                          ) -> Iterator[HubProcess]:
    """One hub on a fresh database of its own (dropped afterwards), for a module or a session."""
    name = asyncio.run(pg_server.create_database())
    try:
        with running_hubs(folder, pg_server.dsn(name)) as start:
            hub = start(extra=extra)
            hub.dsn = pg_server.dsn(name)
            yield hub
    finally:
        asyncio.run(pg_server.drop_database(name))


@pytest.fixture(scope="session")
def shared_hub(pg_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    with hub_on_a_new_database(pg_server, tmp_path_factory.mktemp("shared-hub")) as hub:
        yield hub


@pytest.fixture
def shared_room(shared_hub: HubProcess, request: pytest.FixtureRequest) -> str:
    """A fresh room of this test's own on the shared hub (named after the test)."""
    base = "r-" + request.node.name.replace("_", "-")[5:60]
    for n in range(1, 100):
        name = base if n == 1 else f"{base[:57]}-{n}"
        r = httpx.post(shared_hub.url + "/api/rooms", json={"name": name})
        if r.status_code != 409:  # taken by a test of the same name in another module
            break
    assert r.status_code == 201, r.text
    return name
