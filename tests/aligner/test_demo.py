"""`mycelium demo negotiate`: two scripted members as `mycelium await --loop --exec` processes, the
aligner in-process in `mycelium up`, on a temporary embedded database."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_the_negotiation_demo_converges_with_metrics_and_a_record(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MYCELIUM_API_URL")}
    done = subprocess.run(
        [sys.executable, "-m", "mycelium.cli.main", "demo", "negotiate"],
        capture_output=True,
        text=True,
        env={**env, "TMPDIR": str(tmp_path)},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "== negotiation: converged" in out
    assert "issues: {'price': ['10', '15', '20', '25', '30'], 'vendor': ['acme', 'globex']}" in out
    assert "5. @bob    accept" in out and "I read bob's reply as: accept price=20, vendor=acme." in out
    assert "agreement: {'price': '20', 'vendor': 'acme'}" in out
    assert "'min_satisfaction': 0.25" in out and "'mpc': 0.8" in out
    assert "'episode_count': 1" in out and "'revision_cause': 'converged_episode'" in out
    assert "- outcome: **converged**" in out and "## Opening Positions" in out
    assert "- assignments: `price=20`, `vendor=acme`" in out
