"""Where upstream's contract holds for this package too: the v1.2 behaviour of a tool with no binding,
the marks outside a ledgered body, a redispatch's result exactly as the first caller got it, and
``ActionLedger()`` on the default store."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import textwrap
import threading
import time
import types
import warnings
from pathlib import Path

import pytest

from mycelium import (
    ConfigError,
    MyceliumConfig,
    get_ledger,
    load_config,
    load_config_from_string,
    task_ledger_sync,
)
from mycelium.ledger.decorators import ledger, ledger_sync
from mycelium.ledger.errors import LedgerPendingError
from mycelium.ledger.ledger import (
    ActionLedger,
    arecord_external_operation,
    mark_crossed,
    mark_maybe_crossed,
    record_external_operation,
    renew_lease,
    side_effect,
)
from mycelium.ledger.local import FileLedgerStorage, InMemoryLedgerStorage
from mycelium.ledger.stores import storage_for
from tests.ledger.test_storages import BACKENDS, store_url

ROOT = Path(__file__).resolve().parents[2]


def test_the_marks_outside_a_ledgered_body_warn_and_do_nothing():
    for mark in (mark_maybe_crossed, mark_crossed, lambda: record_external_operation("op-1"), renew_lease):
        with pytest.warns(UserWarning, match="outside a ledgered tool body does nothing"):
            assert mark() is None
    with pytest.warns(UserWarning, match="side_effect"), side_effect():
        pass

    async def body() -> None:
        async with side_effect():
            pass
        await arecord_external_operation("op-2")

    with pytest.warns(UserWarning) as seen:
        asyncio.run(body())
    assert len(seen) == 2


@pytest.fixture(params=BACKENDS)
def any_ledger(request: pytest.FixtureRequest, tmp_path: Path):
    s = storage_for(store_url(request, request.param, tmp_path))
    yield ActionLedger(s, poll_interval=0.01, poll_timeout=5)
    s.close()


def test_an_unclassified_tool_keeps_v1_2_pending_at_once_and_a_failure_runs_again(any_ledger):
    entered, release, runs = threading.Event(), threading.Event(), []

    @ledger_sync(action_ledger=any_ledger)
    def send(to: str) -> dict:
        runs.append(to)
        if len(runs) == 1:
            entered.set()
            release.wait(10)
        if len(runs) == 2:
            raise RuntimeError("smtp down")
        return {"to": to, "n": len(runs)}

    first = threading.Thread(target=send, args=("ann",), kwargs={"request_id": "m1"})
    first.start()
    assert entered.wait(10)
    started = time.monotonic()
    with pytest.raises(LedgerPendingError):
        send("ann", request_id="m1")  # in flight elsewhere: at once, no waiting
    assert time.monotonic() - started < 2
    release.set()
    first.join(10)
    assert send("ann", request_id="m1") == {"to": "ann", "n": 1}  # completed: its result
    with pytest.raises(RuntimeError):
        send("bob", request_id="m2")
    assert send("bob", request_id="m2") == {"to": "bob", "n": 3}  # failed before any effect: runs again
    assert runs == ["ann", "bob", "bob"]


def test_a_redispatch_returns_the_result_exactly_as_the_first_caller_got_it(any_ledger):
    calls = []

    @ledger(action_ledger=any_ledger)
    async def quote(item: str) -> dict:
        calls.append(item)
        return {"zeta": 1, "alpha": {"y": [3, 1], "b": None}, "mid": "é"}

    async def twice() -> tuple[dict, dict]:
        a = await quote("x", request_id="q1")
        b = await quote("x", request_id="q1")
        await any_ledger.storage.aclose()
        return a, b

    first, again = asyncio.run(twice())
    assert again == first and calls == ["x"]
    assert list(again) == ["zeta", "alpha", "mid"] and list(again["alpha"]) == ["y", "b"]


def test_action_ledger_without_a_store_uses_memory_and_says_once_it_protects_this_process_only():
    code = """
