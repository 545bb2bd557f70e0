"""The database's handle normalisation, mention parsing and await addressing equal the pure cores,
case for case (contracts/mentions.json, contracts/message-envelope.json)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from mycelium.core.envelope import build_envelope, is_addressed_to
from mycelium.core.handles import handle_problem, normalize_handle
from mycelium.core.mentions import loud_mentions, silent_mentions

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
MENTIONS = json.loads((CONTRACTS / "mentions.json").read_text())


async def test_sql_normalises_and_validates_handles_exactly_as_the_contract_table_says(admin_conn):
    for case in MENTIONS["handle"]["cases"]:
        row = await admin_conn.fetchrow(
            "SELECT mycelium.normalize_handle($1) AS n, mycelium.handle_problem($1) AS p", case["input"])
        assert (row["n"], row["p"]) == (case["normalised"], case["problem"]), case
        assert (row["n"], row["p"]) == (normalize_handle(case["input"]), handle_problem(case["input"]))


async def test_sql_finds_the_mentions_the_contract_lists(admin_conn):
    for case in MENTIONS["cases"]:
        row = await admin_conn.fetchrow(
            "SELECT mycelium.loud_mentions($1) AS loud, mycelium.silent_mentions($1) AS silent", case["text"])
        assert (row["loud"], row["silent"]) == (case["mentions"], case["silent"]), case
        assert row["loud"] == list(loud_mentions(case["text"]))
        assert row["silent"] == list(silent_mentions(case["text"]))
    for case in MENTIONS["wake_cases"]:
        wakes = await admin_conn.fetchval("SELECT mycelium.mentions_handle($1, $2)", case["text"], case["handle"])
        assert wakes is case["wakes"], case


async def test_who_a_stored_message_wakes_is_the_await_rule_of_the_envelope_core(admin_conn):
    texts = ["plain", "@bob look", "@~bob fyi", "cc @Carol and @bob.", "mail bob@x.example", "@alice hi"]
    handles = ["alice", "bob", "carol"]
    cases = itertools.product(
        ["exchange", "commit"], ["message", "reply", "ping", "notice", "presence"], [None, "amend"],
        ["alice", "@Bob#s1"], [[], ["bob"], ["Carol", "alice"]], texts)
    for kind, payload_type, subkind, sender, recipients, text in cases:
        if subkind and kind != "exchange":
            continue
        wakes = await admin_conn.fetchval(
            "SELECT mycelium.message_wakes($1, $2, $3, $4, $5, $6)", kind, subkind, payload_type, sender,
            recipients, text)
        envelope = build_envelope(kind=kind, episode="urn:ioc:mycelium:episode:r:live", message_id="m",
                                  sender=sender, recipients=recipients, payload_type=payload_type)
        for handle in handles:
            expected = is_addressed_to(envelope, text, handle) and subkind != "amend"
            assert (handle in wakes) is expected, (kind, payload_type, subkind, sender, recipients, text, handle)
