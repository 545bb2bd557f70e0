"""The seed README's examples, run as written (in fresh interpreters), and YAML instrumentation:
``load_config(path).instrument(module)`` and ``mycelium run --config … -- python -m app``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def python(code: str, dsn: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "MYCELIUM_LEDGER_URL": dsn,
        "PYTHONPATH": f"{cwd}{os.pathsep}{ROOT}",
        "EFFECTS": str(cwd / "effects"),
    }
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)] if code else [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


SEED_TOOL = """
    import json
    class gateway:
        calls = []
        @staticmethod
        def charge(amount, recipient, idempotency_key=None):
            gateway.calls.append((amount, recipient))
            return {"id": "pi_%d" % len(gateway.calls), "amount": amount}

    # -- as in the README ---------------------------------------------------------------------
    from mycelium import ledger_sync
    from mycelium.transition import SideEffectClass, ToolTransitionBinding

    binding = ToolTransitionBinding.for_tool(
        agent_id="payment-agent",
        policy_version="2026.07.1",
        side_effect_class=SideEffectClass.KEYED_MUTATE,
    )

    @ledger_sync(transition_binding=binding)
    def send_payment(amount: float, recipient: str) -> dict:
        return gateway.charge(amount, recipient)

    # Same logical call executes only once.
    send_payment(amount=100.0, recipient="acct_123", tool_call_id="call_abc")
    send_payment(amount=100.0, recipient="acct_123", tool_call_id="call_abc")
    # ------------------------------------------------------------------------------------------

    from mycelium import ledger_sync, side_effect, record_external_operation, Reconciler, ReconcileResult

    class StripeReconciler:  # read-only: never charges, never retries
        def reconcile(self, entry) -> ReconcileResult:
            return ReconcileResult.completed({"id": entry.external_operation_ref, "status": "succeeded"})

    key = "idem-1"
    fail_once = [True]

    @ledger_sync(transition_binding=binding, reconciler=StripeReconciler())
    def send_payment_2(amount, recipient):
        with side_effect():
            intent = gateway.charge(amount, recipient, idempotency_key=key)
            record_external_operation(intent["id"])
            if fail_once.pop() if fail_once else False:
                raise TimeoutError("response lost")
        return intent

    try:
        send_payment_2(5, "acct_9", tool_call_id="call_2")
    except TimeoutError:
        pass
    settled = send_payment_2(5, "acct_9", tool_call_id="call_2")

    from mycelium import task_ledger_sync

    ran = []

    @task_ledger_sync(id_from=["invoice_id"])
    def process_invoice(invoice_id: str, amount: float) -> dict:
        ran.append(invoice_id)
        return {"invoice_id": invoice_id, "status": "paid", "amount": amount}

    first = process_invoice(invoice_id="inv-42", amount=100.0)
    second = process_invoice(invoice_id="inv-42", amount=200.0)  # returns first result
    print(json.dumps({"charges": len(gateway.calls), "settled": settled, "tasks": ran, "second": second}))
"""


def test_the_seed_readme_examples_run_as_written(db_dsn, tmp_path):
    done = python(SEED_TOOL, db_dsn, tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["charges"] == 2  # send_payment once, send_payment_2 once (then reconciled, not re-run)
    assert out["settled"] == {"id": "pi_2", "status": "succeeded"}
    assert out["tasks"] == ["inv-42"] and out["second"]["amount"] == 100.0


APP_TOOLS = """
import json, os

def effect(name):
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(name + "\\n")

def send_payment(amount, recipient):
    effect("pay")
    return {"paid": amount, "to": recipient}

def search_docs(query):
    effect("search")
    return [query]

def process_invoice(invoice_id, amount):
    return {"invoice": invoice_id, "payment": send_payment(amount, "acct", tool_call_id="pay-" + invoice_id)}
"""

APP_MAIN = """
import json
from shop.tools import process_invoice, send_payment   # imported before the app runs: already wrapped

print(json.dumps([process_invoice(invoice_id="inv-1", amount=10), process_invoice(invoice_id="inv-1", amount=99),
                  send_payment(5, "acct", tool_call_id="c1"), send_payment(5, "acct", tool_call_id="c1")]))
