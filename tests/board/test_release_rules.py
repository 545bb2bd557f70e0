"""Release never re-opens a settled row, and only the holder releases a live lease (unless forced,
which the notice records); resolving a row someone else holds stays allowed and says so."""

from __future__ import annotations

import httpx
import pytest

from tests.board.conftest import ROOM, backdate, fields, notices, refusal, task
from tests.foundation.test_cli_defects import cli, hub_url  # noqa: F401 - fixtures

A = f"/api/rooms/{ROOM}/assignments"


async def claim(client, key: str, handle: str) -> None:
    r = await client.post(f"{A}/claim", json={"key": key, "handle": handle})
    assert r.status_code == 200, r.text


async def test_releasing_a_resolved_row_is_refused_and_leaves_it_resolved(client, room, admin_conn):
    key = await task(admin_conn, "Done already")
    await claim(client, key, "nova")
    assert (await client.post(f"{A}/resolve", json={"key": key, "handle": "nova"})).status_code == 200
    r = await client.post(f"{A}/release", json={"key": key, "handle": "nova"})
    assert r.status_code == 409, r.text
    assert r.json()["error"] == "already_resolved" and key in r.json()["message"]
    read = (await client.get(f"{A}/{key}")).json()
    assert read["assignment"] == "resolved"
    status, detail, _ = await refusal(admin_conn, "SELECT * FROM mycelium.release_task($1, $2, 'nova')", room, key)
    assert (status, detail["error"]) == (409, "already_resolved")


@pytest.mark.parametrize("status", ["resolved", "dismissed"])
async def test_releasing_a_row_settled_by_its_status_is_refused(client, room, admin_conn, status):
    key = await task(admin_conn, "Settled by status")
    await fields(admin_conn, key, {"status": status})
    r = await client.post(f"{A}/release", json={"key": key, "handle": "nova", "force": True})
    assert r.status_code == 409, r.text
    assert r.json()["error"] == "already_resolved" and status in r.json()["message"]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.assignments WHERE key = $1", key) == 0


async def test_releasing_someone_elses_live_lease_is_refused_naming_the_holder(client, room, admin_conn):
    key = await task(admin_conn, "Mine")
    await claim(client, key, "nova")
    r = await client.post(f"{A}/release", json={"key": key, "handle": "bob"})
    assert r.status_code == 409, r.text
    body = r.json()
    assert (body["error"], body["owner"]) == ("not_holder", "nova") and "@nova" in body["message"]
    assert (await client.get(f"{A}/{key}")).json()["owner"] == "nova"
    status, detail, _ = await refusal(admin_conn, "SELECT * FROM mycelium.release_task($1, $2, 'bob')", room, key)
    assert (status, detail["error"], detail["owner"]) == (409, "not_holder", "nova")


async def test_a_forced_release_of_someone_elses_lease_is_recorded_in_the_notice(client, room, admin_conn):
    key = await task(admin_conn, "Stuck")
    await claim(client, key, "nova")
    r = await client.post(f"{A}/release", json={"key": key, "handle": "bob", "force": True, "note": "nova is away"})
    assert r.status_code == 200, r.text
    assert (r.json()["assignment"], r.json()["assignment_note_by"]) == ("released", "bob")
    released = (await notices(admin_conn, subkind="released"))[-1]
    assert (released["by"], released["forced"], released["holder"]) == ("bob", True, "nova")
    # the holder's own release, and an expired lease, need no force and record none
    await claim(client, key, "nova")
    assert (await client.post(f"{A}/release", json={"key": key, "handle": "nova"})).status_code == 200
    own = (await notices(admin_conn, subkind="released"))[-1]
    assert "forced" not in own and "holder" not in own
    await claim(client, key, "nova")
    await backdate(admin_conn, key, 31)
    assert (await client.post(f"{A}/release", json={"key": key, "handle": "bob"})).status_code == 200


async def test_resolving_a_row_someone_else_holds_is_allowed_and_recorded(client, room, admin_conn):
    key = await task(admin_conn, "Review me")
    await claim(client, key, "nova")
    r = await client.post(f"{A}/resolve", json={"key": key, "handle": "julia"})
    assert r.status_code == 200, r.text
    resolved = (await notices(admin_conn, subkind="resolved"))[-1]
    assert (resolved["by"], resolved["holder"]) == ("julia", "nova")


def test_board_release_force_from_the_cli(hub_url):  # noqa: F811
    room = "release-force"
    assert httpx.post(hub_url + "/api/rooms", json={"name": room}).status_code == 201
    cli(hub_url, "board", "new", "-r", room, "Held", "--key", "work/held")
    cli(hub_url, "board", "claim", "-r", room, "work/held", "--as", "nova")
    out = cli(hub_url, "board", "release", "-r", room, "work/held", "--as", "bob", ok=False)
    assert out.returncode == 1 and "not_holder" in out.stderr and "@nova" in out.stderr
    out = cli(hub_url, "board", "release", "-r", room, "work/held", "--as", "bob", "--force")
    assert out.returncode == 0, out.stderr
