"""`mycelium up` on the embedded server: clean stops on Ctrl-C and SIGTERM, data reused on the next
start, and a hub killed with -9 leaves nothing the next start cannot recover from by itself."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from mycelium.db.embedded import EmbeddedPostgres
from tests.support.processes import HubProcess

pytestmark = pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="exercises the embedded server")


def postgres_running(data_dir) -> bool:
    return EmbeddedPostgres(data_dir)._running()


@pytest.mark.slow
def test_up_stops_cleanly_reuses_its_data_and_recovers_from_kill_9(tmp_path):
    data = tmp_path / "data"

    hub = HubProcess(data_dir=data)
    health = hub.wait_ready()
    assert health["database"] == "embedded" and health["pgvector"].startswith("0.8")
    assert httpx.post(hub.url + "/api/rooms", json={"name": "kept"}).status_code == 201
    assert hub.signal(signal.SIGINT) == 0  # Ctrl-C
    assert not postgres_running(data)
    assert not (data / "pg" / "postmaster.pid").exists()

    hub = HubProcess(data_dir=data)
    hub.wait_ready()
    assert httpx.get(hub.url + "/api/rooms/kept").status_code == 200  # the data is reused
    assert hub.signal(signal.SIGTERM) == 0
    assert not postgres_running(data)

    hub = HubProcess(data_dir=data)
    hub.wait_ready()
    hub.kill()  # kill -9: the server is orphaned, still running
    assert postgres_running(data)

    hub = HubProcess(data_dir=data)
    hub.wait_ready()  # adopts the orphan
    assert httpx.get(hub.url + "/api/rooms/kept").status_code == 200
    assert hub.signal(signal.SIGTERM) == 0
    assert not postgres_running(data)


@pytest.mark.slow
def test_two_hubs_share_one_embedded_server_and_the_last_one_stops_it(tmp_path):
    data = tmp_path / "data"
    first = HubProcess(data_dir=data)
    first.wait_ready()
    second = HubProcess(data_dir=data, extra=["--no-mirror"])
    second.wait_ready()
    assert httpx.post(first.url + "/api/rooms", json={"name": "shared"}).status_code == 201
    assert httpx.get(second.url + "/api/rooms/shared").status_code == 200
    assert first.signal(signal.SIGTERM) == 0
    assert postgres_running(data)  # the second hub still uses it
    assert httpx.get(second.url + "/api/rooms/shared").status_code == 200
    assert second.signal(signal.SIGTERM) == 0
    assert not postgres_running(data)


@pytest.mark.slow
def test_a_stale_postmaster_pid_does_not_block_a_start(tmp_path):
    data = tmp_path / "data"
    hub = HubProcess(data_dir=data)
    hub.wait_ready()
    assert hub.signal(signal.SIGTERM) == 0
    (data / "pg" / "postmaster.pid").write_text("999999\n" + str(data / "pg") + "\n")
    hub = HubProcess(data_dir=data)
    hub.wait_ready()
    assert hub.signal(signal.SIGTERM) == 0
