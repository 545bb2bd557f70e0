"""The guard sections of mycelium.yaml: the seed's reference configuration instruments its tools with
every guard; config.run / prepare_messages; an unknown key is an error naming it."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

from mycelium import ToolBoundaryError, load_config
from mycelium.guards.history import HistoryTruncatedError
from mycelium.guards.messages import MessageValidationError
from mycelium.ledger.config import ConfigError

TOOLS = '''
calls = []

def fetch_customer(customer_id: str) -> dict:
    calls.append(("fetch", customer_id))
    return {"customer_id": customer_id, "name": "Alice"}

def send_payment(amount: float, recipient: str) -> dict:
    calls.append(("pay", amount, recipient))
    return {"paid": amount, "to": recipient}

def search_docs(query: str) -> list:
    calls.append(("search", query))
    return [query]
'''

# The seed's reference configuration, with the ledger on this test's database (the seed's
# ``storage: file`` belongs to the storage work) and the flushed state in a file.
REFERENCE = '''
transition:
  agent_id: payment-agent
  policy_version: "2026.07.1"
  lease_ttl: 3600
action_ledger:
  storage: postgres
  dsn_env: MYCELIUM_LEDGER_URL
  tools: [send_payment, search_docs]
state_flush:
  storage: file
  path: {state}
audit_receipt:
  signing_key_env: MYCELIUM_SIGNING_KEY
tools:
  fetch_customer:
    callable: {module}:fetch_customer
    side_effect_class: read
    protect: {{entity_param: customer_id, ttl: 60}}
    bounded:
      schema:
        customer_id: {{type: string, required: true, pattern: "^c\\\\d+$"}}
  send_payment:
    callable: {module}:send_payment
    side_effect_class: keyed_mutate
    bounded:
      schema:
        amount: {{type: number, required: true}}
        recipient: {{type: string, required: true}}
  search_docs:
    callable: {module}:search_docs
    side_effect_class: read
registry:
  auto: true
history_guard:
  max_tokens: 100000
message_validator:
  enabled: true
'''


@pytest.fixture
def app(tmp_path, monkeypatch, request):
    name = f"agent_tools_{request.node.name[-40:].replace('[', '_').replace(']', '_')}"
    (tmp_path / f"{name}.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield module, tmp_path
    sys.modules.pop(name, None)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mycelium.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_reference_configuration_instruments_every_guard(app, db_dsn, monkeypatch):
    module, tmp = app
    monkeypatch.setenv("MYCELIUM_LEDGER_URL", db_dsn)
    state = tmp / "state.json"
    config = load_config(write(tmp, REFERENCE.format(module=module.__name__, state=state)))
    config.instrument(module)

    assert config.registry.allowed_tools == {"fetch_customer", "send_payment", "search_docs"}
    with config.run("thread-1") as run:
        # fetch_customer: bounded + protect, not ledgered (not under action_ledger.tools)
        assert module.fetch_customer(customer_id="c1") == module.fetch_customer(customer_id="c1")
        with pytest.raises(ToolBoundaryError) as exc:
            module.fetch_customer(customer_id="customer-1")
        assert exc.value.violation == "pattern_mismatch"
        # send_payment: ledgered and bounded
        first = module.send_payment(amount=10, recipient="acct", tool_call_id="call_1")
        assert module.send_payment(amount=10.0, recipient="acct", tool_call_id="call_1") == first
        with pytest.raises(ToolBoundaryError):
            module.send_payment(amount="ten", recipient="acct", tool_call_id="call_2")
        messages = config.prepare_messages([
            {"role": "user", "content": "pay"},
            {"role": "tool", "tool_call_id": "call_x", "content": "orphan"},
        ])
        assert messages == [{"role": "user", "content": "pay"}]  # repaired
        assert run.state["messages"] == messages
    assert module.calls == [("fetch", "c1"), ("pay", 10, "acct")]
    flushed = json.loads(state.read_text())["thread-1"]
    assert flushed["status"] == "completed" and flushed["state"]["messages"] == messages


async def test_an_error_inside_a_run_flushes_the_state_with_its_error(app):
    _module, tmp = app
    config = load_config(write(tmp, f"""
        state_flush: {{storage: file, path: {tmp / 'state.json'}}}
        message_validator: true
        history_guard: {{max_messages: 3}}
    """))
    with pytest.raises(HistoryTruncatedError):
        async with config.run("thread-9"):
            config.prepare_messages([{"role": "user", "content": "a"}])
            config.prepare_messages([{"role": "user", "content": str(i)} for i in range(4)])
    snapshot = config.build_state_flush().load("thread-9")
    assert snapshot.status == "error" and "HistoryTruncatedError" in snapshot.error
    assert snapshot.state["messages"] == [{"role": "user", "content": "a"}]


def test_each_run_has_its_own_history_guard_for_drop_checks(app):
    _module, tmp = app
    config = load_config(write(tmp, "history_guard: {max_tokens: 1000, tokenizer: estimate}\n"))
    long = [{"role": "user", "content": str(i)} for i in range(5)]
    with config.run("a"):
        config.prepare_messages(long)
        with pytest.raises(HistoryTruncatedError):
            config.history_guard().check_for_drops(long[3:])
    with config.run("b"):
        config.prepare_messages(long[3:])
        config.history_guard().check_for_drops(long[3:])  # run b never saw the long history


def test_validate_mode_raises_instead_of_repairing(app):
    _module, tmp = app
    config = load_config(write(tmp, "message_validator: {enabled: true, mode: validate}\n"))
    with pytest.raises(MessageValidationError):
        config.prepare_messages([{"role": "tool", "tool_call_id": "x", "content": ""}])
    off = load_config(write(tmp, "message_validator: false\n"))
    assert off.prepare_messages([{"role": "bot"}]) == [{"role": "bot"}]


async def test_the_runner_from_the_registry_and_runner_sections(app):
    module, tmp = app
    config = load_config(write(tmp, f"""
        registry: {{allowed: [search_docs]}}
        runner: {{max_tool_retries: 2}}
        tools:
          fetch_customer: {{callable: "{module.__name__}:fetch_customer", protect: {{ttl: 5}}}}
          search_docs: {{callable: "{module.__name__}:search_docs"}}
    """))
    runner = config.build_runner()
    assert await runner.call(module.search_docs, query="q") == ["q"]
    with pytest.raises(ToolBoundaryError) as exc:
        await runner.call(module.fetch_customer, customer_id="c1")
    assert exc.value.violation == "not_in_allowlist"
    auto = load_config(write(tmp, "registry: auto\ntools: {a: {callable: 'x:a'}, b: {callable: 'x:b'}}\n"))
    assert auto.registry.allowed_tools == {"a", "b"}


def test_a_tool_configured_only_for_the_guards_is_not_ledgered(app):
    module, tmp = app
    config = load_config(write(tmp, f"""
        tools:
          fetch_customer:
            callable: {module.__name__}:fetch_customer
            protect: {{entity_param: customer_id}}
            bounded: {{schema: {{customer_id: {{type: string, required: true}}}}}}
    """))
    assert config.ledgered_tools() == [] and config.guarded_tools() == ["fetch_customer"]
    config.instrument(module)  # no ledger store is needed
    with config.run("t"):
        module.fetch_customer(customer_id="c1")
        module.fetch_customer("c1")
        with pytest.raises(ToolBoundaryError):
            module.fetch_customer(customer_id=None)
    assert module.calls == [("fetch", "c1")]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("guards: {}\n", "guards"),
        ("history_guard: {max_token: 5}\n", "max_token"),
        ("history_guard: {max_tokens: 0}\n", "max_tokens"),
        ("message_validator: {mode: fix}\n", "message_validator.mode"),
        ("registry: {auto: 'yes'}\n", "registry.auto"),
        ("registry: {allow: [a]}\n", "allow"),
        ("state_flush: {storage: redis}\n", "state_flush.storage"),
        ("state_flush: {storage: file}\n", "state_flush.path"),
        ("state_flush: {flush_on: [crash]}\n", "crash"),
        ("runner: {max_tool_retries: 0}\n", "runner.max_tool_retries"),
        ("integrations: {langgraph: {enable: true}}\n", "enable"),
        ("integrations: {crewai: {}}\n", "crewai"),
        ("tools: {f: {protect: {ttl: 0}}}\n", "tools.f.protect"),
        ("tools: {f: {protect: {entity: id}}}\n", "entity"),
        ("tools: {f: {bounded: {schema: {a: {minimum: 1}}}}}\n", "minimum"),
        ("tools: {f: {bounded: {schema: {a: {type: str}}}}}\n", "tools.f.bounded"),
        ("tools: {f: {bounded: {schemas: {}}}}\n", "schemas"),
        ("tools: {f: {cache: true}}\n", "cache"),
        ("tasks: {t: {retries: 2}}\n", "retries"),
    ],
)
def test_an_unknown_key_or_a_wrong_value_is_an_error_naming_it(tmp_path, text, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(write(tmp_path, text))
