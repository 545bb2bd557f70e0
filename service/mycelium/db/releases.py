"""The hub's releases and the schema revision each one ends at.

A database moves between releases: ``mycelium db upgrade`` goes to the head (or to a release), and
``mycelium db downgrade`` goes to a release or to ``base``. A revision between two releases is not a
place a database can be left at, because only a release's code (its functions, views and triggers)
is shipped:

* the head's code is ``sql/``;
* the previous release's code is its snapshot, ``migrations/versions/<revision>.code.sql``, written by
  ``mycelium db freeze`` from the release's commit (one snapshot at a time: cutting a release
  replaces it);
* up to the first release, each revision froze its whole code in its own ``<revision>.sql`` (how
  0.1.0 was built), so those revisions stay reachable too.

CHANGELOG.md records each release with its commit; a test checks that it agrees with this table.
"""

from __future__ import annotations

#: version → the schema revision the release ends at, oldest first
RELEASES: dict[str, str] = {
    "0.1.0": "0005_settings",
    "0.2.0": "0012_compiler",
}

#: the release whose revisions each froze their whole code (see the module docstring)
FIRST = "0.1.0"


def release_of(revision: str) -> str | None:
    """The version of the release that ends at ``revision`` (None: no release ends there)."""
    return next((v for v, rev in RELEASES.items() if rev == revision), None)


def listed() -> str:
    """The releases as a reader wants them in a message: ``0.1.0 (0005_settings), …``."""
    return ", ".join(f"{v} ({rev})" for v, rev in RELEASES.items())
