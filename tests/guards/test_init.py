"""``mycelium init`` (default, --minimal, --full): each scaffold loads with load_config and runs under
``mycelium run`` as written, in real processes; a second run returns the ledgered results."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mycelium import load_config
from tests.support.cli import mycelium

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def cli(cwd: Path, *argv: str, dsn: str = "") -> subprocess.CompletedProcess[str]:
    module, *args = argv
    return mycelium(*args, module=module, cwd=cwd, timeout=120,
                    env={"PYTHONPATH": f"{cwd}{os.pathsep}{ROOT}", "MYCELIUM_LEDGER_URL": dsn})


def run_app(cwd: Path, dsn: str) -> dict:
    done = cli(cwd, "mycelium.cli.main", "run", "--config", "mycelium.yaml", "--", "python", "-m", "my_agent",
               dsn=dsn)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("flag", ["", "--minimal", "--full"])
def test_each_scaffold_loads_and_runs_under_mycelium_run_as_written(tmp_path, db_dsn, flag):
    made = cli(tmp_path, "mycelium.cli.main", "init", *([flag] if flag else []))
    assert made.returncode == 0, made.stderr
    assert {p.name for p in (tmp_path / "my_agent").iterdir()} >= {"__init__.py", "tools.py", "__main__.py"}
    config = load_config(tmp_path / "mycelium.yaml")
    assert config.data["integrations"]["langgraph"]["enabled"] is True  # the default, as upstream
    assert "subagent_task" in config.ledgered_tools()

    first = run_app(tmp_path, db_dsn)
    assert first["again"] == first["first"]
    assert first["ran"].count("subagent_task") == 1  # the redispatch returned the stored result
    if flag:
        assert first["customer"][0] == first["customer"][1]
        assert first["ran"].count("fetch_customer") == 1  # cached (process_invoice's fetch is a hit too)
        assert first["payment"] == {"paid": 10, "to": "acct_1"}
    if flag == "--full":
        assert first["invoice"]["payment"] == {"paid": 25, "to": "c1"}
        assert first["messages"] == [{"role": "user", "content": "pay invoice 1"}]
        assert json.loads((tmp_path / "mycelium-state.json").read_text())["thread-1"]["status"] == "completed"

    second = run_app(tmp_path, db_dsn)  # a new process: the ledger answers the same calls
    assert second["first"] == first["first"]
    assert "subagent_task" not in second["ran"] and "send_payment" not in second["ran"]
    if flag == "--full":
        assert second["invoice"] == first["invoice"]


def test_init_keeps_existing_files_unless_forced(tmp_path):
    assert cli(tmp_path, "mycelium.cli.main", "init").returncode == 0
    (tmp_path / "mycelium.yaml").write_text("# mine\n")
    kept = cli(tmp_path, "mycelium.cli.main", "init", "--full")
    assert kept.returncode == 1 and "already exist" in kept.stderr
    assert (tmp_path / "mycelium.yaml").read_text() == "# mine\n"
    assert cli(tmp_path, "mycelium.cli.main", "init", "--full", "--force").returncode == 0
    assert "history_guard" in (tmp_path / "mycelium.yaml").read_text()
    bad = cli(tmp_path, "mycelium.cli.main", "init", "--package", "my-agent")
    assert bad.returncode == 2 and "module name" in bad.stderr
    both = cli(tmp_path, "mycelium.cli.main", "init", "--full", "--minimal")
    assert both.returncode == 2


def test_init_registers_as_a_command_group():
    import argparse

    from mycelium.cli import init

    parser = argparse.ArgumentParser(prog="mycelium")
    init.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["init", "--minimal", "--package", "shop"])
    assert (args.func, args.kind, args.package) == (init.run, "minimal", "shop")
    assert parser.parse_args(["init"]).kind == "on-ramp"
