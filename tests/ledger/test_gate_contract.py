"""The gates equal contracts/transition-gates.json on every combination of their inputs: the SQL gate,
the Python gate the in-process stores run (mycelium.ledger.gate) and the Redis store's Lua script."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from mycelium.ledger import gate

CONTRACT_FILE = Path(__file__).resolve().parents[2] / "contracts" / "transition-gates.json"
CONTRACT = json.loads(CONTRACT_FILE.read_text())

GATE_FIELDS = [
    "side_effect_class",
    "spendability",
    "retry_permission",
    "boundary",
    "state",
    "key_param",
    "key_ttl",
    "key_validity",
    "key_match",
    "needs_repair",
]
ACTION_FIELDS = ["gate", "state", "settled", "can_reconcile", "reconciled", "blind", "defer", "death_missing"]


def first_match(rules: list[dict[str, Any]], case: dict[str, Any], result: str) -> str:
    for rule in rules:
        if all(case[field] in allowed for field, allowed in rule["when"].items()):
            return rule[result]
    raise AssertionError(f"the contract decides nothing for {case}")


def expected_gate(case: dict[str, Any]) -> str:
    for table in ("side_effecting", "read_only"):
        spec = CONTRACT[table]
        if case["side_effect_class"] in spec["applies_to"]["side_effect_class"]:
            return first_match(spec["rules"], case, "gate")
    raise AssertionError(f"no table applies to {case['side_effect_class']}")


def gate_cases() -> list[dict[str, Any]]:
    inputs = CONTRACT["inputs"]
    cases = []
    for values in itertools.product(*(inputs[f] for f in GATE_FIELDS)):
        case = dict(zip(GATE_FIELDS, values, strict=True))
        # a key validity exists only with a TTL: without one it is UNTRACKED
        if (case["key_validity"] == "UNTRACKED") == case["key_ttl"]:
            continue
        cases.append(case)
    return cases


async def test_the_sql_gate_equals_the_contract_on_every_combination(admin_conn):
    cases = gate_cases()
    assert len(cases) == 5 * 3 * 4 * 3 * 8 * 2 * 3 * 3 * 2  # 51,840 combinations
    columns = [[c[f] for c in cases] for f in GATE_FIELDS]
    rows = await admin_conn.fetch(
        """SELECT mycelium.transition_gate(c, s, r, b, st, kp, kt, kv, km, nr) AS gate
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bool[], $7::bool[],
                       $8::text[], $9::text[], $10::bool[])
                WITH ORDINALITY AS x(c, s, r, b, st, kp, kt, kv, km, nr, i)
           ORDER BY i""",
        *columns,
    )
    mismatches = [
        (case, row["gate"], python_gate(case), expected_gate(case))
        for case, row in zip(cases, rows, strict=True)
        if not row["gate"] == python_gate(case) == expected_gate(case)
    ]
    assert not mismatches, f"{len(mismatches)} mismatches (sql, python, contract), first: {mismatches[:3]}"
    # every rule of the contract decides at least one combination (no dead rule)
    used = {
        (t, first_rule_n(t, c))
        for c in cases
        for t in ("side_effecting", "read_only")
        if c["side_effect_class"] in CONTRACT[t]["applies_to"]["side_effect_class"]
    }
    for table in ("side_effecting", "read_only"):
        for rule in CONTRACT[table]["rules"]:
            assert (table, rule["n"]) in used, f"{table} rule {rule['n']} never decides"


def python_gate(case: dict[str, Any]) -> str:
    return gate.transition_gate(*(case[f] for f in GATE_FIELDS))


async def test_the_redis_script_s_gate_equals_the_contract_on_every_combination(redis_url):
    from mycelium.ledger.redis_store import RedisLedgerStorage

    store = RedisLedgerStorage(redis_url)
    cases = gate_cases()
    try:
        answers: list[str] = []
        for start in range(0, len(cases), 5000):  # one script run per batch of cases
            batch = cases[start : start + 5000]
            answers += await store.gates([[c[f] for f in GATE_FIELDS] for c in batch])
    finally:
        await store.aclose()
        store.close()
    mismatches = [(c, a) for c, a in zip(cases, answers, strict=True) if a != expected_gate(c)]
    assert len(answers) == len(cases)
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"


def test_the_python_claim_actions_and_class_defaults_equal_the_contract():
    spec = CONTRACT["claim_actions"]
    for values in itertools.product(*(spec["inputs"][f] for f in ACTION_FIELDS)):
        case = dict(zip(ACTION_FIELDS, values, strict=True))
        assert gate.claim_action(*values) == first_match(spec["rules"], case, "action"), case
    for cls, d in CONTRACT["class_defaults"].items():
        assert gate.default_retry_permission(cls) == d["retry_permission"]
        assert gate.default_spendability(cls) == d["spendability"]
        assert gate.capability_floor(cls, False, False) == d["capability"]["plain"]
        assert gate.capability_floor(cls, True, False) == d["capability"]["key_param"]
        assert gate.capability_floor(cls, False, True) == d["capability"]["reconciler"]
    for alias, cls in CONTRACT["class_aliases"].items():
        assert gate.side_effect_class(alias) == gate.side_effect_class(cls) == cls
    assert gate.side_effect_class("teleport") is None


def first_rule_n(table: str, case: dict[str, Any]) -> int:
    for rule in CONTRACT[table]["rules"]:
        if all(case[f] in allowed for f, allowed in rule["when"].items()):
            return rule["n"]
    raise AssertionError(case)


async def test_what_the_claim_does_after_each_gate_equals_the_contract(admin_conn):
    spec = CONTRACT["claim_actions"]
    cases = [
        dict(zip(ACTION_FIELDS, v, strict=True))
        for v in itertools.product(*(spec["inputs"][f] for f in ACTION_FIELDS))
    ]
    columns = [[c[f] for c in cases] for f in ACTION_FIELDS]
    rows = await admin_conn.fetch(
        """SELECT mycelium.claim_action(g, st, se, cr, rc, bl, df, dm) AS action
           FROM unnest($1::text[], $2::text[], $3::bool[], $4::bool[], $5::bool[], $6::bool[], $7::bool[],
                       $8::bool[]) WITH ORDINALITY AS x(g, st, se, cr, rc, bl, df, dm, i)
           ORDER BY i""",
        *columns,
    )
    mismatches = [
        (c, r["action"])
        for c, r in zip(cases, rows, strict=True)
        if r["action"] != first_match(spec["rules"], c, "action")
    ]
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"


async def test_class_defaults_and_aliases_in_sql_equal_the_contract(admin_conn):
    for cls, d in CONTRACT["class_defaults"].items():
        row = await admin_conn.fetchrow(
            """SELECT mycelium.default_retry_permission($1) AS r, mycelium.default_spendability($1) AS s,
                      mycelium.capability_floor($1, false, false) AS plain,
                      mycelium.capability_floor($1, true, false) AS key_param,
                      mycelium.capability_floor($1, false, true) AS reconciler""",
            cls,
        )
        assert (row["r"], row["s"]) == (d["retry_permission"], d["spendability"]), cls
        assert {k: row[k] for k in ("plain", "key_param", "reconciler")} == d["capability"], cls
        assert await admin_conn.fetchval("SELECT mycelium.side_effect_class($1)", cls) == cls
    for alias, cls in CONTRACT["class_aliases"].items():
        assert await admin_conn.fetchval("SELECT mycelium.side_effect_class($1)", alias) == cls
    assert await admin_conn.fetchval("SELECT mycelium.side_effect_class('teleport')") is None


async def test_the_closed_sets_of_the_table_are_the_contract_s(admin_conn):
    """Each closed-set column's domain admits exactly the contract's values, and refuses any other."""
    rows = await admin_conn.fetch(
        "SELECT a.attname, format_type(a.atttypid, NULL) AS domain, pg_get_constraintdef(c.oid) AS def"
        " FROM pg_attribute a JOIN pg_constraint c ON c.contypid = a.atttypid AND c.contype = 'c'"
        " WHERE a.attrelid = 'mycelium.transitions'::regclass AND a.attnum > 0"
    )
    domains = {r["attname"]: r["domain"] for r in rows}
    admitted = {r["attname"]: set(re.findall(r"'([^']*)'", r["def"])) for r in rows}
    inputs = CONTRACT["inputs"]
    stored = {s for s in inputs["state"] if not s.startswith("IN_FLIGHT_") and s != "EXPIRED"} | {"IN_FLIGHT"}
    expected = {
        "side_effect_class": set(inputs["side_effect_class"]),
        "spendability": set(inputs["spendability"]),
        "retry_permission": set(inputs["retry_permission"]),
        "side_effect_boundary": set(inputs["boundary"]),
        "terminal_outcome": stored,
    }
    for column, values in expected.items():
        assert admitted[column] == values, column
        for value in values:
            assert await admin_conn.fetchval(f"SELECT $1::{domains[column]}", value) == value
    for column, bogus in (("terminal_outcome", "EXPIRED"), ("side_effect_class", "payment")):
        with pytest.raises(asyncpg.CheckViolationError):
            await admin_conn.fetchval(f"SELECT $1::{domains[column]}", bogus)
