"""A room is a SLIM channel: members listen and speak there under exactly the rules of HTTP. Against a
real node on loopback, with the hub's slim loop publishing in the test's process."""

from __future__ import annotations

import asyncio

import pytest

from mycelium.slim.client import MemberRefused
from tests.slim.conftest import published


async def create_room(served, name: str, **body) -> None:
    async with served.http() as http:
        r = await http.post("/api/rooms", json={"name": name, **body})
        assert r.status_code == 201, r.text


async def test_a_room_created_over_http_is_a_channel_and_a_post_there_lands_with_its_author(slim_hub):
    await create_room(slim_hub, "atlas")
    async with slim_hub.member("atlas", "julia") as julia, slim_hub.member("atlas", "bob") as bob:
        accepted = await julia.post("hello @bob")
        assert accepted["position"] == 1
        for member in (julia, bob):  # the author too: the hub publishes what it recorded
            m = await member.next(10)
            assert (m["id"], m["sender_handle"], m["content"]) == (accepted["message_id"], "julia", "hello @bob")
        async with slim_hub.http() as http:
            r = await http.post("/api/rooms/atlas/reply", json={"handle": "bob", "text": "hi julia"})
            assert r.status_code == 201
            rows = (await http.get("/api/rooms/atlas/messages")).json()
        assert [(m["sender_handle"], m["content"]) for m in rows] == [("bob", "hi julia"), ("julia", "hello @bob")]
        m = await julia.next(10)  # posted over HTTP, received on the channel
        assert (m["sender_handle"], m["position"]) == ("bob", 2)
    await published(slim_hub, "atlas", 2)
    channel = await slim_hub.channel("atlas")
    assert {m["handle"] for m in channel["members"]} == {"julia", "bob"}


async def test_a_post_against_the_floor_is_refused_back_on_the_channel_and_writes_nothing(slim_hub, admin_conn):
    await create_room(slim_hub, "atlas")
    episode = await admin_conn.fetchval(
        "SELECT episode FROM mycelium.write_memory('atlas', 'work/ship', $1, 'julia')", "# Ship it\n\nbody")
    await admin_conn.execute("SELECT mycelium.hold_floor('atlas', $1, 'lead', ARRAY['api'])", episode)
    before = await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE room = 'atlas'")
    async with slim_hub.member("atlas", "sec") as sec:
        with pytest.raises(MemberRefused) as refused:
            await sec.post("let me in", episode=episode)
        assert refused.value.status == 409 and refused.value.error == "not_your_floor"
        assert "@sec does not have the floor: @lead holds the floor; @api may speak" in refused.value.message
        assert await admin_conn.fetchval(
            "SELECT count(*) FROM mycelium.messages WHERE room = 'atlas'") == before
        with pytest.raises(MemberRefused) as refused:  # bad input: a clear refusal, not a crash
            await sec.post("   ")
        assert (refused.value.status, refused.value.error) == (422, "invalid_frame")
        ok = await sec.post("in the room it is fine")
        assert ok["position"] == before + 1


async def test_reserved_handles_are_refused_before_anyone_listens(slim_hub):
    await create_room(slim_hub, "atlas")
    with pytest.raises(MemberRefused) as refused:
        async with slim_hub.member("atlas", "system"):
            pass
    assert (refused.value.status, refused.value.error) == (403, "reserved_handle")


async def test_a_private_room_s_channel_admits_its_members_only(slim_hub):
    await create_room(slim_hub, "vault", is_public=False, owner="lead", members=["api"])
    with pytest.raises(MemberRefused) as refused:
        async with slim_hub.member("vault", "eve"):
            pass
    assert (refused.value.status, refused.value.error) == (403, "not_a_member")
    async with slim_hub.member("vault", "api") as api:
        await api.post("members only")
        assert (await api.next(10))["content"] == "members only"
    assert [m["handle"] for m in (await slim_hub.channel("vault"))["members"]] == ["api"]


@pytest.mark.slow  # an invitation the member cannot accept fails only after its retries
async def test_a_member_holding_another_hub_s_secret_is_never_invited(slim_hub):
    await create_room(slim_hub, "atlas")
    with pytest.raises(MemberRefused) as refused:
        async with slim_hub.member("atlas", "mallory", secret="another-hub-master-secret-0123456789",
                                   join_seconds=4.0):
            pass
    assert refused.value.error == "not_invited"


async def test_a_member_that_leaves_is_taken_off_the_channel(slim_hub):
    await create_room(slim_hub, "atlas")
    julia = slim_hub.member("atlas", "julia")
    await julia.open()
    await julia.close(leave=True)
    assert (await slim_hub.channel("atlas"))["members"] == []


async def test_a_thousand_messages_arrive_in_order_each_once(slim_hub, admin_conn):
    await create_room(slim_hub, "atlas")
    async with slim_hub.member("atlas", "julia") as julia:
        await admin_conn.execute("INSERT INTO mycelium.messages (room, sender, content) "
                                 "SELECT 'atlas', 'bob', 'm' || g FROM generate_series(1, 1000) g")
        got = [await julia.next(20) for _ in range(1000)]
    assert [m["position"] for m in got] == list(range(1, 1001))
    assert [m["content"] for m in got] == [f"m{i}" for i in range(1, 1001)]
    assert len({m["id"] for m in got}) == 1000
    await published(slim_hub, "atlas", 1000)


async def test_health_reports_the_channels_this_process_publishes(slim_hub):
    await create_room(slim_hub, "atlas")
    await published(slim_hub, "atlas", 0)
    for _ in range(100):
        async with slim_hub.http() as http:
            slim = (await http.get("/health")).json()["slim"]
        if "atlas" in slim["channels"]:
            break
        await asyncio.sleep(0.05)
    assert slim["state"] == "on" and slim["reachable"] and slim["channels"] == ["atlas"]
    assert slim["secret"] == "development" and slim["identity"] == "psk"


async def test_a_member_the_private_room_drops_is_removed_from_its_channel(slim_hub, admin_conn):
    await create_room(slim_hub, "vault", is_public=False, owner="lead", members=["api"])
    async with slim_hub.member("vault", "api") as api:
        await api.post("still here")
        assert (await api.next(10))["content"] == "still here"
        await admin_conn.execute("UPDATE mycelium.rooms SET members = '{}' WHERE name = 'vault'")
        await asyncio.wait_for(api.removed.wait(), 10)  # the moderator heard, and removed api
        async with slim_hub.http() as http:
            r = await http.post("/api/rooms/vault/reply", json={"handle": "lead", "text": "api may not read this"})
            assert r.status_code == 201
        with pytest.raises(TimeoutError):
            await api.next(2)
    assert (await slim_hub.channel("vault"))["members"] == []

