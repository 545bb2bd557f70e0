"""The wheel built from this working tree, once per test run: a session fixture (tests/conftest.py
exposes it), shared by the xdist workers of one run through a lock in their common temporary folder."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

#: what the build reads (pyproject.toml maps sql/, migrations/ and contracts/ into the package)
SOURCES = ("pyproject.toml", "README.md", "service", "sql", "migrations", "contracts")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that points at the checkout, its venv or a database (but
    the suite's SLIM switch: its processes run no SLIM node unless a test asks)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "DATABASE_URL")
           and (not k.startswith("MYCELIUM_") or k == "MYCELIUM_SLIM")}  # the suite's SLIM default
    return {**env, **extra}


def build_wheel(folder: Path) -> Path:
    """Build the wheel from a copy of what the build reads (so the build leaves nothing behind in the
    checkout) into ``folder``; the wheel's path."""
    assert not folder.resolve().is_relative_to(REPO_ROOT), folder
    src = folder / "src"
    src.mkdir(parents=True)
    for name in SOURCES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
        else:
            shutil.copy2(source, src / name)
    out = folder / "dist"
    out.mkdir()
    args = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    done = subprocess.run(args, cwd=out, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    [built] = out.glob("mycelium_hub-*.whl")
    return built


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this working tree: built by the first test that asks, in this run."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder every worker of this run shares
    folder = root / "wheel-once"
    with open(root / "wheel-once.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            built = sorted((folder / "dist").glob("mycelium_hub-*.whl")) if folder.exists() else []
            if built:
                return built[0]
            if folder.exists():
                shutil.rmtree(folder)  # a build that failed half-way
            folder.mkdir()
            return build_wheel(folder)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
