"""Assignments: leases on work/ rows, with expiry and freshness derived from the database clock."""

from __future__ import annotations

import asyncpg
import pytest

from tests.board.conftest import ROOM, backdate, later, notices, refusal, task

A = f"/api/rooms/{ROOM}/assignments"


async def claim(client, key, handle, **kw):
    return await client.post(f"{A}/claim", json={"key": key, "handle": handle, **kw})


async def read(client, key):
    return (await client.get(f"{A}/{key}")).json()


@pytest.mark.parametrize(("minutes", "freshness", "state"), [
    (1, "fresh", "held"), (20, "stale", "held"), (45, "expired", "expired"), (90, "expired", "expired"),
])
async def test_freshness_and_expiry_follow_the_clock_without_a_write(client, room, admin_conn, minutes, freshness,
                                                                     state):
    key = await task(admin_conn, "Clocked")
    await claim(client, key, "growth")
    await backdate(admin_conn, key, minutes)
    lease_version = await admin_conn.fetchval("SELECT version FROM mycelium.assignments WHERE key = $1", key)
    r = await read(client, key)
    assert (r["freshness"], r["assignment"]) == (freshness, state)
    stored = await admin_conn.fetchrow("SELECT state, version FROM mycelium.assignments WHERE key = $1", key)
    assert (stored["state"], stored["version"]) == ("held", lease_version)


async def test_a_claim_holds_the_row_without_touching_its_prose_or_vector(client, room, admin_conn):
    key = await task(admin_conn, "Ship passkey login")
    await admin_conn.execute(
        "UPDATE mycelium.memories SET embedding = array_fill(0.5, ARRAY[384])::vector WHERE key = $1", key)
    before = await admin_conn.fetchrow("SELECT value, version, embedding FROM mycelium.memories WHERE key = $1", key)
    r = await claim(client, key, "@Growth")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["assignment"], body["owner"], body["freshness"], body["ttl_minutes"]) == ("held", "growth", "fresh", 30)
    assert body["waiting_on"] == []
    after = await admin_conn.fetchrow("SELECT value, version, embedding FROM mycelium.memories WHERE key = $1", key)
    assert after["value"] == before["value"] and after["embedding"] is not None
    assert [n["by"] for n in await notices(admin_conn, room, "claimed")] == ["growth"]


async def test_a_live_lease_refuses_another_claimant_and_lets_its_holder_refresh(client, room, admin_conn):
    key = await task(admin_conn, "Contested")
    await claim(client, key, "growth")
    r = await claim(client, key, "other")
    assert r.status_code == 409
    body = r.json()
    assert (body["error"], body["owner"], body["ttl_minutes"]) == ("lease_held", "growth", 30)
    assert body["message"] == f"'{key}' is held by @growth"
    again = await claim(client, key, "growth", ttl_minutes=5)
    assert again.status_code == 200 and again.json()["ttl_minutes"] == 5


async def test_an_expired_lease_is_taken_over_and_its_expiry_announced_once(client, room, admin_conn):
    key = await task(admin_conn, "Stale work")
    await claim(client, key, "growth")
    await backdate(admin_conn, key, 31)
    r = await claim(client, key, "other")
    assert r.status_code == 200 and r.json()["owner"] == "other"
    expired = await notices(admin_conn, room, "expired")
    assert [(n["key"], n["by"]) for n in expired] == [(key, "growth")]
    assert await admin_conn.fetch("SELECT * FROM mycelium.sweep_expired_leases()") == []


@pytest.mark.parametrize(("key", "status", "error"), [
    ("plan/tasks", 422, "not_assignable"), ("decisions/x", 422, "not_assignable"),
    ("work/never-filed", 404, "memory_not_found"),
])
async def test_leases_live_only_on_existing_work_rows(client, room, key, status, error):
    for verb, body in (("claim", {}), ("release", {}), ("resolve", {})):
        r = await client.post(f"{A}/{verb}", json={"key": key, "handle": "growth", **body})
        assert (r.status_code, r.json()["error"]) == (status, error)
    r = await client.get(f"{A}/{key}")
    assert (r.status_code, r.json()["error"]) == (status, error)
    if status == 422:
        assert "work/" in r.json()["message"]


