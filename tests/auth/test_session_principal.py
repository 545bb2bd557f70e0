"""The gateway declares a gated request's principal on the pooled connection's session, once, and
declares again whenever the next caller on that connection is someone else — nobody included — so a
principal never outlives its own calls (tried on a pool of one connection, with the gate closed)."""

from __future__ import annotations

import pytest

from mycelium.db.pool import create_pool
from mycelium.errors import Refusal
from mycelium.verbs import HUB_PRINCIPAL, HUB_PROCESS, NOBODY, Actor, Principal
from mycelium.verbs.gateway import Verbs

ALICE = Principal("alice", "agent", "alice", "test")
CAROL = Principal("carol", "agent", "carol", "test")


@pytest.fixture
async def one_connection(db_dsn: str):
    pool = await create_pool(db_dsn, role="mycelium_app", min_size=1, max_size=1)
    try:
        hub = Verbs(pool, None, HUB_PRINCIPAL)
        await hub.call(Actor("alice"), "create_room", name="vault", title=None, description=None,
                       is_public=False, owner="alice", members=[], created_by="alice")
        await hub.call(HUB_PROCESS, "write_setting", name="auth.gate", value=True, room="", handle="env")
        yield pool
    finally:
        await pool.close()


async def _sees_vault(verbs: Verbs) -> bool:
    try:
        return bool(await verbs.call(NOBODY, "room_known", room="vault"))
    except Refusal as r:
        assert r.status == 404 and r.error == "room_not_found", r
        return False


async def test_a_principal_never_outlives_its_own_calls(one_connection):
    pool = one_connection
    alice, carol, nobody = Verbs(pool, None, ALICE), Verbs(pool, None, CAROL), Verbs(pool)
    for _ in range(2):
        assert await _sees_vault(alice)
        assert not await _sees_vault(nobody)  # the same connection, alice's declaration gone
        assert not await _sees_vault(carol)
        assert await _sees_vault(Verbs(pool, None, HUB_PRINCIPAL))
    async with alice.transaction() as s:
        assert await s.call(NOBODY, "room_known", room="vault")
    async with nobody.transaction(readonly=True) as s:
        with pytest.raises(Refusal):
            await s.call(NOBODY, "room_known", room="vault")


async def test_the_same_principal_again_costs_no_round_trip(one_connection):
    pool = one_connection
    alice = Verbs(pool, None, ALICE)
    sent: list[str] = []

    def log(q) -> None:
        sent.append(q.query)

    async with pool.acquire() as conn:
        conn.add_query_logger(log)
    try:
        assert await _sees_vault(alice)  # declares alice for the session: two statements
        assert len(sent) == 2 and "set_config" in sent[0], sent
        sent.clear()
        assert await _sees_vault(alice)
        assert len(sent) == 1 and "room_known" in sent[0], sent
        sent.clear()
        assert not await _sees_vault(Verbs(pool))  # nobody: declared again, then asked
        assert len(sent) == 2, sent
    finally:
        async with pool.acquire() as conn:
            conn.remove_query_logger(log)
