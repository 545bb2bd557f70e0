"""contracts/board-vocabulary.json is what the database, the routes and the CLI use."""

from __future__ import annotations

import json
from pathlib import Path

from mycelium.board.watch import MAX_WAIT_S
from mycelium.cli.board import FILTERS
from mycelium.verbs.board import DEFAULT_TTL_MINUTES

CONTRACT = json.loads((Path(__file__).resolve().parents[2] / "contracts" / "board-vocabulary.json").read_text())


async def test_the_database_closed_sets_equal_the_contract(admin_conn):
    db = await admin_conn.fetchval("SELECT mycelium.board_vocabulary()")
    a = CONTRACT["assignment"]
    assert db["statuses"] == CONTRACT["statuses"]
    assert db["kinds"] == CONTRACT["kinds"]
    assert db["priorities"] == CONTRACT["priorities"]
    assert db["live_namespaces"] == CONTRACT["live_namespaces"]
    assert db["settled_statuses"] == a["settled_statuses"]
    assert db["reserved"] == a["reserved"]
    assert db["assignable_namespaces"] == a["assignable_namespaces"]
    assert db["notice_subkinds"] == CONTRACT["notices"]["subkinds"]


async def test_the_notice_subkinds_are_the_timeline_s_closed_set(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('c')")
    for subkind in CONTRACT["notices"]["subkinds"]:
        await admin_conn.execute("SELECT 1 FROM mycelium.post_notice('c', $1, 'work/x')", subkind)
    import asyncpg
    import pytest

    with pytest.raises(asyncpg.PostgresError):
        await admin_conn.execute("SELECT 1 FROM mycelium.post_notice('c', 'upstream', 'work/x')")


async def test_lease_constants_and_states_match_the_contract(admin_conn):
    a = CONTRACT["assignment"]
    assert a["default_ttl_minutes"] == DEFAULT_TTL_MINUTES
    assert a["max_wait_s"] == MAX_WAIT_S
    assert set(a["states"]) == set(a["stored_states"]) | set(a["derived_states"])
    stored = await admin_conn.fetchval(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'assignments_state_check'")
    for state in a["stored_states"]:
        assert f"'{state}'" in stored
    assert a["stale_after"] == 0.5


def test_the_cli_filters_are_the_attention_filters_plus_all():
    assert [f.replace("-", "_") for f in FILTERS[:-1]] == CONTRACT["attention_filters"]
    assert FILTERS[-1] == "all"
    assert set(CONTRACT["attention_of_status"].values()) <= set(CONTRACT["attention_filters"])
    assert set(CONTRACT["attention_of_assignment"].values()) <= set(CONTRACT["attention_filters"])


async def test_attention_follows_the_contract_mappings(admin_conn):
    await admin_conn.execute("SELECT mycelium.create_room('att')")
    for status, expected in CONTRACT["attention_of_status"].items():
        key = f"decisions/{status}"
        await admin_conn.execute(
            "SELECT 1 FROM mycelium.write_memory('att', $1, '\"x\"', 'a', NULL, jsonb_build_object('status', $2::text))",
            key, status)
        got = await admin_conn.fetchval("SELECT attention FROM mycelium.board_rows WHERE room='att' AND key=$1", key)
        assert got == expected, status
