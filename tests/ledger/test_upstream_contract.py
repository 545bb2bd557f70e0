"""Where upstream's contract holds for this package too: the v1.2 behaviour of a tool with no binding,
the marks outside a ledgered body, a redispatch's result exactly as the first caller got it, and
``ActionLedger()`` on the default store."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

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
    from mycelium.ledger.local import FileLedgerStorage, InMemoryLedgerStorage
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
