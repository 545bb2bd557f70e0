"""The CLI end to end: a real hub process, the `mycelium` command as a user types it."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import mycelium


@pytest.fixture
def hub_url(hub_processes):
    return hub_processes(extra=()).url  # the mirror on


def cli(url, *args, ok=True, stdin=None):
    return mycelium(*args, url=url, env={"MYCELIUM_HANDLE": "ana"}, ok=True if ok else None, stdin=stdin)


@pytest.mark.slow
def test_rooms_and_memories_from_the_command_line(hub_url, tmp_path):
    cli(hub_url, "room", "create", "atlas", "--title", "Atlas")
    assert "atlas  Atlas" in cli(hub_url, "room", "ls").stdout
    out = cli(hub_url, "memory", "set", "-r", "atlas", "notes/cat", "The cat sat on the mat",
              "-m", "status=draft", "-t", "pets,home")
    assert "notes/cat v1" in out.stdout
    cli(hub_url, "memory", "set", "-r", "atlas", "notes/cash", "-f", "-", stdin="Revenue rose five percent.")
    got = json.loads(cli(hub_url, "memory", "get", "-r", "atlas", "notes/cat", "--json").stdout)
    assert got["meta"] == {"status": "draft"} and got["tags"] == ["pets", "home"]
    assert cli(hub_url, "memory", "get", "-r", "atlas", "notes/cat", "--raw").stdout.strip() == \
        "The cat sat on the mat"
    hits = json.loads(cli(hub_url, "memory", "search", "-r", "atlas", "cat mat", "--json").stdout)
    assert hits["results"][0]["memory"]["key"] == "notes/cat"
    listing = cli(hub_url, "memory", "ls", "-r", "atlas", "notes/").stdout.splitlines()
    assert len(listing) == 2
    stale = cli(hub_url, "memory", "set", "-r", "atlas", "notes/cat", "x", "--base-version", "7", ok=False)
    assert stale.returncode == 1 and "409 stale_base" in stale.stderr
    cli(hub_url, "memory", "rm", "-r", "atlas", "notes/cat")
    history = cli(hub_url, "memory", "history", "-r", "atlas", "notes/cat").stdout.splitlines()
    assert [line.split()[:2] for line in history] == [["v1", "write"], ["v1", "delete"]]
    missing = cli(hub_url, "memory", "get", "-r", "atlas", "notes/cat", ok=False)
    assert missing.returncode == 1 and "404" in missing.stderr
    cli(hub_url, "room", "rm", "atlas", "--yes")
    assert cli(hub_url, "room", "ls").stdout.strip() == ""


def test_an_unreachable_hub_is_a_one_line_error(tmp_path):
    out = cli("http://127.0.0.1:9", "room", "ls", ok=False)
    assert out.returncode == 1 and "cannot reach the hub" in out.stderr


