"""The README's CLI, psql and YAML sections say what the code does: every command in "Using it"
parses, "In psql" does not create a room "Using it" made, the YAML shown loads, and the OpenAPI
document is where the README says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import httpx
import yaml

from mycelium.cli.main import parse_args
from mycelium.ledger.config import KNOWN, TOOL_KEYS
from tests.foundation.test_cli_defects import hub_url  # noqa: F401 - fixture

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def block_after(heading: str, fence: str = "```") -> str:
    start = README.index(heading)
    opening = README.index(fence, start)
    body = README.index("\n", opening) + 1
    return README[body:README.index("\n```", body)]


def using_it() -> list[list[str]]:
    lines = [line.split("  #")[0].strip() for line in block_after("## Using it").splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("mycelium ")]


def test_every_command_in_using_it_parses():
    commands = using_it()
    assert len(commands) >= 10 and ["--version"] in commands
    for argv in commands:
        if argv == ["--version"]:
            continue
        parse_args(argv)  # an unknown flag or command exits here


def test_in_psql_does_not_create_a_room_using_it_already_made():
    made = {argv[2] for argv in using_it() if argv[:2] == ["room", "create"]}
    created = set(re.findall(r"create_room\('([^']+)'", block_after("### In psql")))
    assert created and not created & made


def test_the_yaml_shown_loads_as_mycelium_run_reads_it():
    shown = yaml.safe_load(block_after("python -m app` ledger", "```yaml"))
    assert set(shown) <= KNOWN and shown["tools"]
    for spec in shown["tools"].values():
        assert set(spec) <= TOOL_KEYS and ":" in spec["callable"] and spec["side_effect_class"]


def test_the_openapi_document_is_where_the_readme_says(hub_url):  # noqa: F811
    assert "`/schema/openapi.json` serves the OpenAPI document" in README
    doc = httpx.get(hub_url + "/schema/openapi.json")
    assert doc.status_code == 200 and "openapi" in doc.json()
