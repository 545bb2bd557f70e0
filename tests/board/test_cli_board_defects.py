"""`mycelium board` as a user types it against a real hub: filing work with its dependencies and
reading what a row waits on (issue: filing work with its dependencies had no CLI word)."""

from __future__ import annotations

import json

import pytest

from tests.foundation.test_cli_defects import cli, hub_url, room  # noqa: F401 - fixtures


@pytest.mark.slow
def test_board_new_files_dependencies_and_a_parent_and_show_lists_them(hub_url, room):  # noqa: F811
    cli(hub_url, "board", "new", "-r", room, "Schema", "--key", "work/schema")
    cli(hub_url, "board", "new", "-r", room, "Migrate", "--key", "work/migrate")
    out = cli(hub_url, "board", "new", "-r", room, "API", "--key", "work/api", "--depends-on", "work/schema",
              "--depends-on", "work/migrate", "--parent", "work/schema", "--assign", "@julia")
    assert "waits on work/schema, work/migrate" in out.stdout
    fields = json.loads(cli(hub_url, "board", "fields", "-r", room, "work/api", "--json").stdout)["fields"]
    assert fields["depends-on"] == ["work/schema", "work/migrate"] and fields["part-of"] == "work/schema"
    row = json.loads(cli(hub_url, "board", "show", "-r", room, "work/api", "--json").stdout)
    assert sorted(row["waiting_on"]) == ["work/migrate", "work/schema"]
    cli(hub_url, "board", "claim", "-r", room, "work/api", "--force", "--as", "nova")
    shown = cli(hub_url, "board", "show", "-r", room, "work/api").stdout
    lines = dict(line.split(": ", 1) for line in shown.splitlines()[1:])
    assert set(lines["waits on"].split(", ")) == {"work/schema", "work/migrate"}
    assert lines["assignee"] == "@julia" and lines["part of"] == "work/schema" and "_" not in lines["attention"]
    assert lines["lease"].startswith("held by @nova until ") and row["key"] == "work/api"
    cli(hub_url, "board", "resolve", "-r", room, "work/schema")
    cli(hub_url, "board", "resolve", "-r", room, "work/migrate")
    assert "waits on: —" in cli(hub_url, "board", "show", "-r", room, "work/api").stdout


def test_a_refused_dependency_files_nothing(hub_url, room):  # noqa: F811
    cli(hub_url, "board", "new", "-r", room, "A", "--key", "work/a")
    cli(hub_url, "board", "fields", "-r", room, "work/a", "-s", 'depends-on=["work/b"]')
    out = cli(hub_url, "board", "new", "-r", room, "B", "--key", "work/b", "--depends-on", "work/a", ok=False)
    assert out.returncode == 1 and "dependency_cycle" in out.stderr
    assert "Traceback" not in out.stderr
    assert cli(hub_url, "board", "show", "-r", room, "work/b", ok=False).returncode == 1


@pytest.mark.slow
def test_await_lease_wakes_when_a_dependency_settles(hub_url, room):  # noqa: F811
    import os
    import subprocess
    import sys
    import time

    cli(hub_url, "board", "new", "-r", room, "Schema", "--key", "work/schema")
    cli(hub_url, "board", "new", "-r", room, "API", "--key", "work/api", "--depends-on", "work/schema")
    env = {**os.environ, "MYCELIUM_API_URL": hub_url, "MYCELIUM_ROOM": room}
    waiter = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "await", "--lease", "work/api",
                               "--timeout", "30"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    time.sleep(2.0)
    assert waiter.poll() is None  # nothing changed yet: still waiting
    started = time.monotonic()
    cli(hub_url, "board", "resolve", "-r", room, "work/schema")
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert time.monotonic() - started < 10 and out.startswith("work/api: ") and "waits on" not in out
    quiet = cli(hub_url, "await", "-r", room, "--lease", "work/api", "--timeout", "0.5", ok=False)
    assert quiet.returncode == 1 and quiet.stderr.strip() == "no change to the lease of work/api in 0.5 s"
    cli(hub_url, "board", "claim", "-r", room, "work/api", "--as", "nova")
    claimed = cli(hub_url, "await", "-r", room, "--lease", "work/api", "--timeout", "1", ok=False)
    assert claimed.returncode == 1  # a change before the call is its starting point, not a wake
    missing = cli(hub_url, "await", "-r", room, "--lease", "work/none", "--timeout", "1", ok=False)
    assert missing.returncode == 1 and "404" in missing.stderr
