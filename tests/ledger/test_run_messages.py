"""``mycelium run`` says what is wrong in one message, never with a traceback, unless the app has a
bug (then the app's traceback, without this command's frames). Real processes, the real command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

POSTGRES_YAML = """\
transition: {agent_id: shop-agent, policy_version: "2026.07.1", lease_ttl: 60}
action_ledger:
  storage: postgres
  dsn_env: MYCELIUM_LEDGER_URL
  tools: [charge]
tools:
  charge: {callable: payments_app:charge, side_effect_class: non_idempotent_mutate}
"""
DEFAULT_YAML = """\
transition: {agent_id: shop-agent, policy_version: "1"}
tools:
  charge: {callable: payments_app:charge, side_effect_class: non_idempotent_mutate}
"""
TOOLS = "def charge(customer_id: str, amount_cents: int) -> dict:\n    return {'charged': amount_cents}\n"
APP = "from payments_app import charge\nprint(charge('c1', 100))\n"


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "payments_app.py").write_text(TOOLS)
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "mycelium.yaml").write_text(POSTGRES_YAML)
    return tmp_path


def mycelium_run(cwd: Path, *command: str, ledger_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MYCELIUM_LEDGER_URL", "MYCELIUM_DATABASE_URL", "DATABASE_URL")}
    env["PYTHONPATH"] = str(ROOT / "service")
    if ledger_url is not None:
        env["MYCELIUM_LEDGER_URL"] = ledger_url
    return subprocess.run([sys.executable, "-m", "mycelium.cli.main", "run", "--config", "mycelium.yaml", "--",
                           "python", *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def one_message(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "File \"" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_without_the_ledger_url_the_variable_is_named_and_nothing_runs(app):
    done = mycelium_run(app, "app.py")
    one_message(done, "MYCELIUM_LEDGER_URL", "is not set")
    assert done.stdout == ""


def test_a_url_that_names_no_store_is_one_message(app):
    done = mycelium_run(app, "app.py", ledger_url="bogus://somewhere")
    one_message(done, "not a ledger URL", "bogus://somewhere")


@pytest.mark.parametrize("url", ["postgresql://nobody@127.0.0.1:1/x", "http://127.0.0.1:1", "redis://127.0.0.1:1/0"])
def test_an_unreachable_store_is_one_message_naming_the_apps_line(app, url):
    if url.startswith("redis"):
        (app / "mycelium.yaml").write_text(POSTGRES_YAML.replace("storage: postgres", "storage: redis")
                                           .replace("dsn_env", "url_env"))
    elif url.startswith("http"):
        (app / "mycelium.yaml").write_text(POSTGRES_YAML.replace("storage: postgres", "storage: hub")
                                           .replace("dsn_env", "url_env"))
    done = mycelium_run(app, "app.py", ledger_url=url)
    one_message(done, "LedgerStorageUnavailableError", "(at app.py:2)")


def test_a_missing_app_is_one_message(app):
    one_message(mycelium_run(app, "-m", "no_such_agent"), "no module named 'no_such_agent'")
    one_message(mycelium_run(app, "no_such_script.py"), "can't open file 'no_such_script.py'")


def test_the_in_memory_default_warns_in_one_line_and_runs(app):
    (app / "mycelium.yaml").write_text(DEFAULT_YAML)
    done = mycelium_run(app, "app.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'charged': 100}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mycelium: warning: no ledger store configured"), lines


def test_an_apps_own_bug_keeps_its_traceback_without_this_commands_frames(app):
    (app / "mycelium.yaml").write_text(DEFAULT_YAML)
    (app / "app.py").write_text(APP + "def broken():\n    return 1 / 0\nbroken()\n")
    done = mycelium_run(app, "app.py")
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "ZeroDivisionError: division by zero" in done.stderr
    frames = [line for line in done.stderr.splitlines() if line.strip().startswith("File ")]
    assert frames and all("app.py" in f for f in frames), done.stderr
