"""What a client is told when its request is wrong: the field it got wrong by its own name, the limit
it went over, the media type to send, strict types, and cursors that paste into a URL."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from tests.board.conftest import task


@pytest.fixture
async def atlas(client) -> str:
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    return "atlas"


async def test_an_empty_body_says_the_body_is_empty(client, atlas):
    for path in ("/api/rooms", f"/api/rooms/{atlas}/tasks", f"/api/rooms/{atlas}/memory"):
        r = await client.post(path, headers={"content-type": "application/json"})
        assert r.status_code in (400, 422), r.text
        body = r.json()
        assert "'data'" not in body["message"] and "data:" not in body["message"], body
        assert "empty" in body["message"] and "JSON" in body["message"], body


async def test_a_long_q_is_reported_as_q(client, atlas):
    r = await client.get(f"/api/rooms/{atlas}/messages/search", params={"q": "x" * 3000})
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith("q: ") and "q_" not in r.text, r.text


@pytest.mark.parametrize("path", ["/api/rooms/atlas/memory", "/api/rooms/atlas/messages", "/api/rooms/atlas/tasks"])
async def test_a_huge_offset_is_refused_naming_offset(client, atlas, path):
    r = await client.get(path, params={"offset": str(10**30)})
    assert r.status_code in (400, 422), r.text
    assert r.json()["message"].startswith("offset: ") and "$" not in r.text, r.text


async def test_a_wrong_method_is_method_not_allowed(client, atlas):
    r = await client.put("/api/rooms", json={"name": "x"})
    assert r.status_code == 405
    body = r.json()
    assert body["error"] == "method_not_allowed" and "GET" in body["message"] and "POST" in body["message"]


async def test_a_body_over_the_limit_says_the_limit(db_dsn, settings_for, embedder):
    from litestar.testing import AsyncTestClient

    from mycelium.api.app import create_app
    from mycelium.hub import Hub

    hub = Hub(settings_for(db_dsn, embedder="none", max_body_bytes=2048))
    async with AsyncTestClient(app=create_app(hub.settings, hub=hub)) as c:
        r = await c.post("/api/rooms", json={"name": "x", "description": "y" * 5000})
    assert r.status_code == 413
    body = r.json()
    assert body["error"] == "body_too_large" and "2048" in body["message"] and body["limit_bytes"] == 2048


@pytest.mark.parametrize(("content_type", "content"), [
    ("application/x-www-form-urlencoded", "name=atlas2"),
    ("multipart/form-data; boundary=x", '--x\r\nContent-Disposition: form-data; name="name"\r\n\r\natlas2\r\n--x--\r\n'),
    ("application/xml", "<room><name>atlas2</name></room>"),
    ("text/plain", '{"name": "atlas2"}'),
])
async def test_a_body_that_is_not_json_is_415_naming_json(client, content_type, content):
    r = await client.post("/api/rooms", content=content, headers={"content-type": content_type})
    assert r.status_code == 415, r.text
    body = r.json()
    assert body["error"] == "unsupported_media_type" and "application/json" in body["message"]
    assert (await client.get("/api/rooms/atlas2")).status_code == 404


async def test_json_media_types_with_parameters_are_json(client):
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        r = await client.post("/api/rooms", content=f'{{"name": "r-{len(content_type)}"}}',
                              headers={"content-type": content_type})
        assert r.status_code == 201, r.text


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/rooms", {"name": "strict", "is_public": "yes"}, "is_public"),
    ("/api/rooms", {"name": "strict", "is_public": 1}, "is_public"),
    ("/api/rooms/atlas/assignments/claim", {"key": "work/t", "handle": "nova", "ttl_minutes": "30"}, "ttl_minutes"),
    ("/api/rooms/atlas/assignments/claim", {"key": "work/t", "handle": "nova", "ttl_minutes": 30.5}, "ttl_minutes"),
    ("/api/rooms/atlas/assignments/release", {"key": "work/t", "handle": "nova", "force": "yes"}, "force"),
    ("/api/rooms/atlas/memory", {"items": [{"key": "k", "value": "v", "created_by": "a", "embed": "no"}]}, "embed"),
    ("/api/rooms/atlas/tasks", {"title": 5, "handle": "nova"}, "title"),
])
async def test_request_fields_take_their_own_type_only(client, atlas, admin_conn, path, body, field):
    await task(admin_conn, "T", room=atlas)
    r = await client.post(path, json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["message"], r.text
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.assignments") == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.rooms WHERE name = 'strict'") == 0


async def test_next_cursor_is_url_safe_and_pages_on(client, atlas):
    for i in range(5):
        r = await client.post(f"/api/rooms/{atlas}/messages", json={"content": f"hello {i}", "sender_handle": "ana"})
        assert r.status_code == 201, r.text
    seen: list[str] = []
    cursor = None
    while True:
        url = f"/api/rooms/{atlas}/messages/search?q=hello&limit=2"  # newest first, by time and id
        if cursor:
            assert re.fullmatch(r"[A-Za-z0-9._~-]+", cursor), cursor
            assert quote(cursor, safe="") == cursor
            url += f"&cursor={cursor}"  # pasted raw
        r = await client.get(url)
        assert r.status_code == 200, r.text
        seen += [h["message"]["content"] for h in r.json()["hits"]]
        cursor = r.json()["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == [f"hello {i}" for i in range(5)]
    r = await client.get(f"/api/rooms/{atlas}/messages/search", params={"q": "hello", "cursor": "not a cursor"})
    assert r.status_code in (400, 422) and r.json()["error"] == "invalid_cursor"