import warnings
warnings.simplefilter("always")
from mycelium.ledger.ledger import ActionLedger
from mycelium.ledger.local import InMemoryLedgerStorage
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    a, b = ActionLedger(), ActionLedger()
assert isinstance(a.storage, InMemoryLedgerStorage) and a.storage is b.storage
print(len([w for w in seen if "protects this process only" in str(w.message)]))
"""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MYCELIUM_LEDGER_URL", "MYCELIUM_DATABASE_URL", "DATABASE_URL")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_the_ledger_url_names_every_store(tmp_path):
    from mycelium.ledger.hub_http import HubLedgerStorage
    from mycelium.ledger.postgres import PostgresLedgerStorage
    from mycelium.ledger.redis_store import RedisLedgerStorage

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kinds = {
            "memory:": InMemoryLedgerStorage,
            (tmp_path / "l").as_uri(): FileLedgerStorage,
            "redis://127.0.0.1:1/0": RedisLedgerStorage,
            "postgresql://u@127.0.0.1:1/d": PostgresLedgerStorage,
            "http://127.0.0.1:1": HubLedgerStorage,
        }
        for url, kind in kinds.items():
            s = storage_for(url)
            assert isinstance(s, kind), url
            s.close()
    assert (tmp_path / "l" / "rows").is_dir()
    for bad in ("sqlite:///x.db", "file://elsewhere/x", "ledger"):
        with pytest.raises(ValueError, match="ledger URL"):
            storage_for(bad)


# mycelium-runtime 1.14's public names (its package's __all__) that this package keeps, each meaning
# what it meant there. Left out, as upstream internals the seed never imports: the task-ledger classes
# (TaskLedger*, Task*LedgerStorage, get_task_ledger: tasks here are @task_ledger on the same stores),
# the local audit-receipt classes (AuditReceipt*, *AuditReceiptStorage, verify_receipt: the
# audit_receipt section writes receipts through ReceiptLog), LedgerEntry, TransitionConfig,
# TransitionScope and the resolution helpers (derive_transition_key*, resolve_lease_validity,
# repair_transition_fields, transition_needs_repair).
UPSTREAM_NAMES = [
    "ActionLedger", "ConfigError", "FileLedgerStorage", "FileStateFlushStorage", "HistoryGuard",
    "HistoryTruncatedError", "InMemoryLedgerStorage", "InMemoryStateFlushStorage", "LeaseValidity",
    "LedgerError", "LedgerHardBlockError", "LedgerPendingError", "LedgerPollTimeoutError",
    "LedgerSoftBlockError", "LedgerStorage", "MessageValidationError", "MessageValidator",
    "MyceliumConfig", "PostgresLedgerStorage", "ReconcileResult", "ReconcileStatus", "Reconciler",
    "RedisLedgerStorage", "RetryPermission", "Session", "SideEffectBoundary", "SideEffectClass",
    "Spendability", "StateFlush", "StateFlushError", "StateSnapshot", "TaskLedgerPendingError",
    "TerminalOutcome", "ToolBoundaryError", "ToolBoundaryExhaustedError", "ToolRegistry", "ToolRunner",
    "ToolTransitionBinding", "TransitionGate", "bounded", "bounded_sync", "execution_scope", "get_ledger",
    "ledger", "ledger_sync", "load_config", "load_config_from_string", "mark_crossed",
    "mark_maybe_crossed", "protect", "protect_sync", "record_external_operation", "renew_lease",
    "side_effect", "task_ledger", "task_ledger_sync", "tool_error_message", "__version__",
]


def test_upstream_s_public_names_import_from_mycelium():
    import mycelium

    missing = [name for name in UPSTREAM_NAMES if not hasattr(mycelium, name)]
    assert missing == []
    assert set(UPSTREAM_NAMES) <= set(mycelium.__all__)
    assert mycelium.MyceliumConfig is mycelium.LedgerConfig
    assert [v.value for v in mycelium.LeaseValidity] == ["HELD", "EXPIRED", "UNBOUNDED"]


CONFIG_TEXT = """\
transition: {agent_id: payments, policy_version: "2026.07.1"}
action_ledger: {storage: memory, tools: [charge]}
tools:
  charge: {callable: "json:dumps", side_effect_class: keyed_mutate}
