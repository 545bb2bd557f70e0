"""Defects a new user hit in the CLI: each test runs `mycelium` as a process against a real hub."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.support.cli import mycelium


@pytest.fixture
def hub_url(shared_hub):
    """The session's shared hub (tests/support/hubs.py): each test keeps to a room of its own."""
    return shared_hub.url


@pytest.fixture
def room(shared_room):
    """A fresh room of this test's own."""
    return shared_room


def cli(url, *args, ok=True, stdin=None, env=None, timeout=60):
    return mycelium(*args, url=url, env={"MYCELIUM_HANDLE": "ana", **(env or {})}, ok=True if ok else None,
                    stdin="" if stdin is None else stdin, timeout=timeout)


def no_traceback(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stderr, out.stderr


# -- item 8: values as typed, and no traceback ----------------------------------------------------

TYPED = ["due=2024-06-01", "answer=no", "release=1.10", "code=007", "done=true", "count=3", "ratio=0.5",
         'items=["a", 1]', 'nested={"a": false}', 'quoted="3"', "when=NaN", "empty="]
AS_TYPED = {"due": "2024-06-01", "answer": "no", "release": "1.10", "code": "007", "done": True, "count": 3,
            "ratio": 0.5, "items": ["a", 1], "nested": {"a": False}, "quoted": "3", "when": "NaN"}


def test_meta_and_field_values_are_taken_as_typed(hub_url, room):
    args = [a for pair in TYPED for a in ("-m", pair)]
    out = cli(hub_url, "memory", "set", "-r", room, "notes/typed", "body", *args)
    no_traceback(out)
    got = json.loads(cli(hub_url, "memory", "get", "-r", room, "notes/typed", "--json").stdout)
    assert got["meta"] == AS_TYPED  # `empty=` sets nothing on a new memory
    cli(hub_url, "board", "new", "-r", room, "Typed fields", "--key", "work/typed")
    args = [a for pair in TYPED for a in ("-s", pair)]
    fields = json.loads(cli(hub_url, "board", "fields", "-r", room, "work/typed", *args, "--json").stdout)
    assert {k: fields["fields"].get(k) for k in AS_TYPED} == AS_TYPED


def test_ctrl_c_during_await_exits_130_without_a_traceback(hub_url, room):
    import signal
    import time

    env = {**os.environ, "MYCELIUM_API_URL": hub_url}
    proc = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "await", "-r", room, "--handle", "bo",
                             "--timeout", "30"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 30  # until the hub holds its long poll (its presence shows it)
    while "bo" not in httpx.get(f"{hub_url}/api/rooms/{room}/sessions/members").text:
        assert time.monotonic() < deadline and proc.poll() is None, "await never reached the hub"
        time.sleep(0.05)
    time.sleep(0.2)  # the poll itself, past its presence touch
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "Traceback" not in err and err.strip() == ""


# -- item 7: the listing shows ids that show and release take -------------------------------------


def claim_transition(url: str, request_id: str) -> None:
    body = {"request_id": request_id, "transition_key": "k-" + request_id, "tool": "pay", "owner": "w:1",
            "side_effect_class": "non_idempotent_mutate", "agent_id": "agent-7"}
    assert httpx.post(url + "/api/transitions/claim", json=body).status_code == 200


def test_transition_ids_from_the_listing_are_accepted(hub_url):
    ids = ["7" * 40 + "a" * 24, "7" * 40 + "b" * 24]  # 64 characters, the first 40 shared
    for rid in ids:
        claim_transition(hub_url, rid)
    listed = cli(hub_url, "transitions", "ls", "--agent", "agent-7").stdout.split()
    assert set(ids) <= set(listed)
    for rid in ids:
        assert rid in cli(hub_url, "transitions", "show", rid).stdout
    unique = cli(hub_url, "transitions", "show", ids[0][:45], "--json")
    assert json.loads(unique.stdout)["request_id"] == ids[0]
    ambiguous = cli(hub_url, "transitions", "show", "7" * 40, ok=False)
    assert ambiguous.returncode == 1 and ids[0] in ambiguous.stderr and ids[1] in ambiguous.stderr
    no_traceback(ambiguous)
    assert "404" in cli(hub_url, "transitions", "show", "nope-nothing", ok=False).stderr
    refused = cli(hub_url, "transitions", "release", "7" * 40, "--not-executed", "--reason", "r", ok=False)
    assert refused.returncode == 1 and ids[1] in refused.stderr
    out = cli(hub_url, "transitions", "release", ids[1][:50], "--completed", "--reason", "checked", ok=False)
    assert "409 release_refused" in out.stderr and ids[1] in out.stderr  # the hub was sent the full id


# -- item 10: a busy port is one line, before anything else ---------------------------------------


def test_up_on_a_busy_port_says_so_in_one_line_and_nothing_else(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "mycelium.cli.main", "up", "--port", str(port), "--data-dir",
             str(tmp_path / "data"), "--database-url", "postgresql://nobody@127.0.0.1:9/none", "--no-mirror"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "MYCELIUM_EMBEDDER": "none"})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in out.stderr and "in use" in out.stderr


