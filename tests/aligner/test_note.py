"""The broker note: written by the model (its scripted one here), and, when the model is slow or
failing, the plain statement of the standing offer and the issue space, with the failure on the
record. Marker-only members converge either way."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from tests.aligner.conftest import closed, make_task, scripted, setup_room, summon, trace

NOTE = "Alice, bob has not moved yet; a first offer near the middle gives him room to accept."
SCRIPT = {
    "rules": [
        {"when": r"^Broker note for alice\.", "reply": NOTE + " [[mycelium: accept]]"},
        {"when": r"^Broker note for bob\.", "reply": "Too late.", "delay": 5},
    ]
}


async def test_the_model_writes_the_note_and_a_slow_model_leaves_the_plain_one(
    admin_conn: asyncpg.Connection, engines_hub, agents, tmp_path: Path
):
    script = tmp_path / "model.json"
    script.write_text(json.dumps(SCRIPT))
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Noted")
    await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script), MYCELIUM_ALIGNER_NOTE_TIMEOUT_S="0.5",
                      MYCELIUM_ALIGNER_TERM_CHECK="false")
    agents("alice", scripted("[[mycelium: offer price=10 vendor=acme]]",
                             ["[[mycelium: offer price=20 vendor=acme]]"]))
    agents("bob", scripted("[[mycelium: offer price=30 vendor=globex]]", ["[[mycelium: accept]]"]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    run = await closed(admin_conn, episode)
    assert run["state"] == "converged", run["reason"]
    asked = await admin_conn.fetch(
        "SELECT content, payload -> 'aligner' ->> 'to' AS to FROM mycelium.messages WHERE episode = $1 "
        "AND sender = 'aligner' AND payload -> 'aligner' ->> 'step' = 'round' ORDER BY position",
        episode,
    )
    to_alice, to_bob = asked[0]["content"], asked[1]["content"]
    # the model's note, its marker stripped, beside the facts, the issue space and how to answer
    assert NOTE in to_alice and "mycelium: accept" not in to_alice.split("Answer with")[0]
    assert "Nothing is on the table yet" in to_alice and "- price: 10 | 15 | 20 | 25 | 30" in to_alice
    # the model too slow for bob's note: the plain facts only, nothing made up
    assert "Too late" not in to_bob
    assert "On the table, from alice: price=20, vendor=acme. Your own line: price=30, vendor=globex." in to_bob
    assert "- vendor: acme | globex" in to_bob and "mycelium: accept]] (take what is on the table)" in to_bob
    moves = await trace(admin_conn, run["id"])
    assert [(m["step"], m["note"]) for m in moves[:2]] == [("opening", "model"), ("round", "plain")]
    assert moves[1]["note_error"] == "the model did not write the note within 0.5 s"
    assert "note_error" not in moves[0]
    record = await admin_conn.fetchval(
        "SELECT body FROM mycelium.memories WHERE room = 'atlas' AND key = 'log/episodes/' || $1", run["short_id"]
    )
    assert "the model did not write the note within 0.5 s" in record


async def test_with_no_model_the_note_is_plain_and_says_why(admin_conn: asyncpg.Connection, engines_hub, agents):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Plain")
    await engines_hub()
    agents("alice", scripted("[[mycelium: offer price=10 vendor=acme]]", ["[[mycelium: offer price=20 vendor=acme]]"]))
    agents("bob", scripted("[[mycelium: offer price=30 vendor=globex]]", ["[[mycelium: accept]]"]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")
    run = await closed(admin_conn, episode)
    assert run["state"] == "converged"
    moves = await trace(admin_conn, run["id"])
    noted = [m for m in moves if "note" in m]
    assert noted and all(m["note"] == "plain" and m["note_error"] == "no model is configured" for m in noted)
