"""The timeline table accepts exactly the envelope vocabulary frozen in
contracts/message-envelope.json: kinds and their subkinds, payload types, roles, notice subkinds."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

ENVELOPE = json.loads((Path(__file__).resolve().parents[2] / "contracts" / "message-envelope.json").read_text())


async def accepted(conn: asyncpg.Connection, sql: str, *args: object) -> bool:
    try:
        async with conn.transaction():
            await conn.execute(sql, *args)
            raise _Rollback
    except _Rollback:
        return True
    except asyncpg.PostgresError:
        return False


class _Rollback(Exception):
    pass


INSERT = ("INSERT INTO mycelium.messages (room, sender, sender_role, kind, subkind, payload_type) "
          "VALUES ('atlas', 'x', $1, $2, $3, $4)")


async def test_the_table_takes_exactly_the_contracts_kinds_subkinds_roles_and_payload_types(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    for kind, subkinds in ENVELOPE["valid_subkinds"].items():
        assert await accepted(admin_conn, INSERT, "agent", kind, None, "message")
        for sub in subkinds:
            assert await accepted(admin_conn, INSERT, "agent", kind, sub, "message"), (kind, sub)
        others = {s for subs in ENVELOPE["valid_subkinds"].values() for s in subs} - set(subkinds)
        for sub in others:
            assert not await accepted(admin_conn, INSERT, "agent", kind, sub, "message"), (kind, sub)
    assert not await accepted(admin_conn, INSERT, "agent", "gossip", None, "message")
    for payload_type in ENVELOPE["payload_types"]:
        assert await accepted(admin_conn, INSERT, "agent", "exchange", None, payload_type)
    assert not await accepted(admin_conn, INSERT, "agent", "exchange", None, "shout")
    for role in ENVELOPE["roles"]:
        assert await accepted(admin_conn, INSERT, role, "exchange", None, "message")
    assert not await accepted(admin_conn, INSERT, "robot", "exchange", None, "message")


async def test_notices_take_exactly_the_contracts_subkinds(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('atlas')")
    notice = "SELECT id FROM mycelium.post_notice('atlas', $1, 'work/x')"
    for subkind in ENVELOPE["notice"]["subkinds"]:
        assert await accepted(admin_conn, notice, subkind), subkind
    assert not await accepted(admin_conn, notice, "gossip")
