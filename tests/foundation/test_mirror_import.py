"""`mycelium mirror import` against a real hub: unchanged files are skipped, a changed file is written
at the version it was exported from (refused as stale if the memory moved on), a missing memory or
room is created, re-importing is a no-op, and the mirror round-trips through git."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.support.cli import mycelium
from tests.support.processes import HubProcess


@pytest.fixture
def hub(hub_processes):
    return hub_processes(extra=())  # the mirror on


def cli(url, *args, ok=True):
    return mycelium(*args, url=url, env={"MYCELIUM_HANDLE": "ana"}, ok=True if ok else None, timeout=120)


def sql(dsn: str, query: str):
    async def run():
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(query)
        finally:
            await conn.close()
    return asyncio.run(run())


def versions(dsn: str) -> int:
    return sql(dsn, "SELECT count(*) FROM mycelium.memory_versions WHERE op = 'write'")


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=folder,
                   check=True, capture_output=True)


def seed(hub: HubProcess, room: str, n: int) -> Path:
    """A room of n memories, and its folder once the mirror has written them all."""
    httpx.post(f"{hub.url}/api/rooms", json={"name": room}).raise_for_status()
    items = [{"key": f"notes/n{i}", "value": f"note {i}", "created_by": "bob", "tags": ["t"],
              "meta": {"status": "draft"}} for i in range(n)]
    httpx.post(f"{hub.url}/api/rooms/{room}/memory", json={"items": items}).raise_for_status()
    folder = hub.data_dir / "rooms" / room
    deadline = time.monotonic() + 30
    while len(list(folder.rglob("*.md"))) < n:
        assert time.monotonic() < deadline, "the mirror did not write the files"
        time.sleep(0.1)
    return folder


def edit(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


@pytest.mark.slow
def test_the_mirror_round_trips_through_git(hub, db_dsn, tmp_path):
    mirror = seed(hub, "atlas", 10)
    checkout = tmp_path / "checkout"
    shutil.copytree(mirror.parent, checkout)
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "export")
    assert versions(db_dsn) == 10
    edit(checkout / "atlas" / "notes" / "n3.md", "note 3", "note three, edited")
    out = cli(hub.url, "mirror", "import", str(checkout))
    assert "imported 1 of 10 files: 0 created, 1 changed, 9 unchanged" in out.stdout
    assert versions(db_dsn) == 11
    n3 = httpx.get(f"{hub.url}/api/rooms/atlas/memory/notes/n3").json()
    assert (n3["version"], n3["value"]["text"], n3["updated_by"]) == (2, "note three, edited", "ana")
    assert n3["tags"] == ["t"] and n3["meta"] == {"status": "draft"}
    for _ in range(2):  # the same folder again, and after committing it: nothing to write
        out = cli(hub.url, "mirror", "import", str(checkout))
        assert "imported 0 of 10 files: 0 created, 0 changed, 10 unchanged" in out.stdout
        git(checkout, "commit", "-q", "--allow-empty", "-am", "edit")
    assert versions(db_dsn) == 11
    time.sleep(1.5)  # the hub's own mirror, followed since, imports as nothing too
    out = cli(hub.url, "mirror", "import", str(mirror.parent))
    assert "0 changed, 10 unchanged" in out.stdout and versions(db_dsn) == 11


@pytest.mark.slow
def test_a_file_behind_the_hub_is_refused_as_stale_with_the_difference(hub, db_dsn, tmp_path):
    mirror = seed(hub, "atlas", 2)
    checkout = tmp_path / "checkout"
    shutil.copytree(mirror.parent, checkout)
    httpx.post(f"{hub.url}/api/rooms/atlas/memory",
               json={"items": [{"key": "notes/n0", "value": "moved on", "created_by": "bob"}]}).raise_for_status()
    edit(checkout / "atlas" / "notes" / "n0.md", "note 0", "my edit")
    edit(checkout / "atlas" / "notes" / "n1.md", "status: draft", "status: done")
    out = cli(hub.url, "mirror", "import", str(checkout), ok=False)
    assert out.returncode == 1
    assert "imported 1 of 2 files: 0 created, 1 changed, 0 unchanged, 1 refused" in out.stdout
    refusal = next(line for line in out.stdout.splitlines() if "notes/n0" in line)
    assert "stale: the file is from v1, the hub is at v2 (by bob)" in refusal and "body +1 -1 lines" in refusal
    assert httpx.get(f"{hub.url}/api/rooms/atlas/memory/notes/n0").json()["value"]["text"] == "moved on"
    assert httpx.get(f"{hub.url}/api/rooms/atlas/memory/notes/n1").json()["meta"] == {"status": "done"}
    assert versions(db_dsn) == 4
    cli(hub.url, "mirror", "import", str(checkout), "--force")
    assert httpx.get(f"{hub.url}/api/rooms/atlas/memory/notes/n0").json()["value"]["text"] == "my edit"


@pytest.mark.slow
def test_an_export_restores_into_an_empty_hub_without_force(hub, db_dsn, tmp_path):
    mirror = seed(hub, "atlas", 3)
    backup = tmp_path / "backup"
    shutil.copytree(mirror.parent, backup)
    httpx.delete(f"{hub.url}/api/rooms/atlas").raise_for_status()
    assert sql(db_dsn, "SELECT count(*) FROM mycelium.rooms") == 0
    room = backup / "atlas"
    (room / "hand.md").write_text("just a body, no frontmatter\n")
    (room / "bad.md").write_text("---\nkey: [unclosed\n---\nx\n")
    out = cli(hub.url, "mirror", "import", str(backup), ok=False)
    assert out.returncode == 1  # the bad file, and only it
    assert "created room atlas" in out.stdout
    assert "imported 4 of 5 files: 4 created, 0 changed, 0 unchanged, 1 refused" in out.stdout
    assert "atlas/bad.md" in out.stdout
    got = httpx.get(f"{hub.url}/api/rooms/atlas/memory/notes/n1").json()
    assert got["value"]["text"] == "note 1" and got["tags"] == ["t"] and got["meta"] == {"status": "draft"}
    assert httpx.get(f"{hub.url}/api/rooms/atlas/memory/hand").json()["value"]["text"] == \
        "just a body, no frontmatter"
    (room / "bad.md").unlink()
    out = cli(hub.url, "mirror", "import", str(backup))
    assert "imported 0 of 4 files: 0 created, 0 changed, 4 unchanged" in out.stdout
    # a field taken out of a file is taken off the memory
    edit(room / "notes" / "n2.md", "status: draft\n", "")
    cli(hub.url, "mirror", "import", str(backup))
    assert httpx.get(f"{hub.url}/api/rooms/atlas/memory/notes/n2").json()["meta"] == {}
    assert json.loads(cli(hub.url, "memory", "get", "-r", "atlas", "notes/n2", "--json").stdout)["version"] == 2
