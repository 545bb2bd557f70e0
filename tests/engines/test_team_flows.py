"""swarm and accord end to end: scripted members answer a conductor in a task's thread; swarm files
the lead's split as child rows part of the task (through the board's verb, in the step's
transaction), accord merges the labelled points and locks the shared summary."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import asyncpg
import pytest

from mycelium.engines import accord
from mycelium.engines.conductor import tasks_of
from tests.engines.conftest import (
    closed_run,
    coordinate,
    eventually,
    make_task,
    posts_of,
    setup_room,
    trace_of,
)
from tests.engines.test_flows import by_step


def in_turn(**steps: Sequence[str | None]) -> Callable[[str], str | None]:
    """A rule answering each step named with its next scripted answer (None: silent)."""
    left = {k.replace("_", "-"): list(v) for k, v in steps.items()}

    def rule(text: str) -> str | None:
        for step, answers in left.items():
            if f"· {step} ·" in text and answers:
                return answers.pop(0)
        return None

    return rule


async def row(conn: asyncpg.Connection, key: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT key, body, meta, created_by, version FROM mycelium.memories WHERE room = 'atlas' AND key = $1",
        key,
    )


def test_a_leads_split_reads_both_task_line_forms_once_each():
    text = (
        "Here is the split.\n[[new: Build the API -> @Bob]]\n- [ ] Write the docs @cy\n"
        "[[new: build the  api -> @ann]]\n[[new: no assignee]]\n"
    )
    assert tasks_of(text) == [
        {"title": "Build the API", "assignee": "bob"},
        {"title": "Write the docs", "assignee": "cy"},
    ]


async def test_swarm_checks_in_then_files_the_leads_split_as_child_rows_of_the_task(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Ship passkey login")
    await engines_hub()
    split = "Split:\n[[new: Build the passkey API -> @bob]]\n[[new: Write the login page -> @cy]]"
    agents("ann", in_turn(check_in=["I lead and review."], split=["We split it.", split]))
    agents("bob", by_step(check_in="I take the API."))
    agents("cy", by_step(check_in="I take the page."))
    await coordinate(admin_conn, "atlas", key, "swarm @ann @bob @cy: ship it this week")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved", run["reason"]
    trace = await trace_of(admin_conn, "atlas", run["id"])
    # each checks in in turn; the lead's first answer names no task, so it is asked once more
    assert [(t["step"], t["entry"]["to"]) for t in trace] == [
        ("check-in", ["ann"]),
        ("check-in", ["bob"]),
        ("check-in", ["cy"]),
        ("split", ["ann"]),
        ("split", ["ann"]),
    ]
    assert trace[3]["entry"]["reask"] == ["ann"]
    turns = [p for p in await posts_of(admin_conn, "atlas", run["id"]) if p["event"] == "turn"]
    assert all(key in t["content"] for t in turns), "every question names the row"
    children = await admin_conn.fetch(
        "SELECT key, meta, created_by FROM mycelium.memories WHERE room = 'atlas' AND meta ->> 'part-of' = $1 "
        "ORDER BY key",
        key,
    )
    assert [(c["key"], c["meta"]["assignee"], c["created_by"]) for c in children] == [
        ("work/build-the-passkey-api", "bob", "conductor"),
        ("work/write-the-login-page", "cy", "conductor"),
    ]
    assert all(c["meta"]["status"] == "open" and c["meta"]["kind"] == "action" for c in children)
    # the board knows them as children: the part-of links, and a filed notice for each
    links = await admin_conn.fetch(
        "SELECT source_key, target FROM mycelium.memory_links WHERE room = 'atlas' AND relation = 'part-of' "
        "ORDER BY source_key"
    )
    assert [(lk["source_key"], lk["target"]) for lk in links] == [(c["key"], key) for c in children]
    close = (await posts_of(admin_conn, "atlas", run["id"]))[-1]
    assert close["content"].startswith("✓ swarm: resolved after 5 step(s). Split into 2 child task(s) of ")
    assert close["payload"]["filed"] == [
        {"title": "Build the passkey API", "assignee": "bob", "by": "ann"},
        {"title": "Write the login page", "assignee": "cy", "by": "ann"},
    ]
    # the run never writes the parent's status or lease
    parent = await row(admin_conn, key)
    assert parent["version"] == 1


def agreeing():
    """upstream's worked example: equal text folds, c adds one point in the second round, the word
    two members define means the same, one check."""
    nothing = "Nothing more to add."
    return {
        "ann": in_turn(
            frame=[
                "[[mycelium: objective]] Renew Acme on terms finance can sign.\n"
                "[[mycelium: constraint about=pricing]] A discount of at most 15%."
            ],
            more=[nothing, nothing],
            ground=[
                "[[mycelium: term=renewal]] The same product for a new 12-month term.\n\n"
                "[[mycelium: check covers=p1]] Finance signs the order form."
            ],
        ),
        "bob": in_turn(
            frame=[
                "[[mycelium: objective]] Renew Acme on terms   finance can sign.\n"
                "[[mycelium: out_of_scope]] Changing the product tier."
            ],
            more=[nothing, nothing],
            ground=["[[mycelium: term=Renewal]] the same product for a new 12-month term."],
        ),
        "cy": in_turn(
            frame=["[[mycelium: constraint about=pricing]] A discount of up to 20% is fine."],
            more=["[[mycelium: deliverable]] A signed order form.", nothing],
            ground=["Nothing to add."],
        ),
    }


async def test_accord_merges_the_labelled_points_and_locks_the_summary_related_to_the_task(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Acme renewal")
    await engines_hub()
    for h, rule in agreeing().items():
        agents(h, rule)
    await coordinate(admin_conn, "atlas", key, "accord @ann @bob @cy: agree what the renewal is")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved", run["reason"]
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert [t["step"] for t in trace] == [
        "frame", "added", "more", "added", "more", "added", "ground", "words", "lock",
    ]  # fmt: skip
    assert [t["entry"]["tally"]["outcome"] for t in trace if "tally" in t["entry"]] == [
        "grew", "grew", "settled", "clear",
    ]  # fmt: skip
    summary_key = "context/summary/acme-renewal"
    saved = await row(admin_conn, summary_key)
    assert saved["created_by"] == "conductor" and saved["meta"]["relates-to"] == key
    made = saved["meta"]["contract"]
    points = {p["id"]: p for p in made["points"]}
    assert [p["type"] for p in made["points"]] == [
        "objective", "constraint", "out_of_scope", "constraint", "deliverable",
    ]  # fmt: skip
    # equal text (case and spacing aside) folds, credited to both
    assert points["p1"]["authors"] == ["ann", "bob"] and points["p1"]["support"] == 2
    assert points["p2"]["text"] == "A discount of at most 15%."
    assert "conflict" in points["p2"]["flags"] and "conflict" in points["p4"]["flags"]
    assert "single" in points["p3"]["flags"] and "unchecked" not in points["p1"]["flags"]
    assert made["glossary"] == [
        {
            "term": "renewal",
            "status": "agreed",
            "meanings": [{"text": "The same product for a new 12-month term.", "members": ["ann", "bob"]}],
        }
    ]
    assert made["checks"] == [{"text": "Finance signs the order form.", "covers": ["p1"], "owner": "ann"}]
    assert made["unchecked"] == ["p2", "p3", "p4", "p5"]
    body = saved["body"]
    assert "## Out of scope" in body and "People said different things about pricing: p2, p4" in body
    assert "- Only one person said this: p2, p3, p4, p5" in body
    assert "No embedding model: only equal text was folded" in body  # this hub runs without one
    # the summary relates to the task: a link the graph knows
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM mycelium.memory_links WHERE room = 'atlas' AND source_key = $1 "
        "AND relation = 'relates-to' AND target = $2",
        summary_key,
        key,
    )
    posts = await posts_of(admin_conn, "atlas", run["id"])
    close = posts[-1]
    assert (close["kind"], close["subkind"]) == ("commit", "resolved")
    assert close["content"].startswith("✓ accord: resolved after 9 step(s). 5 point(s), 1 stated by more than one")
    assert f"The shared summary is saved as {summary_key}." in close["content"]
    assert close["payload"]["memory"] == summary_key and "assignments" not in close["payload"]
    (lock,) = [p for p in posts if p["event"] == "lock"]
    assert lock["payload"]["conductor"]["lock"] == {"outcome": "locked", "memory": summary_key, "points": 5}
    more = next(p for p in posts if p["event"] == "turn" and "· more ·" in p["content"])
    assert "p1 (objective, stated by 2 of 3): Renew Acme on terms finance can sign." in more["content"]


async def test_a_word_used_in_different_senses_is_asked_of_those_members_once_then_kept_apart(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Acme renewal")
    await engines_hub()
    frame = ["[[mycelium: objective]] Renew Acme."]
    agents(
        "ann",
        in_turn(
            frame=frame,
            more=["Nothing more."],
            ground=["[[mycelium: term=renewal]] A new 12-month term."],
            restate=["[[mycelium: term=renewal]] A new 12-month term, nothing else."],
        ),
    )
    agents(
        "bob",
        in_turn(
            frame=frame,
            more=["Nothing more."],
            ground=["[[mycelium: term=renewal]] Any contract signed after the old one ends."],
            restate=["[[mycelium: term=renewal]] Any contract after the old one ends."],
        ),
    )
    agents("cy", in_turn(frame=frame, more=["Nothing."], ground=["No special words from me."]))
    await coordinate(admin_conn, "atlas", key, "accord @ann @bob @cy: what is a renewal")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "resolved", run["reason"]
    trace = await trace_of(admin_conn, "atlas", run["id"])
    restated = [t["entry"]["to"] for t in trace if t["step"] == "restate"]
    assert restated == [["ann", "bob"]], "only the members whose meanings differ"
    made = (await row(admin_conn, "context/summary/acme-renewal"))["meta"]["contract"]
    (word,) = made["glossary"]
    assert word["status"] == "contested"
    assert word["meanings"] == [
        {"text": "A new 12-month term, nothing else.", "members": ["ann"]},
        {"text": "Any contract after the old one ends.", "members": ["bob"]},
    ]
    assert {"kind": "ambiguous", "text": "A word used in different senses: renewal", "term": "renewal"} in made[
        "flags"
    ]
    (point,) = made["points"]
    assert point["authors"] == ["ann", "bob", "cy"] and "single" not in point["flags"]
    close = (await posts_of(admin_conn, "atlas", run["id"]))[-1]
    assert "1 word(s) used in different senses" in close["content"]


@pytest.mark.slow
async def test_an_unlabelled_reply_is_asked_once_then_kept_and_silence_is_never_agreement(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Acme renewal")
    await engines_hub(MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="3")
    agents("ann", in_turn(frame=["[[mycelium: objective]] Renew Acme."], more=["Nothing more."], ground=["-"]))
    agents(
        "bob",
        in_turn(
            frame=["I think we renew, not below list price.", "Same: renew, not below list price."],
            more=["Nothing more."],
            ground=["-"],
        ),
    )
    await coordinate(admin_conn, "atlas", key, "accord @ann @bob @cy: what is it")  # cy never answers
    run = await closed_run(admin_conn, "atlas", episode, timeout=90)
    assert run["state"] == "resolved", run["reason"]
    trace = await trace_of(admin_conn, "atlas", run["id"])
    assert trace[0]["entry"]["reask"] == ["bob"] and trace[1]["entry"]["to"] == ["bob"]
    made = (await row(admin_conn, "context/summary/acme-renewal"))["meta"]["contract"]
    assert [(p["type"], p["text"], p["authors"]) for p in made["points"]] == [
        ("objective", "Renew Acme.", ["ann"]),
        ("statement", "Same: renew, not below list price.", ["bob"]),
    ]
    assert {"kind": "quiet_member", "text": "No answer from cy", "members": ["cy"]} in made["flags"]
    close = (await posts_of(admin_conn, "atlas", run["id"]))[-1]
    assert "No answer from cy." in close["content"]


async def test_accord_with_nobody_answering_is_rejected_and_saves_nothing(admin_conn, engines_hub):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Silent")
    await engines_hub(MYCELIUM_CONDUCTOR_STEP_TIMEOUT_S="0.5")
    await coordinate(admin_conn, "atlas", key, "accord @ann @bob: anything")
    run = await closed_run(admin_conn, "atlas", episode)
    assert run["state"] == "rejected"
    close = (await posts_of(admin_conn, "atlas", run["id"]))[-1]
    assert "reached `nothing`" in close["content"] and "No answer from ann, bob." in close["content"]
    assert "memory" not in close["payload"]
    assert await row(admin_conn, "context/summary/silent") is None


async def test_near_duplicates_fold_by_the_hubs_embedding_model(
    admin_conn: asyncpg.Connection, db_dsn, settings_for, agents
):
    """With the bundled model, two wordings of one point are one point; without it, two."""
    from mycelium.hub import Hub
    from mycelium.workers.engines import ENGINES

    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Acme renewal")
    hub = Hub(settings_for(db_dsn, embedder="minilm"), loops=[ENGINES], kind="worker")
    await hub.start()
    try:
        a, b = "Renew the Acme contract for one year.", "Renew Acme's contract for a year."
        vectors = dict(zip([a, b], await hub.embedder.aembed([a, b]), strict=True))
        assert accord.same_text(a, b, vectors) and not accord.same_text(a, "Cut the price by half.", vectors | dict(
            zip(["Cut the price by half."], await hub.embedder.aembed(["Cut the price by half."]), strict=True)
        ))
        agents("ann", in_turn(frame=[f"[[mycelium: objective]] {a}"], more=["No."], ground=["No."]))
        agents("bob", in_turn(frame=[f"[[mycelium: objective]] {b}"], more=["No."], ground=["No."]))
        await coordinate(admin_conn, "atlas", key, "accord @ann @bob: the renewal")
        run = await closed_run(admin_conn, "atlas", episode, timeout=90)
    finally:
        await hub.stop()
    assert run["state"] == "resolved", run["reason"]
    made = (await row(admin_conn, "context/summary/acme-renewal"))["meta"]["contract"]
    (point,) = made["points"]
    assert point["text"] == a and point["authors"] == ["ann", "bob"]
    assert "similarity_unavailable" not in [f["kind"] for f in made["flags"]]


@pytest.mark.parametrize("cap", [1, 3])
def test_points_still_arriving_when_the_rounds_run_out_are_flagged(cap):
    state: dict = {}
    for n in range(cap):
        accord.merge(state, [("ann", [{"label": "sub_goal", "text": f"part {n}"}], "")], None, False)
        outcome = accord.tally_points(state, "added", cap)
        assert outcome == ("grew" if n + 1 < cap else "settled")
    summary = accord.lock(state, ["ann"], "T", "work/t")
    assert "frame_cap_reached" in [f["kind"] for f in summary["contract"]["flags"]]


MEMBER = """\
import json, os, pathlib, sys

