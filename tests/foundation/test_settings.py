"""Settings: a closed catalogue in the database, hub-wide or per room, checked on every write."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import asyncpg
import pytest

from tests.board.conftest import fields, task
from tests.support.cli import mycelium
from tests.support.processes import HubProcess


@pytest.fixture
async def atlas(client):
    r = await client.post("/api/rooms", json={"name": "atlas"})
    assert r.status_code == 201
    return "atlas"


def by_name(body):
    return {s["name"]: s for s in body["settings"]}


async def config_rows(conn):
    return [tuple(r) for r in await conn.fetch("SELECT room, name, value FROM mycelium.config ORDER BY 1, 2")]


async def test_every_setting_is_listed_with_its_default_until_written(client):
    r = await client.get("/api/config")
    assert r.status_code == 200
    got = by_name(r.json())
    assert r.json()["room"] is None
    assert set(got) == {"auth.gate", "board.dependency_gate", "files.max_bytes", "presence.ttl_seconds",
                        "runners.pause_after",
                        "runners.wake_grace_seconds", "workers.max_turns_per_room", "workers.timeout_seconds",
                        "workers.tools"}
    gate = got["board.dependency_gate"]
    assert (gate["value"], gate["source"], gate["value_type"], gate["default_value"]) == (False, "default", "boolean", False)
    ttl = got["presence.ttl_seconds"]
    assert (ttl["value"], ttl["min_value"], ttl["max_value"]) == (90, 1, 86400)


async def test_a_room_follows_the_hub_until_it_has_its_own_value_and_falls_back_when_cleared(client, atlas):
    r = await client.put("/api/config/board.dependency_gate", json={"value": True, "handle": "ops"})
    assert r.status_code == 200
    assert (r.json()["value"], r.json()["source"], r.json()["updated_by"]) == (True, "hub", "ops")
    room = by_name((await client.get("/api/rooms/atlas/config")).json())["board.dependency_gate"]
    assert (room["value"], room["source"], room["hub_value"], room["room_value"]) == (True, "hub", True, None)

    r = await client.put("/api/rooms/atlas/config/board.dependency_gate", json={"value": False})
    assert (r.json()["value"], r.json()["source"], r.json()["hub_value"]) == (False, "room", True)
    r = await client.delete("/api/rooms/atlas/config/board.dependency_gate", params={"by": "ops"})
    assert r.status_code == 200 and (r.json()["value"], r.json()["source"]) == (True, "hub")
    r = await client.put("/api/config/board.dependency_gate", json={"value": None})
    assert (r.json()["value"], r.json()["source"]) == (False, "default")


async def test_the_room_setting_is_what_the_claim_obeys(client, admin_conn, atlas):
    await task(admin_conn, "schema")
    await task(admin_conn, "api")
    await fields(admin_conn, "work/api", {"depends-on": "work/schema"})
    claim = {"key": "work/api", "handle": "api"}
    r = await client.put("/api/rooms/atlas/config/board.dependency_gate", json={"value": True})
    assert r.status_code == 200
    refused = await client.post("/api/rooms/atlas/assignments/claim", json=claim)
    assert refused.status_code == 409 and refused.json()["waiting_on"] == ["work/schema"]
    await client.delete("/api/rooms/atlas/config/board.dependency_gate")
    assert (await client.post("/api/rooms/atlas/assignments/claim", json=claim)).status_code == 200


@pytest.mark.parametrize(("path", "body", "status", "error"), [
    ("/api/config/board.no_such", {"value": True}, 404, "unknown_setting"),
    ("/api/config/board.dependency_gate", {"value": "yes"}, 422, "invalid_setting"),
    ("/api/config/board.dependency_gate", {"value": 1}, 422, "invalid_setting"),
    ("/api/config/presence.ttl_seconds", {"value": 0}, 422, "invalid_setting"),
    ("/api/config/presence.ttl_seconds", {"value": 100000}, 422, "invalid_setting"),
    ("/api/config/presence.ttl_seconds", {"value": [5]}, 422, "invalid_setting"),
    ("/api/config/presence.ttl_seconds", {}, 422, "invalid_request"),
    ("/api/config/presence.ttl_seconds", {"value": 5, "colour": "red"}, 422, "invalid_request"),
    ("/api/rooms/nowhere/config/presence.ttl_seconds", {"value": 5}, 404, "room_not_found"),
])
async def test_a_bad_write_is_refused_by_name_and_writes_nothing(client, admin_conn, atlas, path, body, status, error):
    before = await config_rows(admin_conn)
    r = await client.put(path, json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"] == error and r.json()["message"]
    assert await config_rows(admin_conn) == before


async def test_an_unknown_setting_names_the_known_ones(client):
    r = await client.put("/api/config/board.gate", json={"value": True})
    assert r.json()["known"] == ["auth.gate", "board.dependency_gate", "files.max_bytes", "presence.ttl_seconds",
                                 "runners.pause_after", "runners.wake_grace_seconds", "workers.max_turns_per_room",
                                 "workers.timeout_seconds", "workers.tools"]
    assert "board.dependency_gate" in r.json()["message"]


async def test_a_room_that_does_not_exist_has_no_settings_to_read_or_clear(client):
    r = await client.get("/api/rooms/nowhere/config")
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"
    r = await client.delete("/api/rooms/nowhere/config/presence.ttl_seconds")
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"


async def test_psql_writes_to_the_config_table_are_checked_the_same_way(admin_conn, atlas):
    for sql in ("INSERT INTO mycelium.config (name, value) VALUES ('board.nope', 'true')",
                "INSERT INTO mycelium.config (name, value) VALUES ('board.dependency_gate', '\"on\"')",
                "INSERT INTO mycelium.config (room, name, value) VALUES ('ghost', 'presence.ttl_seconds', '30')"):
        with pytest.raises(asyncpg.PostgresError) as refused:
            await admin_conn.execute(sql)
        assert refused.value.sqlstate in ("MY422", "MY404"), sql
    await admin_conn.execute("INSERT INTO mycelium.config (room, name, value) VALUES ('atlas', 'presence.ttl_seconds', '30')")
    with pytest.raises(asyncpg.PostgresError) as refused:
        await admin_conn.execute("UPDATE mycelium.config SET value = '-3' WHERE room = 'atlas'")
    assert refused.value.sqlstate == "MY422"
    assert await config_rows(admin_conn) == [("atlas", "presence.ttl_seconds", 30)]


async def test_deleting_a_room_takes_its_settings_with_it(client, admin_conn, atlas):
    await client.put("/api/rooms/atlas/config/presence.ttl_seconds", json={"value": 30})
    assert (await client.delete("/api/rooms/atlas")).status_code == 204
    assert await config_rows(admin_conn) == []


@pytest.mark.slow
def test_settings_from_the_command_line(db_dsn, tmp_path):
    hub = HubProcess(data_dir=tmp_path / "data", database_url=db_dsn)
    hub.wait_ready()
    env = {**os.environ, "MYCELIUM_API_URL": hub.url, "MYCELIUM_HANDLE": "ops"}

    def cli(*args, ok=True):
        return mycelium("config", *args, base=env, ok=ok)

    try:
        subprocess.run([sys.executable, "-m", "mycelium.cli.main", "room", "create", "atlas"], env=env,
                       check=True, capture_output=True, timeout=60)
        assert "board.dependency_gate = false  (default)" in cli().stdout
        assert cli("set", "board.dependency_gate", "true").stdout.strip() == "board.dependency_gate = true  (hub)"
        out = cli("set", "presence.ttl_seconds", "30", "--room", "atlas").stdout
        assert out.strip() == "presence.ttl_seconds = 30  (room)"
        shown = json.loads(cli("show", "--room", "atlas", "--json").stdout)
        sources = {s["name"]: s["source"] for s in shown["settings"]}
        assert (sources.pop("board.dependency_gate"), sources.pop("presence.ttl_seconds")) == ("hub", "room")
        assert "auth.gate" in sources and set(sources.values()) == {"default"}
        bad = cli("set", "presence.ttl_seconds", "soon", ok=False)
        assert "422" in bad.stderr and "presence.ttl_seconds takes a number" in bad.stderr
        assert cli("unset", "board.dependency_gate").stdout.strip() == "board.dependency_gate = false  (default)"
    finally:
        hub.stop()
