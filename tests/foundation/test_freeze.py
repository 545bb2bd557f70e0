"""Releases and their code snapshot: CHANGELOG.md and mycelium.db.releases agree, the one snapshot in
migrations/versions is the previous release's code as its commit has it, and `mycelium db freeze`
writes exactly that (and removes an older snapshot)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mycelium.db import schema
from mycelium.db.freeze import recorded, release_at
from mycelium.db.releases import FIRST, RELEASES
from tests.support import REPO_ROOT

VERSIONS = REPO_ROOT / "migrations" / "versions"


def needs_history() -> None:
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("needs the repository's history: run from a git clone")


def test_changelog_records_the_releases_that_mycelium_db_releases_lists():
    text = (REPO_ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (\d+\.\d+\.\d+) — [0-9a-f]{7,40}\b", text, re.MULTILINE)
    assert headings == list(reversed(RELEASES)), "CHANGELOG.md's releases, newest first, are RELEASES' ones"
    for version, revision in RELEASES.items():
        entry = text.split(f"## {version} — ", 1)[1].split("\n## ", 1)[0]
        assert f"`{revision}`" in entry, f"the {version} entry names its schema revision {revision}"
        assert revision in schema.revisions()
    assert next(iter(RELEASES)) == FIRST


def test_the_one_snapshot_is_the_previous_release_s_code_as_its_commit_has_it():
    needs_history()
    version, commit = recorded((REPO_ROOT / "CHANGELOG.md").read_text())
    snapshots = sorted(p.name for p in VERSIONS.glob("*.code.sql"))
    if version == FIRST:  # its revisions froze their whole code themselves
        assert snapshots == []
        return
    assert snapshots == [f"{RELEASES[version]}.code.sql"]
    release = release_at(REPO_ROOT, version, commit)
    assert release.revision == RELEASES[version]
    assert (VERSIONS / snapshots[0]).read_text() == release.snapshot()


def mycelium(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mycelium.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_freeze_writes_the_release_s_snapshot_and_removes_an_older_one(tmp_path):
    needs_history()
    version, commit = recorded((REPO_ROOT / "CHANGELOG.md").read_text())
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO_ROOT), str(clone)], check=True)
    for old in (clone / "migrations" / "versions").glob("*.code.sql"):
        old.unlink()
    stale = clone / "migrations" / "versions" / "0009_engines.code.sql"
    stale.write_text("-- an older release's snapshot\n")
    done = mycelium("db", "freeze", cwd=clone)
    assert done.returncode == 0, done.stderr
    written = clone / "migrations" / "versions" / f"{RELEASES[version]}.code.sql"
    assert done.stdout.strip() == f"wrote migrations/versions/{written.name}"
    assert not stale.exists()
    assert sorted(p.name for p in written.parent.glob("*.code.sql")) == [written.name]
    assert written.read_text() == release_at(REPO_ROOT, version, commit).snapshot()
    assert f"release {version} (commit {commit}" in written.read_text().splitlines()[0]


def test_freeze_refuses_in_one_line_what_it_cannot_do(tmp_path):
    needs_history()
    done = mycelium("db", "freeze", "9.9.9", "--repo", str(REPO_ROOT), cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "CHANGELOG.md records no release 9.9.9" in done.stderr and done.stderr.strip().count("\n") == 0
    done = mycelium("db", "freeze", cwd=tmp_path)  # not a git work tree
    assert done.returncode != 0 and "source checkout" in done.stderr and "Traceback" not in done.stderr