async def test_release_leaves_a_note_and_who_left_it(client, room, admin_conn):
    key = await task(admin_conn, "Hand over")
    await claim(client, key, "growth")
    r = (await client.post(f"{A}/release", json={"key": key, "handle": "growth", "note": "need a designer"})).json()
    assert (r["assignment"], r["owner"], r["assignment_note"], r["assignment_note_by"]) == (
        "released", None, "need a designer", "growth")
    await claim(client, key, "growth")
    r = (await client.post(f"{A}/release", json={"key": key, "handle": "growth"})).json()
    assert (r["assignment_note"], r["assignment_note_by"]) == ("released", "growth")
    subkinds = [n["subkind"] for n in await notices(admin_conn, room) if n["key"] == key]
    assert subkinds == ["filed", "claimed", "released", "claimed", "released"]


async def test_an_expired_read_says_who_stopped_renewing_and_writes_nothing(client, room, admin_conn):
    key = await task(admin_conn, "Forgotten")
    await claim(client, key, "growth")
    await backdate(admin_conn, key, 45)
    before = await admin_conn.fetchrow("SELECT * FROM mycelium.assignments WHERE key = $1", key)
    r = await read(client, key)
    assert r["assignment"] == "expired"
    assert "stopped renewing" in r["assignment_note"] and r["assignment_note_by"] == "runtime"
    assert await admin_conn.fetchrow("SELECT * FROM mycelium.assignments WHERE key = $1", key) == before


async def test_resolve_settles_the_lease(client, room, admin_conn):
    key = await task(admin_conn, "Finish")
    await claim(client, key, "growth")
    r = (await client.post(f"{A}/resolve", json={"key": key, "handle": "growth"})).json()
    assert (r["assignment"], r["assignment_note"], r["assignment_note_by"]) == (
        "resolved", "resolved by @growth", "growth")
    assert [n["by"] for n in await notices(admin_conn, room, "resolved")] == ["growth"]


async def test_renew_refreshes_only_stale_live_leases_of_that_handle(client, room, admin_conn):
    fresh = await task(admin_conn, "Fresh one")
    stale = await task(admin_conn, "Stale one")
    drained = await task(admin_conn, "Drained one")
    for key in (fresh, stale, drained):
        await claim(client, key, "growth")
    await backdate(admin_conn, stale, 25)
    await backdate(admin_conn, drained, 40)
    versions = dict(await admin_conn.fetch("SELECT key, version FROM mycelium.assignments"))
    messages_before = await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages")
    r = (await client.post(f"{A}/renew", json={"handle": "growth"})).json()
    assert [x["key"] for x in r["renewed"]] == [stale]
    assert (await read(client, stale))["freshness"] == "fresh"
    assert (await read(client, drained))["assignment"] == "expired"
    after = dict(await admin_conn.fetch("SELECT key, version FROM mycelium.assignments"))
    assert after[fresh] == versions[fresh] and after[drained] == versions[drained]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages") == messages_before
    assert (await client.post(f"{A}/renew", json={"handle": "other"})).json()["renewed"] == []
    assert (await client.post(f"{A}/renew", json={"handle": "growth"})).json()["renewed"] == []


async def test_the_lease_watch_returns_at_once_without_since_and_wakes_on_a_claim(client, room, admin_conn, db_dsn):
    key = await task(admin_conn, "Watched")
    first = (await client.get(f"{A}/await", params={"key": key})).json()
    assert first["changed"] is False and first["since"]
    same = (await client.get(f"{A}/await", params={"key": key, "since": first["since"], "timeout": 0.2})).json()
    assert same["changed"] is False and same["since"] == first["since"]

    claimer = later(db_dsn, 0.3, "SELECT 1 FROM mycelium.claim_task($1, $2, 'growth')", room, key)
    woke = (await client.get(f"{A}/await", params={"key": key, "since": first["since"], "timeout": 30})).json()
    claimer.join()
    assert woke["changed"] is True and woke["owner"] == "growth"


