"""The room's repository and each worker's worktree of it.

``<data>/workspaces/<room>/repo`` is the room's git repository (made on first use, with one empty
commit on ``main``); each worker engine works in ``<data>/workspaces/<room>/worktrees/<handle>`` on
its own branch ``swarm/<handle>``, so two workers never write to one folder. The repository's setup
is done under a file lock (two processes of one host never make it twice), and a worker's turn
holds its worktree's lock for its whole length: one turn at a time per worktree, whichever process
of the host runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import subprocess
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
LOCK_POLL_SECONDS = 0.1


class WorktreeError(RuntimeError):
    """The repository or a worktree cannot be made (the message says why, with git's words)."""


def identity(handle: str) -> dict[str, str]:
    """The git author and committer a worker's commits carry."""
    return {
        "GIT_AUTHOR_NAME": handle, "GIT_AUTHOR_EMAIL": f"{handle}@mycelium.invalid",
        "GIT_COMMITTER_NAME": handle, "GIT_COMMITTER_EMAIL": f"{handle}@mycelium.invalid",
    }


def _git(args: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=str(cwd), capture_output=True, text=True, timeout=60,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})})
    except FileNotFoundError:
        raise WorktreeError("git is not installed: a worker engine works in a git worktree") from None
    if done.returncode != 0:
        raise WorktreeError(f"git {' '.join(args)}: {(done.stderr or done.stdout).strip()[:500]}")
    return done.stdout


def paths(data_dir: Path, room: str, handle: str) -> tuple[Path, Path]:
    """The room's repository and the handle's worktree."""
    for what, name in (("room", room), ("handle", handle)):
        if not _SAFE.match(name):
            raise WorktreeError(f"{what} {name!r} is not a folder name a worktree can live under")
    base = data_dir.resolve() / "workspaces" / room
    return base / "repo", base / "worktrees" / handle


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure(data_dir: Path, room: str, handle: str) -> Path:
    """The handle's worktree, made (with the repository) when missing; blocking."""
    repo, tree = paths(data_dir, room, handle)
    with _locked(repo.parent / ".repo.lock"):
        if not (repo / ".git").exists():
            repo.mkdir(parents=True, exist_ok=True)
            _git(["init", "-q", "-b", "main"], repo)
            _git(["commit", "-q", "--allow-empty", "-m", f"room {room}"], repo, identity("mycelium"))
        branch = f"swarm/{handle}"
        if (tree / ".git").exists():
            return tree
        _git(["worktree", "prune"], repo)
        if tree.exists() and any(tree.iterdir()):
            raise WorktreeError(f"{tree} exists and is not a worktree of {repo}: move it away")
        known = _git(["branch", "--list", branch], repo).strip()
        if known:
            _git(["worktree", "add", "-q", str(tree), branch], repo)
        else:
            _git(["worktree", "add", "-q", "-b", branch, str(tree), "main"], repo)
    return tree


@contextlib.asynccontextmanager
async def turn(data_dir: Path, room: str, handle: str) -> AsyncIterator[Path]:
    """Hold the handle's worktree for one turn (made first when missing)."""
    tree = await asyncio.to_thread(ensure, data_dir, room, handle)
    fd = os.open(tree.parent / f".{handle}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL_SECONDS)
        try:
            yield tree
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
