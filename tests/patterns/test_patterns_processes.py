"""A pattern run end to end by a user: `mycelium pattern ls/show`, `pattern run review-team` on a real
hub process whose personas answer through a scripted model; the conductor's review runs in the
task's thread to its end, what it cost is on the usage API and the Metrics page, and a second run is
refused in one line."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.support.cli import mycelium

pytestmark = pytest.mark.slow

SCRIPT = """\
rules:
  - when: ": @conductor review"
    reply: "Ready when the conductor asks."
  - when: "Draft this"
    handle: author
    reply: "Draft: a one-page plan with a rollback."
  - when: "Review the draft"
    handle: reviewer
    reply: "It does what the brief asks. [[mycelium: stance=accept]]"
"""


def test_a_user_lists_runs_and_follows_the_review_team_to_its_end(hub_processes, tmp_path):
    script = tmp_path / "model.yaml"
    script.write_text(SCRIPT)
    hub = hub_processes(env={"MYCELIUM_SLIM": "off", "MYCELIUM_MODEL_SCRIPT": str(script),
                             "MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S": "60"})
    env = {"MYCELIUM_API_URL": hub.url, "MYCELIUM_ROOM": "rev", "MYCELIUM_HANDLE": "ana"}
    listed = mycelium("pattern", "ls", env=env, ok=True).stdout
    assert "review-team\thub\tA review team\t@conductor @author @reviewer" in listed
    shown = mycelium("pattern", "show", "review-team", env=env, ok=True).stdout
    assert "engine   @reviewer (persona)" in shown and "run      @conductor review @author @reviewer" in shown
    loaded = mycelium("pattern", "load", "review-team", env=env, ok=True).stdout.strip()
    assert loaded.startswith("loaded review-team in room rev (task work/") and loaded.endswith(
        "paused: mycelium pattern run -r rev starts it")
    started = mycelium("pattern", "run", "review-team", env=env, ok=True).stdout.strip()
    assert started.startswith("started review-team in room rev")
    deadline = time.monotonic() + 90
    while True:
        runs = json.loads(mycelium("engine", "episodes", "--json", env=env, ok=True).stdout)
        if runs and runs[0]["outcome"] != "open":
            break
        assert time.monotonic() < deadline, runs
        time.sleep(0.5)
    detail = json.loads(mycelium("engine", "episodes", runs[0]["short_id"], "--json", env=env, ok=True).stdout)
    assert detail["flow"]["name"] == "review" and detail["outcome"] == "resolved", detail
    said = {(m["sender_handle"], m["content"].split("\n", 1)[0]) for m in detail["messages"]}
    assert ("author", "Draft: a one-page plan with a rollback.") in said
    assert any(h == "reviewer" and text.startswith("It does what the brief asks.") for h, text in said)
    # what it cost: each persona's model call and each engine's turn is a usage event, naming nobody
    usage = httpx.get(f"{hub.url}/api/observability/usage", params={"group_by": "model"}).json()
    models = {g["group"]: g for g in usage["groups"]}
    assert models["scripted:model.yaml"]["events"] >= 2 and models["scripted:model.yaml"]["failures"] == 0
    kinds = {g["group"]: g["events"]
             for g in httpx.get(f"{hub.url}/api/observability/usage", params={"group_by": "kind"}).json()["groups"]}
    assert kinds["model_call"] >= 2 and kinds["engine_turn"] >= 3  # the conductor's, the author's, the reviewer's
    metrics = httpx.get(f"{hub.url}/metrics").text
    assert ">scripted:model.yaml</text>" in metrics and ">persona</text>" in metrics
    again = mycelium("pattern", "run", "review-team", env=env, ok=False)
    assert "409 pattern_started" in again.stderr and "Traceback" not in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    other = mycelium("pattern", "run", "standing-context", env=env, ok=False)
    assert "holds pattern 'review-team', not 'standing-context'" in other.stderr
    missing = mycelium("pattern", "load", "no-such", "-r", "fresh", env=env, ok=False)
    assert "404 pattern_not_found" in missing.stderr and "review-team" in missing.stderr