async def test_the_lease_watch_wakes_when_a_lease_drains_without_any_write(client, room, admin_conn):
    key = await task(admin_conn, "Draining")
    await claim(client, key, "growth", ttl_minutes=1)
    await backdate(admin_conn, key, 1 - 0.5 / 60)  # half a second left
    seen = (await client.get(f"{A}/await", params={"key": key})).json()
    assert seen["assignment"] == "held"
    woke = (await client.get(f"{A}/await", params={"key": key, "since": seen["since"], "timeout": 30})).json()
    assert woke["changed"] is True and woke["assignment"] == "expired"


async def test_bad_assignment_input_is_a_clear_4xx(client, room, admin_conn):
    key = await task(admin_conn, "Inputs")
    assert (await claim(client, key, "growth", ttl_minutes=0)).status_code == 422
    assert (await claim(client, key, "not a handle")).json()["error"] == "invalid_handle"
    assert (await client.post(f"{A}/claim", json={"key": key})).status_code == 422
    assert (await client.get(f"{A}/await", params={"key": key, "timeout": 61})).status_code == 422
    assert (await client.post("/api/rooms/nowhere/assignments/claim",
                              json={"key": key, "handle": "g"})).json()["error"] == "room_not_found"
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.assignments") == 0


async def test_every_assignment_refusal_also_comes_from_plain_sql(admin_conn, room):
    key = await task(admin_conn, "Plain")
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'growth')", room, key)
    cases = [
        ("SELECT 1 FROM mycelium.claim_task($1, $2, 'other')", key, 409, "lease_held"),
        ("SELECT 1 FROM mycelium.claim_task($1, $2, 'other')", "plan/x", 422, "not_assignable"),
        ("SELECT 1 FROM mycelium.claim_task($1, $2, 'other')", "work/missing", 404, "memory_not_found"),
        ("SELECT 1 FROM mycelium.claim_task($1, $2, 'other', 0)", key, 422, "invalid_ttl"),
        ("SELECT 1 FROM mycelium.release_task($1, $2, '@@')", key, 422, "invalid_handle"),
        ("SELECT 1 FROM mycelium.resolve_task($1, $2, 'x')", "work/missing", 404, "memory_not_found"),
        ("SELECT 1 FROM mycelium.read_assignment($1, $2)", "context/x", 422, "not_assignable"),
    ]
    for sql, k, status, error in cases:
        got, detail, _ = await refusal(admin_conn, sql, room, k)
        assert (got, detail["error"]) == (status, error), sql


async def test_direct_updates_cannot_steal_resurrect_or_delete_a_live_lease(admin_conn, room):
    key = await task(admin_conn, "Guarded")
    await admin_conn.execute("SELECT 1 FROM mycelium.claim_task($1, $2, 'growth')", room, key)
    status, detail, _ = await refusal(admin_conn, "UPDATE mycelium.assignments SET owner = 'mallory'")
    assert (status, detail["error"], detail["owner"]) == (409, "lease_held", "growth")
    status, detail, _ = await refusal(admin_conn, "DELETE FROM mycelium.assignments")
    assert (status, detail["error"]) == (409, "lease_held")
    with pytest.raises(asyncpg.UniqueViolationError):  # one lease per row (409 through the error map)
        await admin_conn.execute("INSERT INTO mycelium.assignments (room, key, state, owner, claimed_at, ttl_minutes)"
                                 " VALUES ($1, $2, 'held', 'mallory', now(), 30)", room, key)
    for hole in ("claimed_at = NULL", "ttl_minutes = NULL", "claim_id = NULL"):  # a held lease stays complete
        status, detail, _ = await refusal(admin_conn, f"UPDATE mycelium.assignments SET {hole}")
        assert (status, detail["error"]) == (422, "incomplete_lease"), hole
    await backdate(admin_conn, key, 40)
    status, detail, _ = await refusal(admin_conn, "UPDATE mycelium.assignments SET claimed_at = now()")
    assert (status, detail["error"]) == (409, "lease_expired")
    status, detail, _ = await refusal(
        admin_conn, "UPDATE mycelium.assignments SET claimed_at = now() + interval '1 hour'")
    assert status == 422
    # an expired lease may be taken over directly; that is a new lease, announced like a claim
    await admin_conn.execute("UPDATE mycelium.assignments SET owner = 'mallory', claimed_at = now()")
    assert [n["by"] for n in await notices(admin_conn, room, "claimed")] == ["growth", "mallory"]
    assert [n["by"] for n in await notices(admin_conn, room, "expired")] == ["growth"]