# -- item 11: text output is for people, not Python reprs -----------------------------------------

REPRS = ("None", "True", "False", "['", "{'")


def no_repr(text: str) -> None:
    assert not [r for r in REPRS if r in text], text


def test_text_output_carries_no_python_reprs(hub_url, room):
    shown = cli(hub_url, "room", "show", room).stdout
    no_repr(shown)
    assert "title: —" in shown and "visibility: public" in shown
    gate = cli(hub_url, "board", "gate", "-r", room).stdout
    no_repr(gate)
    assert "(room: not set, hub: " in gate
    for key in ("work/a", "work/b", "work/c"):
        cli(hub_url, "board", "new", "-r", room, key, "--key", key)
    fields = cli(hub_url, "board", "fields", "-r", room, "work/c", "-s", 'depends-on=["work/a", "work/b"]',
                 "-s", "urgent=true").stdout
    no_repr(fields)
    assert "depends-on: work/a, work/b" in fields and "urgent: yes" in fields
    cli(hub_url, "memory", "set", "-r", room, "notes/m", "body", "-m", "ok=false", "-m", 'who=["a", "b"]',
        "-m", 'more={"x": null}')
    got = cli(hub_url, "memory", "get", "-r", room, "notes/m").stdout
    no_repr(got)
    assert "ok: no" in got and "who: a, b" in got


# -- item 13: silent outcomes say what happened ---------------------------------------------------


def test_an_await_that_times_out_says_so(hub_url, room):
    out = cli(hub_url, "await", "-r", room, "--handle", "@hal", "--timeout", "0.5", ok=False)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == "no message for @hal in 0.5 s"


def test_a_search_query_with_problems_exits_non_zero(hub_url, room):
    cli(hub_url, "room", "send", "-r", room, "hello there")
    bad = cli(hub_url, "room", "search", "-r", room, "hello after:notadate", ok=False)
    assert bad.returncode == 1 and "after:notadate" in bad.stderr
    assert cli(hub_url, "room", "search", "-r", room, "hello").returncode == 0


def test_memory_ls_says_how_many_more_there_are(hub_url, room):
    items = [{"key": f"notes/n{i:02}", "value": f"note {i}", "created_by": "ana", "embed": False}
             for i in range(12)]
    assert httpx.post(f"{hub_url}/api/rooms/{room}/memory", json={"items": items}).status_code in (200, 201)
    page = cli(hub_url, "memory", "ls", "-r", room, "--limit", "5")
    assert len(page.stdout.splitlines()) == 5 and page.stderr.strip() == "… 7 more (use --offset 5)"
    last = cli(hub_url, "memory", "ls", "-r", room, "--limit", "5", "--offset", "10")
    assert len(last.stdout.splitlines()) == 2 and last.stderr == ""


def test_room_messages_prints_in_the_order_its_help_says(hub_url, room):
    for text in ("first", "second", "third"):
        cli(hub_url, "room", "send", "-r", room, text)
    lines = cli(hub_url, "room", "messages", "-r", room).stdout.splitlines()
    assert [line.rsplit(": ", 1)[-1] for line in lines] == ["first", "second", "third"]
    helps = cli(hub_url, "room", "--help").stdout + cli(hub_url, "board", "--help").stdout
    assert "newest first" not in helps and helps.count("oldest first") == 2


# -- item 15: destructive commands ask first ------------------------------------------------------