registry: {auto: true}
"""


def test_load_config_from_string_reads_what_load_config_reads_from_a_file(tmp_path):
    path = tmp_path / "mycelium.yaml"
    path.write_text(CONFIG_TEXT)
    from_text, from_file = load_config_from_string(CONFIG_TEXT), load_config(path)
    assert isinstance(from_text, MyceliumConfig)
    assert from_text.data == from_file.data
    assert from_text.binding("charge") == from_file.binding("charge")
    assert load_config_from_string("").data == {}
    with pytest.raises(ConfigError, match=r"unknown section\(s\) tranistion"):
        load_config_from_string("tranistion: {agent_id: a}\n")
    with pytest.raises(ConfigError, match=r"tools\.charge: unknown key\(s\) sideeffect"):
        load_config_from_string("tools:\n  charge: {sideeffect: read}\n")
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config_from_string("tools: [unclosed\n")


def test_get_ledger_names_the_ledger_a_decorated_function_records_on(tmp_path):
    mine = ActionLedger(InMemoryLedgerStorage(), agent_id="a", policy_version="v")

    @ledger_sync(action_ledger=mine)
    def charge(customer: str) -> str:
        return customer

    store = FileLedgerStorage(tmp_path / "rows")

    @ledger(storage=store, lease_ttl=30)
    async def refund(customer: str) -> str:
        return customer

    @task_ledger_sync(action_ledger=mine)
    def invoice(number: str) -> str:
        return number

    @functools.wraps(charge)
    def traced(*args: object, **kwargs: object) -> object:
        return charge(*args, **kwargs)

    assert get_ledger(charge) is mine and get_ledger(invoice) is mine and get_ledger(traced) is mine
    assert get_ledger(refund) is get_ledger(refund) and get_ledger(refund).storage is store
    assert get_ledger(refund).lease_ttl == 30
    def recorded() -> int:
        return len(list((tmp_path / "rows" / "rows").glob("*.json")))

    before = recorded()
    assert asyncio.run(refund("c1")) == "c1"  # the ledger it named is the one the call used
    assert recorded() == before + 1
    assert get_ledger(lambda: None) is None and get_ledger(print) is None
    store.close()


def test_instrument_without_tasks_and_wrap_module_wrap_the_tools_only():
    config = load_config_from_string(CONFIG_TEXT + textwrap.dedent("""\
        task_ledger: {storage: memory, tasks: [invoice]}
        tasks:
          invoice: {callable: "json:loads", ledger: true}
        """))

    def module() -> types.ModuleType:
        m = types.ModuleType("agent_tools")
        m.charge = lambda customer: customer  # type: ignore[attr-defined]
        m.charge.__name__ = "charge"
        m.invoice = lambda number: number  # type: ignore[attr-defined]
        m.invoice.__name__ = "invoice"
        return m

    for wrapped in (config.instrument(module(), tasks=False), config.wrap_module(module())):
        assert get_ledger(wrapped.charge) is not None and get_ledger(wrapped.invoice) is None
    everything = config.instrument(module())
    assert get_ledger(everything.charge) is not None and get_ledger(everything.invoice) is not None
    assert everything.invoice("n-1") == "n-1" and everything.invoice("n-1") == "n-1"


def test_the_registry_and_runner_settings_read_as_upstream_s():
    empty = load_config_from_string("")
    assert (empty.registry_allowed, empty.runner_settings) == ([], {})
    assert "charge" not in empty.registry
    config = load_config_from_string(CONFIG_TEXT + "runner: {max_llm_retries: 1}\n")
    assert config.registry_allowed == ["charge"] and "charge" in config.registry
    assert config.runner_settings == {"max_llm_retries": 1}
    assert config.build_runner()._max_llm_retries == 1
