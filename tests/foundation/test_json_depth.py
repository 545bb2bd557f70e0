"""Deeply nested JSON is a 400 malformed_json naming the depth limit, on every JSON route and at
any depth, never a 500."""

from __future__ import annotations

import pytest

from mycelium.api.bodies import MAX_JSON_DEPTH


def nested(levels: int, leaf: str = "1") -> str:
    return '{"a":' * levels + leaf + "}" * levels


def assert_too_deep(r) -> None:
    assert r.status_code == 400, r.text[:300]
    body = r.json()
    assert body["error"] == "malformed_json" and str(MAX_JSON_DEPTH) in body["message"], body
    assert body["max_depth"] == MAX_JSON_DEPTH


@pytest.mark.parametrize("levels", [1_000, 5_000, 100_000])
async def test_deep_bodies_on_room_create_are_refused_naming_the_limit(client, levels):
    r = await client.post("/api/rooms", content=nested(levels), headers={"content-type": "application/json"})
    assert_too_deep(r)


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 300, 2_000])
async def test_deep_meta_in_a_memory_is_refused_naming_the_limit(client, levels):
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    body = '{"items": [{"key": "notes/a", "value": "x", "created_by": "ana", "embed": false, "meta": ' + \
        nested(levels) + "}]}"
    r = await client.post("/api/rooms/atlas/memory", content=body, headers={"content-type": "application/json"})
    assert_too_deep(r)


async def test_nesting_within_the_limit_is_accepted(client):
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    # the body itself takes 4 levels ({ items [ { meta ): the meta may nest the rest
    body = '{"items": [{"key": "notes/a", "value": "x", "created_by": "ana", "embed": false, "meta": ' + \
        nested(MAX_JSON_DEPTH - 4) + "}]}"
    r = await client.post("/api/rooms/atlas/memory", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text[:300]


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/rooms/atlas/tasks"), ("POST", "/api/rooms/atlas/assignments/claim"),
    ("POST", "/api/rooms/atlas/fields"), ("PATCH", "/api/rooms/atlas"), ("POST", "/api/rooms/atlas/messages"),
    ("POST", "/api/rooms/atlas/memory/search"), ("PUT", "/api/config/board.dependency_gate"),
    ("POST", "/api/transitions/claim"),
])
async def test_every_json_route_refuses_deep_bodies(client, method, path):
    assert (await client.post("/api/rooms", json={"name": "atlas"})).status_code == 201
    for levels in (300, 100_000):
        r = await client.request(method, path, content=nested(levels), headers={"content-type": "application/json"})
        assert_too_deep(r)
    r = await client.request(method, path, content="[" * 100_000 + "]" * 100_000,
                             headers={"content-type": "application/json"})
    assert_too_deep(r)