async def test_the_hub_role_cannot_write_a_lease_except_through_the_verbs(admin_conn, room):
    key = await task(admin_conn, "Role")
    await admin_conn.execute("SET ROLE mycelium_app")
    try:
        status = None
        try:
            await admin_conn.execute(
                "INSERT INTO mycelium.assignments (room, key, state, note) VALUES ($1, $2, 'released', 'x')",
                room, key)
        except Exception as exc:  # insufficient privilege
            status = getattr(exc, "sqlstate", None)
        assert status == "42501"
        assert await admin_conn.fetchval("SELECT owner FROM mycelium.claim_task($1, $2, 'growth')", room, key) == "growth"
    finally:
        await admin_conn.execute("RESET ROLE")


async def test_each_verb_answers_what_a_read_of_the_lease_says_in_the_same_transaction(admin_conn, room):
    """The verbs build their answer from the row they wrote (lease_written); a read derives it from the
    clock (lease_read): the two agree on every kind of write."""
    key = await task(admin_conn, "Answered")
    await task(admin_conn, "Prerequisite")
    await admin_conn.execute("SELECT 1 FROM mycelium.write_fields($1, $2, 'ana', '{\"depends-on\": \"work/prerequisite\"}')",
                             room, key)
    steps = [
        ("SELECT * FROM mycelium.claim_task($1, $2, 'growth', 20)", None),  # first claim
        ("SELECT * FROM mycelium.claim_task($1, $2, 'growth', 45)", None),  # the holder refreshes
        ("SELECT * FROM mycelium.claim_task($1, $2, 'mallory')", 60),  # takes over an expired lease
        ("SELECT * FROM mycelium.release_task($1, $2, 'mallory', 'later')", None),
        ("SELECT * FROM mycelium.resolve_task($1, $2, 'growth')", None),
        ("SELECT * FROM mycelium.claim_task($1, $2, 'growth')", None),  # a resolved row claimed again
        ("SELECT * FROM mycelium.resolve_task($1, $2, 'growth')", None),
    ]
    answers = []
    for sql, backdated in steps:
        if backdated:
            await backdate(admin_conn, key, backdated)
        async with admin_conn.transaction():
            answer = dict(await admin_conn.fetchrow(sql, room, key))
            assert answer == dict(await admin_conn.fetchrow("SELECT * FROM mycelium.read_assignment($1, $2)",
                                                            room, key)), sql
        answers.append((answer["assignment"], answer["freshness"], answer["waiting_on"]))
    assert answers == [("held", "fresh", ["work/prerequisite"])] * 3 + [
        ("released", None, ["work/prerequisite"]), ("resolved", None, ["work/prerequisite"]),
        ("held", "fresh", ["work/prerequisite"]), ("resolved", None, ["work/prerequisite"])]
    fresh = await task(admin_conn, "Never leased")
    async with admin_conn.transaction():
        answer = dict(await admin_conn.fetchrow("SELECT * FROM mycelium.resolve_task($1, $2, 'growth')", room, fresh))
        assert answer == dict(await admin_conn.fetchrow("SELECT * FROM mycelium.read_assignment($1, $2)", room, fresh))
