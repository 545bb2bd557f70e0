"""Skills: the ``skills/`` memory namespace behind ``/api/rooms/{room}/skills``; writes are memory
upserts (versioned, threaded, linked), names are checked before anything is written."""

from __future__ import annotations

import pytest


@pytest.fixture
async def room(client):
    assert (await client.post("/api/rooms", json={"name": "r"})).status_code == 201
    return "r"


async def create(client, name, body="Steps.", **fields):
    r = await client.post("/api/rooms/r/skills",
                          json={"name": name, "body": body, "created_by": "ana", **fields})
    assert r.status_code == 201, r.text
    return r.json()


async def test_a_skill_is_a_memory_under_skills_with_its_description_in_the_frontmatter(client, room):
    skill = await create(client, "deploy", "1. build\n2. ship", description="How we ship",
                         tags=["ops"], meta={"owner": "ops-team"})
    assert (skill["name"], skill["key"], skill["description"], skill["body"]) == (
        "deploy", "skills/deploy", "How we ship", "1. build\n2. ship")
    assert (skill["tags"], skill["meta"], skill["version"], skill["created_by"]) == (
        ["ops"], {"owner": "ops-team"}, 1, "ana")
    memory = (await client.get("/api/rooms/r/memory/skills/deploy")).json()
    assert memory["meta"] == {"description": "How we ship", "owner": "ops-team"}
    assert memory["value"] == {"text": "1. build\n2. ship"}
    assert memory["episode"] == skill["episode"]


async def test_writing_a_skill_again_is_an_upsert_that_keeps_other_frontmatter(client, room):
    first = await create(client, "deploy", description="v1", meta={"owner": "ops-team"})
    second = await create(client, "deploy", "New steps.", description="v2")
    assert (second["version"], second["description"], second["body"]) == (2, "v2", "New steps.")
    assert second["meta"] == {"owner": "ops-team"}
    assert second["episode"] == first["episode"]
    history = (await client.get("/api/rooms/r/history/skills/deploy")).json()
    assert [v["version"] for v in history["versions"]] == [1, 2]


async def test_skills_are_listed_newest_updated_first_and_only_skills(client, room):
    await create(client, "alpha")
    await create(client, "beta")
    await create(client, "alpha", "changed")
    r = await client.post("/api/rooms/r/memory", json={"items": [
        {"key": "skills/nested/x", "value": "no", "created_by": "ana"},
        {"key": "skills/Upper", "value": "no", "created_by": "ana"},
        {"key": "notes/skills", "value": "no", "created_by": "ana"},
        {"key": "skills/gamma", "value": "written as a memory", "created_by": "ana",
         "meta": {"description": "still a skill"}},
    ]})
    assert r.status_code == 201
    listing = (await client.get("/api/rooms/r/skills")).json()
    assert [s["name"] for s in listing["skills"]] == ["gamma", "alpha", "beta"]
    assert listing["total"] == 3
    assert listing["skills"][0]["description"] == "still a skill"


async def test_a_skill_is_read_and_deleted_by_name_and_its_history_stays(client, room):
    await create(client, "deploy", description="d")
    r = await client.get("/api/rooms/r/skills/deploy")
    assert (r.status_code, r.json()["description"]) == (200, "d")
    assert (await client.delete("/api/rooms/r/skills/deploy", params={"by": "bo"})).status_code == 204
    r = await client.get("/api/rooms/r/skills/deploy")
    assert (r.status_code, r.json()["error"]) == (404, "skill_not_found")
    r = await client.delete("/api/rooms/r/skills/deploy")
    assert (r.status_code, r.json()["error"]) == (404, "skill_not_found")
    history = (await client.get("/api/rooms/r/history/skills/deploy")).json()
    assert [(v["op"], v["written_by"]) for v in history["versions"]] == [("write", "ana"), ("delete", "bo")]
    assert (await client.get("/api/rooms/r/skills")).json() == {"skills": [], "total": 0}


async def test_an_unknown_room_or_a_name_no_skill_can_have_is_not_found(client, room):
    for method, path in (("GET", "/api/rooms/nope/skills"), ("GET", "/api/rooms/nope/skills/x"),
                         ("DELETE", "/api/rooms/nope/skills/x")):
        r = await client.request(method, path)
        assert (r.status_code, r.json()["error"]) == (404, "room_not_found"), path
    r = await client.post("/api/rooms/nope/skills", json={"name": "x", "body": "b", "created_by": "ana"})
    assert (r.status_code, r.json()["error"]) == (404, "room_not_found")
    for name in ("Bad", "-x", "x" * 129):
        r = await client.get(f"/api/rooms/r/skills/{name}")
        assert (r.status_code, r.json()["error"]) == (404, "skill_not_found"), name


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Deploy", "body": "b", "created_by": "ana"}, "name"),
        ({"name": "-deploy", "body": "b", "created_by": "ana"}, "name"),
        ({"name": ".hidden", "body": "b", "created_by": "ana"}, "name"),
        ({"name": "two words", "body": "b", "created_by": "ana"}, "name"),
        ({"name": "a/b", "body": "b", "created_by": "ana"}, "name"),
        ({"name": "", "body": "b", "created_by": "ana"}, "name"),
        ({"name": "x" * 129, "body": "b", "created_by": "ana"}, "name"),
        ({"name": "ok", "body": "b", "created_by": "ana", "description": "d" * 513}, "description"),
        ({"name": "ok", "created_by": "ana"}, "body"),
        ({"name": "ok", "body": "b"}, "created_by"),
        ({"name": "ok", "body": "b", "created_by": "ana", "colour": "red"}, "colour"),
    ],
    ids=["capital", "leading-dash", "leading-dot", "space", "slash", "empty", "too-long",
         "long-description", "no-body", "no-author", "unknown-field"],
)
async def test_bad_skills_are_refused_with_422_naming_the_field_and_nothing_is_written(
    client, room, body, field
):
    r = await client.post("/api/rooms/r/skills", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_request"
    assert field in r.json()["message"]
    assert (await client.get("/api/rooms/r/memory")).json() == []


async def test_the_longest_name_and_dotted_names_are_accepted(client, room):
    for name in ("x" * 128, "v1.2_beta-3", "0day"):
        assert (await create(client, name))["name"] == name


async def test_a_skill_body_is_linked_like_any_memory(client, room):
    await client.post("/api/rooms/r/memory", json={"items": [
        {"key": "procedures/release", "value": "# Release\n## Checks\nall green", "created_by": "ana",
         "meta": {"expandable": True}}]})
    await create(client, "ship", "Run ![[procedures/release#Checks]] then see [[decisions/x]]")
    backlinks = (await client.get("/api/rooms/r/links", params={"key": "procedures/release"})).json()
    assert [b["source"] for b in backlinks["backlinks"]] == ["skills/ship"]
    expanded = (await client.get("/api/rooms/r/links/expand", params={"key": "skills/ship"})).json()
    assert expanded["rendered"] == "Run all green then see [[decisions/x]]"
