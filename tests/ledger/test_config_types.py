"""A tool setting of the wrong type in mycelium.yaml is a ConfigError naming the key, at load time (YAML
turns ``123``, ``yes`` and ``[a]`` into other types than the string, flag or mapping a key takes)."""

from __future__ import annotations

import pytest

from mycelium import load_config
from mycelium.ledger.config import ConfigError

BASE = """
transition: {agent_id: demo, policy_version: "1"}
tools:
  send_payment:
    side_effect_class: keyed_mutate
    provider_idempotency_key_param: idempotency_key
"""


@pytest.mark.parametrize(("line", "key"), [
    ("    provider_idempotency_key_param: 123", "provider_idempotency_key_param"),
    ("    side_effect_class: [read]", "side_effect_class"),
    ("    ledger: 'no'", "ledger"),
    ("    defer_read_only_unknown: 1", "defer_read_only_unknown"),
    ("    provider_idempotency_key_ttl: soon", "provider_idempotency_key_ttl"),
    ("    provider_idempotency_key_ttl: true", "provider_idempotency_key_ttl"),
    ("    scope_from: tenant", "scope_from"),
    ("    callable: 7", "callable"),
])
def test_a_setting_of_the_wrong_type_is_refused_naming_it(tmp_path, line, key):
    lines = BASE.splitlines()
    replaced = [x for x in lines if not x.strip().startswith(line.split(":")[0].strip() + ":")] + [line]
    path = tmp_path / "mycelium.yaml"
    path.write_text("\n".join(replaced) + "\n")
    with pytest.raises(ConfigError, match=f"tools.send_payment.{key} must be"):
        load_config(path)


def test_the_right_types_load(tmp_path):
    path = tmp_path / "mycelium.yaml"
    path.write_text(BASE + "    provider_idempotency_key_ttl: 86400\n    ledger: true\n"
                    "    scope_from: {tenant: tenant_id}\n")
    assert load_config(path).binding("send_payment").provider_idempotency_key_param == "idempotency_key"


@pytest.mark.parametrize(("value", "enabled"), [("true", True), ("false", False), ("{enabled: true}", True)])
def test_integrations_langgraph_takes_a_flag_as_upstream_does(tmp_path, value, enabled):
    from mycelium.guards.sections import langgraph_enabled

    path = tmp_path / "mycelium.yaml"
    path.write_text(f"integrations:\n  langgraph: {value}\n")
    assert langgraph_enabled(load_config(path).data) is enabled


def test_integrations_langgraph_of_another_type_is_refused(tmp_path):
    path = tmp_path / "mycelium.yaml"
    path.write_text("integrations:\n  langgraph: 'yes'\n")
    with pytest.raises(ConfigError, match=r"integrations.langgraph must be a mapping .* or true/false"):
        load_config(path)