prompt, me = os.environ["MYCELIUM_PROMPT"], os.environ["MYCELIUM_HANDLE"]
folder = pathlib.Path(sys.argv[1])
with (folder / f"{me}.seen").open("a") as seen:
    seen.write(json.dumps({"prompt": prompt, "digest": os.environ.get("MYCELIUM_DIGEST", "")}) + "\\n")
for step, text in json.loads((folder / f"{me}.json").read_text()).items():
    if f"· {step} ·" in prompt:
        print(text)
        break
"""


async def test_swarm_with_members_as_await_exec_processes_on_a_hub_process(
    admin_conn: asyncpg.Connection, hub_process, tmp_path
):
    """The hub (`mycelium up`, its engines in-process) and three members, each `mycelium await --loop
    --digest --exec`: the flow runs as people would run it, and each turn reaches its member with the
    digest naming the flow, the step and the row."""
    import json
    import subprocess
    import sys

    from tests.conversations.test_cli import cli_env

    hub = hub_process()
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Ship passkey login")
    (tmp_path / "member.py").write_text(MEMBER)
    answers = {
        "ann": {"check-in": "I lead.", "split": "[[new: Build the API -> @bob]]\n[[new: Write the page -> @cy]]"},
        "bob": {"check-in": "I take the API."},
        "cy": {"check-in": "I take the page."},
    }
    procs = []
    for handle, said in answers.items():
        (tmp_path / f"{handle}.json").write_text(json.dumps(said))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "mycelium.cli.main", "await", "--loop", "--digest", "--handle", handle,
                 "--timeout", "30", "--exec", f"{sys.executable} {tmp_path / 'member.py'} {tmp_path}"],
                env={**cli_env(hub.url), "MYCELIUM_HANDLE": handle},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        await coordinate(admin_conn, "atlas", key, "swarm @ann @bob @cy: ship it")
        run = await closed_run(admin_conn, "atlas", episode, timeout=120)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    assert run["state"] == "resolved", run["reason"]
    children = await admin_conn.fetch(
        "SELECT key, assignee AS who FROM mycelium.board_rows WHERE room = 'atlas' AND parent = $1 "
        "ORDER BY key",
        key,
    )
    assert [(c["key"], c["who"]) for c in children] == [("work/build-the-api", "bob"), ("work/write-the-page", "cy")]
    seen = [json.loads(line) for line in (tmp_path / "bob.seen").read_text().splitlines()]
    turn = next(s for s in seen if "· check-in ·" in s["prompt"])
    assert "It is your turn: @conductor runs swarm, step check-in (turn 2 of 6)." in turn["digest"]
    assert f"--task {key}" in turn["digest"]


async def test_a_later_run_on_the_task_is_shown_what_was_agreed(
    admin_conn: asyncpg.Connection, engines_hub, agents
):
    await setup_room(admin_conn)
    key, episode = await make_task(admin_conn, "atlas", "Acme renewal")
    await engines_hub()
    rules = agreeing()
    for h in ("ann", "bob", "cy"):
        agree = rules[h]

        def rule(text: str, agree=agree, h=h) -> str | None:
            if "· suggest ·" in text:
                return "20% off"
            if "· rate ·" in text:
                return "[[mycelium: A=90]]"
            return agree(text)

        agents(h, rule)
    await coordinate(admin_conn, "atlas", key, "accord @ann @bob @cy: agree what the renewal is")
    first = await closed_run(admin_conn, "atlas", episode)
    assert first["state"] == "resolved"
    await coordinate(admin_conn, "atlas", key, "concord @ann @bob @cy: the discount", by="ann")

    async def converged():
        return await admin_conn.fetchrow(
            "SELECT * FROM mycelium.engine_runs WHERE episode = $1 AND protocol = 'concord' AND state <> 'open'",
            episode,
        )

    run = await eventually(converged, timeout=60)
    assert run["state"] == "converged"
    suggest = next(p for p in await posts_of(admin_conn, "atlas", run["id"]) if p["event"] == "turn")
    assert "What the team already agreed for this task (from context/summary/acme-renewal)" in suggest["content"]
    assert "Renew Acme on terms finance can sign." in suggest["content"]