"""

CONFIG = """
transition:
  agent_id: shop-agent
  policy_version: "2026.07.1"
  lease_ttl: 60
action_ledger:
  storage: postgres
  dsn_env: MYCELIUM_LEDGER_URL
  tools: [send_payment, search_docs]
task_ledger:
  storage: postgres
  dsn_env: MYCELIUM_LEDGER_URL
  tasks: [process_invoice]
audit_receipt:
  signing_key_env: MYCELIUM_SIGNING_KEY
tools:
  send_payment:
    callable: shop.tools:send_payment
    side_effect_class: keyed_mutate
    retry_permission: manual_reconciliation_required
  search_docs:
    callable: shop.tools:search_docs
    side_effect_class: read
tasks:
  process_invoice:
    callable: shop.tools:process_invoice
    ledger: true
    id_from: [invoice_id]
history_guard:
  max_tokens: 100000
"""


@pytest.fixture
def shop(tmp_path):
    pkg = tmp_path / "shop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tools.py").write_text(APP_TOOLS)
    (pkg / "main.py").write_text(APP_MAIN)
    (tmp_path / "mycelium.yaml").write_text(CONFIG)
    return tmp_path


def test_mycelium_run_ledgers_the_configured_callables_before_the_app_starts(db_dsn, shop):
    env_effects = shop / "effects"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mycelium.cli.main",
            "run",
            "--config",
            "mycelium.yaml",
            "--",
            "python",
            "-m",
            "shop.main",
        ],
        cwd=shop,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "MYCELIUM_LEDGER_URL": db_dsn,
            "EFFECTS": str(env_effects),
            "PYTHONPATH": f"{shop}{os.pathsep}{ROOT}",
        },
    )
    assert done.returncode == 0, done.stderr
    first, second, paid, paid_again = json.loads(done.stdout.strip().splitlines()[-1])
    assert second == first and paid_again == paid == {"paid": 5, "to": "acct"}
    assert env_effects.read_text().splitlines() == ["pay", "pay"]  # inv-1's payment once, c1 once
    assert "history_guard" not in done.stderr  # a guard section is honoured now, not reported as ignored


def test_load_config_instrument_wraps_a_module_in_place(db_dsn, shop):
    code = """
        import json
        from mycelium import get_ledger, load_config
        import shop.tools as my_tools

        config = load_config("mycelium.yaml")
        tools = config.instrument(my_tools)
        r1 = tools.search_docs("q", tool_call_id="s1")
        r2 = tools.search_docs("q", tool_call_id="s1")
        print(json.dumps([r1, r2, get_ledger(tools.send_payment) is not None]))
    """
    done = python(code, db_dsn, shop)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [["q"], ["q"], True]


def test_a_config_without_a_side_effect_class_or_with_a_bad_callable_stops_startup(db_dsn, shop):
    (shop / "bad.yaml").write_text(CONFIG.replace("    side_effect_class: read\n", ""))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mycelium.cli.main",
            "run",
            "--config",
            "bad.yaml",
            "--",
            "python",
            "-m",
            "shop.main",
        ],
        cwd=shop,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MYCELIUM_LEDGER_URL": db_dsn, "PYTHONPATH": f"{shop}{os.pathsep}{ROOT}"},
    )
    assert done.returncode == 1 and "tools.search_docs.side_effect_class is required" in done.stderr
    (shop / "bad.yaml").write_text(CONFIG.replace("shop.tools:search_docs", "shop.tools:nope"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mycelium.cli.main",
            "run",
            "--config",
            "bad.yaml",
            "--",
            "python",
            "-m",
            "shop.main",
        ],
        cwd=shop,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MYCELIUM_LEDGER_URL": db_dsn, "PYTHONPATH": f"{shop}{os.pathsep}{ROOT}"},
    )
    assert done.returncode == 1 and "has no 'nope'" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "mycelium.cli.main", "run", "--", "python", "-I", "app.py"],
        cwd=shop,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "-I would disable" in done.stderr
