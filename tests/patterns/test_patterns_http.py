"""Patterns over HTTP on the real app and database: the shipped pack lists and loads paused, a start
posts the run once (two racing starts: one wins), and a pattern that names an unknown engine kind,
a missing file, a path out of its folder or a bad flow is refused naming it, with nothing written."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import asyncpg
import pytest

from tests.support.apps import app_for


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    folder = tmp_path / "pack"
    folder.mkdir()
    return folder


def pattern(pack: Path, name: str, spec: str, files: dict[str, str] | None = None) -> None:
    folder = pack / name
    folder.mkdir()
    (folder / "pattern.yaml").write_text(textwrap.dedent(spec))
    for rel, text in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
async def api(db_dsn, settings_for, pack):
    from litestar.testing import AsyncTestClient

    from mycelium.hub import Hub

    with app_for(Hub(settings_for(db_dsn, embedder="none", patterns_dir=pack))) as app:
        async with AsyncTestClient(app=app) as c:
            yield c


async def test_the_shipped_pack_is_listed_and_shown(api):
    listed = {p["name"]: p for p in (await api.get("/api/patterns")).json()}
    assert {"review-team", "standing-context"} <= set(listed)
    review = listed["review-team"]
    assert review["valid"] and review["source"] == "hub"
    assert [(e["handle"], e["kind"]) for e in review["engines"]] == [
        ("conductor", "conductor"), ("author", "persona"), ("reviewer", "persona")]
    shown = (await api.get("/api/patterns/review-team")).json()
    assert shown["spec"]["task"]["title"] and "agents/author.md" in shown["files"] and len(shown["digest"]) == 64
    for name in ("nothing-here", "%2e%2e", "Review-Team", "a_b"):
        r = await api.get(f"/api/patterns/{name}")
        assert r.status_code == 404 and r.json()["error"] == "pattern_not_found", (name, r.text)


async def test_a_pattern_loads_paused_and_starts_once(api, admin_conn):
    r = await api.post("/api/rooms/rev/patterns/review-team", json={"created_by": "ana"})
    assert r.status_code == 201, r.text
    loaded = r.json()
    assert (loaded["pattern"], loaded["state"], loaded["loaded_by"]) == ("review-team", "paused", "ana")
    engines = {e["handle"]: e["kind"] for e in (await api.get("/api/rooms/rev/engines")).json()}
    assert engines == {"conductor": "conductor", "author": "persona", "reviewer": "persona"}
    notes = (await api.get("/api/rooms/rev/memory/agents/reviewer/notes")).json()
    assert "stance=accept" in str(notes["value"]) and notes["tags"] == ["pattern"]
    assert (await api.get("/api/rooms/rev/memory/context/brief")).status_code == 200
    task = (await api.get(f"/api/rooms/rev/tasks/{loaded['task']}")).json()
    assert task["title"] == "Review the draft the brief asks for"
    said = await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE room = 'rev' "
                                     "AND content LIKE '%@conductor%'")
    assert said == 0  # paused: nothing summoned
    assert (await api.get("/api/rooms/rev/pattern")).json()["state"] == "paused"

    started = await api.post("/api/rooms/rev/pattern/run", json={"by": "ana"})
    assert started.status_code == 201, started.text
    assert (started.json()["state"], started.json()["started_by"]) == ("started", "ana")
    summon = await admin_conn.fetchrow("SELECT sender, content, episode FROM mycelium.messages "
                                       "WHERE room = 'rev' AND content LIKE '@conductor review%'")
    assert summon["sender"] == "ana" and "@author @reviewer" in summon["content"]
    episode = await admin_conn.fetchval("SELECT episode FROM mycelium.memories WHERE room = 'rev' AND key = $1",
                                        loaded["task"])
    assert summon["episode"] == episode  # in the task's thread
    again = await api.post("/api/rooms/rev/pattern/run", json={"by": "bob"})
    assert again.status_code == 409 and again.json()["error"] == "pattern_started"
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE room = 'rev' "
                                     "AND content LIKE '@conductor review%'") == 1


async def test_a_room_that_exists_or_holds_no_pattern_is_refused(api, admin_conn):
    assert (await api.post("/api/rooms", json={"name": "taken"})).status_code == 201
    r = await api.post("/api/rooms/taken/patterns/standing-context", json={"created_by": "ana"})
    assert r.status_code == 409 and r.json()["error"] == "room_exists"
    assert "pattern 'standing-context', room:" in r.json()["message"]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.memories WHERE room = 'taken'") == 0
    r = await api.post("/api/rooms/taken/pattern/run", json={"by": "ana"})
    assert r.status_code == 404 and r.json()["error"] == "pattern_not_loaded"
    r = await api.post("/api/rooms/nowhere/pattern/run", json={"by": "ana"})
    assert r.status_code == 404 and r.json()["error"] == "room_not_found"
    r = await api.post("/api/rooms/x/patterns/review-team", json={})
    assert r.status_code in (400, 422) and "created_by" in r.text


GOOD_ENGINE = "engines:\n  - {handle: conductor, kind: conductor}\n"


@pytest.mark.parametrize(("spec", "files", "status", "error", "named"), [
    ("title: T\nengines:\n  - {handle: conductor, kind: conductor}\n  - {handle: zed, kind: wizard}\n", {},
     422, "unknown_engine_kind", "engines[1] (@zed)"),
    ("title: T\nmemories:\n  - {key: context/a, file: context/a.md}\n", {}, 422, "bad_pattern",
     "memories[0].file: file 'context/a.md' is missing"),
    ("title: T\nmemories:\n  - {key: context/a, file: ../secret.md}\n", {}, 422, "bad_pattern",
     "is not a plain relative path"),
    ("title: T\nmemories:\n  - {key: context/a, file: /etc/hostname}\n", {}, 422, "bad_pattern",
     "is not a plain relative path"),
    ("title: T\nmemories:\n  - {key: context/a, file: link.md}\n", {"link.md": "->"}, 422, "bad_pattern",
     "leads out of the pattern's folder"),
    ("title: T\nflavour: sweet\n", {}, 422, "bad_pattern", "flavour: Extra inputs are not permitted"),
    ("title: T\nprotocols:\n  - {name: mine, file: p.yaml}\n", {"p.yaml": "roles: [a]\nsteps: []\n"}, 422,
     "bad_pattern", "protocols[0] (mine): "),
    ("title: T\n" + GOOD_ENGINE + "run:\n  - {engine: ghost, text: go}\n", {}, 422, "bad_pattern",
     "run[0]: @ghost is none of the pattern's engines"),
    ("title: T\nrunners:\n  - {handle: bob, command: [echo, '{nope}']}\n", {}, 422, "unknown_placeholder",
     "runners[0] (@bob)"),
    ("title: [unclosed\n", {}, 422, "bad_pattern", "pattern.yaml is not readable YAML"),
], ids=["unknown-kind", "missing-file", "dotdot", "absolute", "symlink-out", "unknown-field", "bad-flow",
        "run-unknown-engine", "bad-runner", "bad-yaml"])
async def test_a_bad_pattern_is_refused_naming_the_problem_and_writes_nothing(
        api, admin_conn, pack, tmp_path, spec, files, status, error, named):
    link = files.pop("link.md", None)
    pattern(pack, "broken", spec, files)
    if link is not None:
        (tmp_path / "outside.md").write_text("outside")
        (pack / "broken" / "link.md").symlink_to(tmp_path / "outside.md")
    r = await api.post("/api/rooms/fresh/patterns/broken", json={"created_by": "ana"})
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == error and named in body["message"], body
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.rooms WHERE name = 'fresh'") == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.runners") == 0
    if error == "bad_pattern":
        listed = {p["name"]: p for p in (await api.get("/api/patterns")).json()}
        assert listed["broken"]["valid"] is False and listed["broken"]["problems"]


async def test_an_operator_pattern_with_runners_and_a_protocol_loads_and_wins_over_the_hubs(api, pack):
    pattern(pack, "review-team", """\
        title: Our own review team
        engines:
          - {handle: conductor, kind: conductor}
        protocols:
          - {name: check, file: flows/check.yaml}
        runners:
          - {handle: bob, command: "python -c 'print(1)' {room}", approval: required}
        task: {title: Check it, assignee: bob}
        run:
          - {engine: conductor, text: "check @bob: is it right?"}
        """, {"flows/check.yaml": textwrap.dedent("""\
        roles: [checker]
        steps:
          - {id: ask, to: checker, prompt: "Check: {ask}", next: done}
          - {id: done, end: resolved}
        """)})
    listed = {p["name"]: p for p in (await api.get("/api/patterns")).json()}
    assert listed["review-team"]["source"] == "operator" and listed["review-team"]["title"] == "Our own review team"
    r = await api.post("/api/rooms/ours/patterns/review-team", json={"created_by": "ana", "run": True})
    assert r.status_code == 201, r.text
    assert r.json()["state"] == "started"
    runner = (await api.get("/api/rooms/ours/runners/bob")).json()
    assert runner["command"] == ["python", "-c", "print(1)", "{room}"] and runner["approval"] == "required"
    flows = {f["name"]: f for f in (await api.get("/api/rooms/ours/protocols")).json()}
    assert flows["check"]["valid"] and flows["check"]["source"] == "room"


async def test_two_racing_starts_post_the_run_once(api, db_dsn, admin_conn):
    assert (await api.post("/api/rooms/race/patterns/standing-context", json={"created_by": "ana"})).status_code == 201
    conns = [await asyncpg.connect(db_dsn) for _ in range(2)]
    try:
        async def start(conn, who):
            try:
                async with conn.transaction():
                    await conn.execute("SELECT mycelium.start_pattern('race', $1)", who)
                    await asyncio.sleep(0.2)  # hold the row while the other tries
                return "started"
            except asyncpg.PostgresError as exc:
                return exc.sqlstate

        got = sorted(await asyncio.gather(start(conns[0], "ana"), start(conns[1], "bob")))
    finally:
        for c in conns:
            await c.close()
    assert got == ["MY409", "started"]
    assert await admin_conn.fetchval("SELECT count(*) FROM mycelium.messages WHERE room = 'race' "
                                     "AND content LIKE '@synthesizer%'") == 1


async def test_from_the_web_app_a_person_loads_a_pattern_and_starts_it(api, admin_conn, pack):
    pattern(pack, "broken", "title: T\nflavour: sweet\n")
    page = await api.get("/patterns")
    assert page.status_code == 200 and 'data-pattern="review-team"' in page.text
    assert "flavour: Extra inputs are not permitted" in page.text  # a broken one says why
    r = await api.post("/patterns/review-team/load", data={"room": "web", "handle": "ana"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/room/web", r.text
    room = (await api.get("/room/web")).text
    assert 'data-pattern="review-team"' in room and "<strong>paused</strong>" in room
    r = await api.post("/room/web/pattern/run", data={"handle": "ana"}, follow_redirects=False)
    assert r.status_code == 303
    room = (await api.get("/room/web")).text
    assert "started by @ana" in room and "<strong>paused</strong>" not in room
    again = await api.post("/room/web/pattern/run", data={"handle": "ana"})
    assert again.status_code == 409 and "was started already" in again.text  # a page, with the reason
    taken = await api.post("/patterns/standing-context/load", data={"room": "web", "handle": "ana"})
    assert taken.status_code == 409 and "pattern &#39;standing-context&#39;, room:" in taken.text
    assert "No files." in room and (await api.get("/room/nowhere")).status_code == 404
