"""Every pure core's constants equal its frozen contract, so no copy can drift from the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mycelium.core import envelope, handles, mentions, search_grammar

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"


def contract(name: str) -> dict[str, Any]:
    return json.loads((CONTRACTS / name).read_text(encoding="utf-8"))


# ── mentions.json ───────────────────────────────────────────────────────────


def test_the_mention_sigils_and_token_match_the_contract():
    spec = contract("mentions.json")
    assert spec["sigils"] == {"mention": mentions.MENTION_SIGIL, "silent": mentions.SILENT_SIGIL}
    assert spec["token"]["pattern"] == mentions.TOKEN_PATTERN
    assert spec["token"]["handle_continues_with"] == mentions.HANDLE_CHARS


def test_the_handle_rule_matches_the_contract():
    spec = contract("mentions.json")["handle"]
    assert spec["pattern"] == handles.HANDLE_PATTERN
    assert spec["max_length"] == handles.MAX_LENGTH
    assert spec["whitespace"] == handles.WHITESPACE
    assert spec["problems"] == dict(handles.PROBLEMS)
    assert {c["problem"] for c in spec["cases"]} - {None} == set(handles.PROBLEMS)


def test_the_mentions_contract_has_a_full_table():
    spec = contract("mentions.json")
    assert len(spec["cases"]) >= 9
    assert {"text", "mentions", "silent"} == set().union(*(c.keys() for c in spec["cases"]))


# ── message-search.json ─────────────────────────────────────────────────────


def test_the_search_grammar_matches_the_contract():
    spec = contract("message-search.json")
    assert list(search_grammar.FIELDS) == spec["fields"]
    assert dict(search_grammar.ALIASES) == spec["aliases"]
    assert spec["at_field"] == search_grammar.AT_FIELD
    assert dict(search_grammar.TIME_KEYS) == spec["time_keys"]
    assert list(search_grammar.SORTS) == spec["sorts"]
    assert spec["default_sort"] == search_grammar.DEFAULT_SORT
    assert {k: list(v) for k, v in search_grammar.CLOSED_VALUES.items()} == spec["closed_values"]
    assert list(search_grammar.HANDLE_FIELDS) == spec["handle_fields"]
    assert {k: int(v.total_seconds()) for k, v in search_grammar.AGE_UNITS.items()} == spec["age_units"]
    assert dict(search_grammar.DAY_WORDS) == spec["day_words"]
    assert spec["scoring"] == {
        "phrase_weight": search_grammar.PHRASE_WEIGHT,
        "term_count_cap": search_grammar.TERM_COUNT_CAP,
    }
    assert spec["snippet"] == {"width": search_grammar.SNIPPET_WIDTH, "ellipsis": search_grammar.ELLIPSIS}


def test_every_search_alias_and_closed_field_names_a_declared_field():
    spec = contract("message-search.json")
    fields = set(spec["fields"])
    assert set(spec["aliases"].values()) <= fields
    assert set(spec["closed_values"]) <= fields
    assert set(spec["handle_fields"]) <= fields
    assert spec["at_field"] in fields
    assert not (set(spec["aliases"]) | set(spec["time_keys"]) | {"sort"}) & fields


# ── message-envelope.json ───────────────────────────────────────────────────


def test_the_envelope_vocabulary_matches_the_contract():
    spec = contract("message-envelope.json")
    assert spec["protocol"] == envelope.PROTOCOL
    assert spec["subprotocol"] == envelope.SUBPROTOCOL
    assert spec["wire_version"] == envelope.VERSION
    assert list(envelope.KINDS) == spec["kinds"]
    assert {k: sorted(v) for k, v in envelope.VALID_SUBKINDS.items()} == spec["valid_subkinds"]
    assert set(spec["valid_subkinds"]) == set(spec["kinds"])
    assert list(envelope.ROLES) == spec["roles"]
    assert spec["system_actor"] == {"id": envelope.SYSTEM_ACTOR_ID, "role": envelope.SYSTEM_ACTOR_ROLE}
    assert list(envelope.PAYLOAD_TYPES) == spec["payload_types"]
    assert sorted(envelope.UNADDRESSED_PAYLOAD_TYPES) == spec["unaddressed_payload_types"]
    assert set(spec["unaddressed_payload_types"]) <= set(spec["payload_types"])


def test_the_urn_forms_match_the_contract():
    urn = contract("message-envelope.json")["urn"]
    assert urn["episode"].format(room="r", session="s") == envelope.episode_urn("r", "s")
    assert urn["topic"].format(room="r") == envelope.topic_urn("r")
    assert urn["live_session"] == envelope.LIVE_SESSION
    assert urn["knowledge_session"] == envelope.KNOWLEDGE_SESSION


def test_the_ping_and_notice_payloads_match_the_contract():
    spec = contract("message-envelope.json")
    assert spec["ping"] == {
        "payload_type": envelope.PING_PAYLOAD_TYPE,
        "payload_fields": list(envelope.PING_FIELDS),
    }
    assert spec["notice"] == {
        "payload_type": envelope.NOTICE_PAYLOAD_TYPE,
        "subkinds": list(envelope.NOTICE_SUBKINDS),
    }
    assert {spec["ping"]["payload_type"], spec["notice"]["payload_type"]} <= set(spec["payload_types"])
