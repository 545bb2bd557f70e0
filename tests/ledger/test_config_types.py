"""A tool setting of the wrong type in mycelium.yaml is a ConfigError naming the key, at load time (YAML
turns ``123``, ``yes`` and ``[a]`` into other types than the string, flag or mapping a key takes)."""

from __future__ import annotations

import pytest

from mycelium import load_config, load_config_from_string
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
    assert load_config(path).langgraph_enabled is enabled


def test_integrations_langgraph_of_another_type_is_refused(tmp_path):
    path = tmp_path / "mycelium.yaml"
    path.write_text("integrations:\n  langgraph: 'yes'\n")
    with pytest.raises(ConfigError, match=r"integrations.langgraph must be a mapping .* or true/false"):
        load_config(path)


@pytest.mark.parametrize(("transition", "refusal"), [
    ("{agent_id: demo, policy_versoin: '1'}", r"transition: unknown key\(s\) policy_versoin \(known: agent_id"),
    ("{agent_id: demo, lease_ttl: 0}", r"transition.lease_ttl must be a positive number of seconds, got 0"),
    ("{agent_id: demo, lease_ttl: soon}", r"transition.lease_ttl must be a positive number of seconds, got 'soon'"),
    ("{agent_id: demo, lease_renew_interval: -1}", r"transition.lease_renew_interval must be a number of seconds, 0"),
    ("{agent_id: demo, poll_timeout: true}", r"transition.poll_timeout must be a positive number"),
    ("{agent_id: [demo]}", r"transition.agent_id must be a string"),
    ("{agent_id: demo, scope_from: tenant}", r"transition.scope_from must be a mapping"),
    ("{agent_id: demo, reclaim_requires_death_signal: 'yes'}", r"reclaim_requires_death_signal must be true or false"),
    ("[demo]", r"transition must be a mapping of settings"),
])
def test_a_transition_setting_unknown_or_out_of_range_is_refused_naming_it(transition, refusal):
    with pytest.raises(ConfigError, match=refusal):
        load_config_from_string(f"transition: {transition}\n")


def test_the_transition_settings_in_range_load_and_reach_the_ledger():
    config = load_config_from_string(
        "transition: {agent_id: demo, policy_version: 2026.07, lease_ttl: 60, lease_renew_interval: 0,\n"
        "             poll_interval: 0.01, poll_timeout: 5, presumed_dead_after: 120,\n"
        "             scope_from: {tenant: tenant_id}}\n"
        "action_ledger: {storage: memory}\n"
    )
    led = config.action_ledger()
    assert (led.agent_id, led.policy_version, led.lease_ttl) == ("demo", "2026.07", 60)


@pytest.mark.parametrize("target", ["send_payment", "app.tools", "app-tools:send", "app.tools:send.call", ":send"])
def test_a_malformed_callable_is_refused_at_load_naming_it(target):
    with pytest.raises(ConfigError, match=r"tools.send_payment.callable must be 'package.module:function'"):
        load_config_from_string(f"tools:\n  send_payment:\n    callable: '{target}'\n")


def test_one_function_configured_twice_is_refused_naming_both():
    with pytest.raises(ConfigError, match=r"'app.tools:send' is configured more than once "
                                          r"\(tools.send_payment.callable and tasks.send_task.callable\)"):
        load_config_from_string("tools:\n  send_payment: {callable: 'app.tools:send'}\n"
                                "tasks:\n  send_task: {callable: 'app.tools:send', ledger: true}\n")


@pytest.mark.parametrize(("text", "refusal"), [
    ("tasks: [send_task]\n", "tasks must be a mapping of task name"),
    ("tasks:\n  send_task: yes\n", "tasks.send_task must be a mapping of settings"),
    ("action_ledger: {storage: file, paht: ./ledger}\n", r"action_ledger: unknown key\(s\) paht \(known: "),
    ("task_ledger: {storage: memory, task: [invoice]}\n", r"task_ledger: unknown key\(s\) task \(known: "),
    ("audit_receipt: {signing_key_env: KEY, stroage: file}\n", r"audit_receipt: unknown key\(s\) stroage"),
    ("audit_receipt: {signing_key_env: KEY, auto: false}\n", r"audit_receipt.auto: only true"),
    ("action_ledger: [charge]\n", r"action_ledger must be a mapping of settings"),
    ("action_ledger: {storage: memory, install_schema: 'no'}\n", r"action_ledger.install_schema must be true"),
])
def test_a_section_of_the_wrong_shape_or_with_an_unknown_key_is_refused_naming_it(text, refusal):
    with pytest.raises(ConfigError, match=refusal):
        load_config_from_string(text)


def test_upstream_s_own_store_settings_load_with_a_warning_that_they_change_nothing():
    with pytest.warns(UserWarning, match=r"action_ledger.prefix is a setting of upstream's own stores"):
        config = load_config_from_string("action_ledger: {storage: memory, prefix: 'shop:'}\n")
    assert config.data["action_ledger"]["prefix"] == "shop:"
