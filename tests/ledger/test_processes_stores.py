"""Two real processes redispatching one call on every shared store (file, Redis, Postgres, the hub):
the side effect runs once. And Redis going away in the middle of a call: the caller gets
LedgerStorageUnavailableError, the redispatch after the restart is blocked, the effect ran once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ledger.test_processes import effects, finish, spawn, wait_for
from tests.support.processes import HubProcess

pytestmark = pytest.mark.slow


@pytest.fixture(params=["file", "redis", "postgres", "hub"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path):
    kind = request.param
    if kind == "file":
        yield (tmp_path / "ledger").as_uri()
    elif kind == "redis":
        yield request.getfixturevalue("redis_url")
    elif kind == "postgres":
        yield request.getfixturevalue("db_dsn")
    else:
        hub = HubProcess(data_dir=tmp_path / "hub", database_url=request.getfixturevalue("db_dsn"),
                         extra=["--no-mirror"])
        try:
            hub.wait_ready()
            yield hub.url
        finally:
            hub.stop()


def test_two_processes_redispatching_one_call_run_its_side_effect_once_on_every_shared_store(
    shared_url, tmp_path
):
    a, ready = spawn("slow", shared_url, tmp_path, "a", "--sleep", "1.0")
    wait_for(ready, a)
    b, _ = spawn("slow", shared_url, tmp_path, "b", "--sleep", "1.0")
    first, second = finish(a), finish(b)
    assert first["result"]["pid"] == a.pid
    assert second["result"] == first["result"]  # B waited for A and returned A's result
    assert effects(tmp_path) == 1


def test_redis_restarting_mid_call_is_unavailable_to_the_caller_and_never_a_second_effect(
    redis_server, redis_url, tmp_path
):
    a, ready = spawn("slow", redis_url, tmp_path, "a", "--sleep", "2.0", "--lease", "1")
    wait_for(ready, a)  # A crossed the side-effect boundary and is finishing its body
    redis_server.stop()
    try:
        first = finish(a)  # its completion cannot be recorded
    finally:
        redis_server.start()
    assert first["error"] == "LedgerStorageUnavailableError", first
    b, _ = spawn("slow", redis_url, tmp_path, "b", "--sleep", "0", "--lease", "1")
    second = finish(b)
    # the row survived the restart (append-only file): in flight past its lease with the boundary
    # crossed, so the redispatch is parked for a human instead of paying twice
    assert second["error"] == "LedgerHardBlockError", second
    assert effects(tmp_path) == 1
