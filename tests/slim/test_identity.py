"""Identity tier ``jwt``: every post on a channel carries a member token of the hub's token gate, whose
``sub`` is the author; a token for room A is not accepted on room B."""

from __future__ import annotations

import pytest

from mycelium.slim.client import MemberRefused
from tests.slim.conftest import serve_slim

SECRET = "a-token-gate-secret-of-32-characters-or-more"


@pytest.fixture
async def gated(db_dsn, settings_for, slim_node, admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    await admin_conn.execute("SELECT mycelium.create_room('other')")
    async with serve_slim(db_dsn, settings_for, slim_node.endpoint, auth=True, auth_secret=SECRET,
                          slim_identity="jwt") as served:
        yield served


async def tokens(served):
    from mycelium.auth.member_tokens import MemberTokens
    from mycelium.verbs import HUB_PRINCIPAL, verbs_of

    members = MemberTokens(verbs_of(served.hub, HUB_PRINCIPAL), SECRET)
    await members.start()
    return members


async def test_a_post_carrying_the_room_s_member_token_is_recorded_as_its_subject(gated):
    token, _ = (await tokens(gated)).sign("julia", "atlas")
    async with gated.member("atlas", "julia", token=token) as julia:
        assert julia.identity == "jwt"
        accepted = await julia.post("signed and sealed")
        m = await julia.next(10)
        assert (m["id"], m["sender_handle"]) == (accepted["message_id"], "julia")


async def test_a_token_for_another_room_is_refused_on_this_room_s_channel(gated, admin_conn):
    token, _ = (await tokens(gated)).sign("julia", "other")
    async with gated.member("atlas", "julia", token=token) as julia:
        with pytest.raises(MemberRefused) as refused:
            await julia.post("wrong room")
    assert (refused.value.status, refused.value.error) == (403, "token_for_another_room")
    assert "the post's token is for room 'other', not 'atlas'" in refused.value.message
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE room = 'atlas'") == 0
