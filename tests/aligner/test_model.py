"""A negotiation in words: the term check's clarifying round, issue discovery and every move read
through the model seam (its deterministic scripted model), on the engines loop."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from tests.aligner.conftest import closed, make_task, questions, scripted, setup_room, summon, trace

ISSUES = {"price": ["10", "15", "20", "25", "30"], "vendor": ["acme", "globex"]}
SCRIPT = {
    "rules": [
        {"when": "^Term check:", "reply": json.dumps({"terms": [{"term": "delivery", "readings": {
            "alice": "it arrives at our door", "bob": "it leaves our warehouse", "zed": "not a member"}}]})},
        {"when": "^Opening positions:.*bob clarifies", "reply": json.dumps({
            "issues": [{"name": "price", "options": ISSUES["price"]}, {"name": "vendor", "options": ISSUES["vendor"]},
                       {"name": "colour", "options": ["red"]}, {"name": "weight", "options": ["1", "2", "4"]}],
            "positions": {"alice": {"price": "10", "vendor": "acme"}, "bob": {"price": "30", "vendor": "Globex"}}})},
        {"when": r"Reply from alice:\nTwenty", "reply": '{"action": "counter", "offer": {"price": "twenty", '
         '"vendor": "acme"}}'},
        {"when": r"Reply from alice:\nAlright, 20", "reply": '{"action": "counter", "offer": {"price": "20", '
         '"vendor": "acme"}}'},
        {"when": r"Reply from bob:\nNo, 25", "reply": '{"action": "counter", "offer": {"price": "25", '
         '"vendor": "acme"}}'},
        {"when": r"Reply from bob:\nI can live", "reply": '{"action": "accept"}'},
    ]
}


async def test_prose_is_read_by_the_model_after_one_clarifying_round(
    admin_conn: asyncpg.Connection, engines_hub, agents, tmp_path: Path
):
    script = tmp_path / "model.json"
    script.write_text(json.dumps(SCRIPT))
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "In words")
    await engines_hub(MYCELIUM_MODEL_SCRIPT=str(script))
    agents("alice", scripted("Ten euros, acme, and delivery by Friday.", ["Twenty, acme.", "Alright, 20 with acme."]))
    agents("bob", scripted("Thirty, from globex, delivery within a week.", ["No, 25 at least.", "I can live with that."]))
    await summon(admin_conn, "atlas", key, "@aligner @alice @bob: the price and the vendor")

    run = await closed(admin_conn, episode)
    assert run["state"] == "converged", run["reason"]
    assert run["assignments"] == {"price": "20", "vendor": "acme"}
    moves = await trace(admin_conn, run["id"])
    assert [m["step"] for m in moves] == ["opening", "clarify", "round", "round", "round", "round"]
    assert moves[0]["terms"] == [{"term": "delivery", "readings": {
        "alice": "it arrives at our door", "bob": "it leaves our warehouse"}}]
    assert moves[1]["answers"] == {"alice": "By that I mean what I said.", "bob": "By that I mean what I said."}
    # colour has one option and weight is no even grid: both left out, nothing completed
    assert moves[1]["issues"] == ISSUES and moves[1]["discovered"] == "model"
    assert moves[1]["asks"] == {"alice": {"price": "10", "vendor": "acme"}, "bob": {"price": "30", "vendor": "globex"}}
    rounds = moves[2:]
    # "twenty" does not snap onto the numeric grid: alice holds her own line, her opening ask
    assert (rounds[0]["how"], rounds[0]["offer"]) == ("held", {"price": "10", "vendor": "acme"})
    assert [(r["who"], r["how"], r["action"]) for r in rounds[1:]] == [
        ("bob", "model", "offer"), ("alice", "model", "offer"), ("bob", "model", "accept")
    ]
    # the mediator said in the thread how it read each reply
    asked = await admin_conn.fetch(
        "SELECT content FROM mycelium.messages WHERE episode = $1 AND sender = 'aligner' ORDER BY position", episode
    )
    assert any("I read alice's reply as: an offer that does not fit" in a["content"] for a in asked)
    assert [q["step"] for q in await questions(admin_conn, episode)] == ["opening", "clarify"] + ["round"] * 4
    assert run["metrics"]["satisfaction"] == {"alice": 0.75, "bob": 0.25}