def on_a_terminal(url: str, *args: str, answer: str, env: dict | None = None) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as stdin/stdout, type ``answer``, return status and output."""
    import pty
    import select

    main, child = pty.openpty()
    full_env = {**os.environ, "MYCELIUM_API_URL": url, "MYCELIUM_HANDLE": "ana", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", *args], stdin=child, stdout=child,
                            stderr=child, env=full_env, close_fds=True)
    os.close(child)
    seen = b""
    try:
        while b"[y/N]" not in seen:  # the prompt, then the answer
            ready, _, _ = select.select([main], [], [], 30)
            assert ready, seen
            seen += os.read(main, 4096)
        os.write(main, answer.encode() + b"\n")
        status = proc.wait(timeout=60)
        while select.select([main], [], [], 0.2)[0]:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(main)
    return status, seen.decode(errors="replace")


def room_exists(url: str, name: str) -> bool:
    return httpx.get(f"{url}/api/rooms/{name}").status_code == 200


def test_room_rm_asks_on_a_terminal_and_refuses_without_one_unless_yes(hub_url, room):
    piped = cli(hub_url, "room", "rm", room, ok=False)
    assert piped.returncode == 1 and "--yes" in piped.stderr and room_exists(hub_url, room)
    status, seen = on_a_terminal(hub_url, "room", "rm", room, answer="n")
    assert status == 1 and f"delete room {room}" in seen and room_exists(hub_url, room)
    status, seen = on_a_terminal(hub_url, "room", "rm", room, answer="y")
    assert status == 0 and f"deleted room {room}" in seen and not room_exists(hub_url, room)
    httpx.post(hub_url + "/api/rooms", json={"name": room})
    cli(hub_url, "room", "rm", room, "--yes")
    assert not room_exists(hub_url, room)
    missing = cli(hub_url, "room", "rm", room, "--yes", ok=False)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_db_downgrade_asks_on_a_terminal_and_refuses_without_one_unless_yes(pg_server, tmp_path):
    from mycelium.db import migrate

    name = asyncio.run(pg_server.create_database())
    dsn = pg_server.dsn(name)
    try:
        head = asyncio.run(migrate.current_revision(dsn))
        piped = cli("http://unused", "db", "downgrade", "base", "--database-url", dsn, ok=False)
        assert piped.returncode == 1 and "--yes" in piped.stderr and "Traceback" not in piped.stderr
        assert asyncio.run(migrate.current_revision(dsn)) == head
        status, seen = on_a_terminal("http://unused", "db", "downgrade", "base", "--database-url", dsn,
                                     answer="no")
        assert status == 1 and f"from {head} to base" in seen
        assert asyncio.run(migrate.current_revision(dsn)) == head
        done = cli("http://unused", "db", "downgrade", "base", "--database-url", dsn, "--yes")
        assert "database at base" in done.stdout and asyncio.run(migrate.current_revision(dsn)) is None
    finally:
        asyncio.run(pg_server.drop_database(name))


# -- item 16: db psql takes psql's flags as psql does, and works as the owner ---------------------


def test_db_psql_passes_psql_flags_through_and_works_as_the_owner(pg_server):
    name = asyncio.run(pg_server.create_database())
    dsn = pg_server.dsn(name)
    try:
        def psql(*args: str) -> str:
            return cli("http://unused", "db", "psql", *args).stdout.strip()

        url_user = psql("--database-url", dsn, "-X", "-At", "-c", "SELECT current_user")
        assert url_user == psql("--database-url", dsn, "--", "-At", "-c", "SELECT session_user")
        assert psql("--database-url", dsn, "--as", "auditor", "-At", "-c", "SELECT current_user") == \
            "mycelium_auditor"
        assert psql("--database-url", dsn, "--as", "admin", "-At", "-c", "SELECT current_user") == \
            "mycelium_admin"
        if pg_server.embedded is None:
            return
        # the embedded server (its own database): the owner by default, as the README says
        folder = str(pg_server.embedded.data_dir)
        assert psql("--data-dir", folder, "-At", "-c", "SELECT current_user") == "mycelium_admin"
        assert psql("--data-dir", folder, "--as", "app", "-At", "-c", "SELECT current_user") == "mycelium_app"
        assert psql("--data-dir", folder, "--as", "superuser", "-At", "-c", "SELECT current_user") == "postgres"
    finally:
        asyncio.run(pg_server.drop_database(name))


def test_mycelium_version(hub_url):
    from mycelium import __version__

    assert "--version" in cli(hub_url, "--help").stdout
    for flag in ("--version", "-V"):
        out = cli(hub_url, flag)
        assert out.stdout.strip() == f"mycelium {__version__}"
