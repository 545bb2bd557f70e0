"""``mycelium demo --redis``: the two-process redispatch proof on a Redis ledger, run as a user runs it
(the real command, real worker processes, a real redis-server): the plain tool runs twice, the
ledgered one once, with a server the demo starts itself or one given by URL (twice on the same one)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def demo(cwd, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MYCELIUM_LEDGER_URL", "DATABASE_URL")}
    return subprocess.run([sys.executable, "-m", "mycelium.cli.main", "demo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def effects(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return [line.split()[2] for line in done.stdout.splitlines() if "side effects:" in line]


def test_demo_redis_starts_its_own_server_and_shows_the_bug_then_the_fix(tmp_path, redis_server):
    done = demo(tmp_path, "--redis")
    assert effects(done) == ["2", "1"]
    assert "returned A's result" in done.stdout and "Redis" in done.stdout
    assert not any(tmp_path.iterdir())  # nothing left behind


def test_demo_redis_on_a_given_server_twice(tmp_path, redis_url):
    for _ in range(2):  # each demo is a call of its own: the second shows the same, not a stored result
        done = demo(tmp_path, "--redis", redis_url)
        assert effects(done) == ["2", "1"]
        assert f"redis-cli -u {redis_url}" in done.stdout


def test_demo_redis_on_a_server_that_is_not_there_says_so(tmp_path):
    done = demo(tmp_path, "--redis", "redis://127.0.0.1:1/0")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "Redis" in done.stderr and "127.0.0.1:1" in done.stderr
