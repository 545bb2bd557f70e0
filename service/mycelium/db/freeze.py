"""``mycelium db freeze``: a release's code, frozen beside the revision the release ends at.

The code of the previous release (its functions, views and triggers: the code statements of its
``sql/`` files, in its ``SQL_FILES`` order) is what a downgrade to that release re-applies
(:func:`mycelium.db.migrate.code_at`). It is read from the release's commit, as CHANGELOG.md records
it, and written to ``migrations/versions/<revision>.code.sql``; the snapshot of any older release is
removed, so the folder holds one. A source checkout with its git history is needed: this is a step
of cutting a release, not of running a hub.
"""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mycelium.db import releases, schema

_HEADING = re.compile(r"^## (\S+) — ([0-9a-f]{7,40})\b", re.MULTILINE)


class FreezeError(RuntimeError):
    """The snapshot cannot be written from here (said in one line)."""


@dataclass(frozen=True)
class Release:
    version: str
    commit: str
    revision: str
    code: str

    def snapshot(self) -> str:
        """The snapshot file's text: a header, then the code as the release applied it."""
        return (
            f"-- The code of release {self.version} (commit {self.commit}, revision {self.revision}),\n"
            "-- written by `mycelium db freeze`, re-applied by a downgrade to that release.\n"
            "-- Never edit it: a test compares it with the release's commit.\n"
            + self.code + "\n"
        )


def recorded(changelog: str, version: str | None = None) -> tuple[str, str]:
    """(version, commit) of the newest release in a CHANGELOG.md text, or of the one named."""
    found = [(m.group(1), m.group(2)) for m in _HEADING.finditer(changelog)]
    if version is not None:
        found = [f for f in found if f[0] == version]
    if not found:
        raise FreezeError(f"CHANGELOG.md records no release{'' if version is None else ' ' + version} "
                          "with its commit (a heading '## X.Y.Z — <commit>')")
    return found[0]


def _git(repo: Path, *args: str) -> bytes:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    if done.returncode != 0:
        raise FreezeError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _sql_files(schema_py: str) -> tuple[str, ...]:
    """The ``SQL_FILES`` tuple of a release's mycelium/db/schema.py."""
    for node in ast.parse(schema_py).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "SQL_FILES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise FreezeError("the release's service/mycelium/db/schema.py defines no SQL_FILES")


def release_at(repo: Path, version: str, commit: str) -> Release:
    """The release's revision and code, read from its commit in the repository's history."""
    listed = _git(repo, "ls-tree", "--name-only", commit).decode().split()
    archive = _git(repo, "archive", "--format=tar", commit, "sql", "migrations/versions",
                   "service/mycelium/db/schema.py", *(["contracts"] if "contracts" in listed else []))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        files = {m.name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    chain = schema.revision_chain({
        name.rsplit("/", 1)[1]: text for name, text in files.items()
        if name.startswith("migrations/versions/") and name.endswith(".py")})
    if not chain:
        raise FreezeError(f"commit {commit} has no schema revisions")

    def contract(name: str) -> Any:
        data = json.loads(files[f"contracts/{name}"])
        data.pop("_comment", None)
        return data

    code = "\n".join(schema.code_of(schema.inline_contracts(files[f"sql/{name}"], contract))
                     for name in _sql_files(files["service/mycelium/db/schema.py"]))
    return Release(version, commit, chain[-1], code)


def freeze(repo: Path, version: str | None = None) -> Path:
    """Write the snapshot of release ``version`` (default: the newest CHANGELOG.md records) into the
    checkout at ``repo``, remove any other, and return the file written."""
    changelog = repo / "CHANGELOG.md"
    versions = repo / "migrations" / "versions"
    if not changelog.is_file() or not versions.is_dir():
        raise FreezeError(f"{repo} is not a source checkout of the hub (no CHANGELOG.md and migrations/)")
    version, commit = recorded(changelog.read_text(), version)
    release = release_at(repo, version, commit)
    expected = releases.RELEASES.get(version)
    if expected != release.revision:
        raise FreezeError(
            f"release {version} (commit {commit}) ends at schema revision {release.revision}, but "
            f"mycelium/db/releases.py says {expected or 'nothing'}: make them agree first")
    target = versions / f"{release.revision}.code.sql"
    for old in versions.glob("*.code.sql"):
        if old != target:
            old.unlink()
    target.write_text(release.snapshot())
    return target
