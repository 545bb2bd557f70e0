"""`mycelium config set` reads its value as `-m`/`-s` do: a JSON literal as typed, anything else
the text typed (YAML turned `no` into false and `1.10` into 1.1)."""

from __future__ import annotations

import json

from tests.foundation.test_cli_defects import cli, hub_url  # noqa: F401 - fixtures


def test_config_set_takes_json_literals_as_typed_and_other_text_as_text(hub_url):  # noqa: F811
    out = cli(hub_url, "config", "set", "board.dependency_gate", "true")
    assert out.stdout.strip() == "board.dependency_gate = true  (hub)"
    out = cli(hub_url, "config", "set", "presence.ttl_seconds", "45", "--json")
    assert json.loads(out.stdout)["value"] == 45
    for typed in ("no", "off", "yes", "on"):
        out = cli(hub_url, "config", "set", "board.dependency_gate", typed, ok=False)
        assert out.returncode == 1 and f'not "{typed}"' in out.stderr, out.stderr
    for typed in ("007", "1e1x", "2024-06-01"):
        out = cli(hub_url, "config", "set", "presence.ttl_seconds", typed, ok=False)
        assert out.returncode == 1 and f'not "{typed}"' in out.stderr, out.stderr
    shown = json.loads(cli(hub_url, "config", "show", "--json").stdout)
    values = {s["name"]: s["value"] for s in shown["settings"]}
    assert (values["board.dependency_gate"], values["presence.ttl_seconds"]) == (True, 45)
    cli(hub_url, "config", "unset", "board.dependency_gate")
    cli(hub_url, "config", "unset", "presence.ttl_seconds")
