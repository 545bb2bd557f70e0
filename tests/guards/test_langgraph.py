"""LangGraph for real: a StateGraph whose scripted model issues one tool call and whose ToolNode runs
it. With ``integrations.langgraph`` the redispatched call (same thread, same tool-call id) runs its
side effect once — re-run in one process, or two processes at once on the Postgres ledger — with no
change to the tool; plain LangGraph runs it twice. The effects file counts what really happened."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mycelium import load_config

pytest.importorskip("langgraph")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

TOOLS = 'import os\nimport time\nfrom pathlib import Path\n\n\ndef charge(amount: int, recipient: str) -> str:\n    """Charge the recipient once."""\n    ready = os.environ.get("READY")\n    if ready:\n        Path(ready).write_text("in")\n    with open(os.environ["EFFECTS"], "a") as f:\n        f.write(f"charge {amount} {recipient} {os.getpid()}\\n")\n        f.flush()\n        os.fsync(f.fileno())\n    time.sleep(float(os.environ.get("SLEEP", "0")))\n    return f"charged {amount} to {recipient}"\n'

MAIN = '"""A LangGraph agent: a scripted model issues one tool call; ToolNode runs it. Argv: runs thread call_id."""\n\nimport json\nimport sys\nfrom typing import Annotated, TypedDict\n\nfrom langchain_core.language_models.fake_chat_models import GenericFakeChatModel\nfrom langchain_core.messages import AIMessage, HumanMessage\nfrom langgraph.graph import END, START, StateGraph\nfrom langgraph.graph.message import add_messages\nfrom langgraph.prebuilt import ToolNode\n\nfrom lg_tools import charge\n\n\nclass State(TypedDict):\n    messages: Annotated[list, add_messages]\n\n\ndef build(call_id: str):\n    reply = AIMessage(content="", tool_calls=[{"name": "charge", "args": {"amount": 5, "recipient": "acct"},\n                                               "id": call_id}])\n    model = GenericFakeChatModel(messages=iter([reply]))\n    graph = StateGraph(State)\n    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})\n    graph.add_node("tools", ToolNode([charge]))\n    graph.add_edge(START, "agent")\n    graph.add_edge("agent", "tools")\n    graph.add_edge("tools", END)\n    return graph.compile()\n\n\ndef main() -> None:\n    runs, thread, call_id = int(sys.argv[1]), sys.argv[2], sys.argv[3]\n    out = []\n    for _ in range(runs):\n        final = build(call_id).invoke({"messages": [HumanMessage("pay acct 5")]},\n                                      {"configurable": {"thread_id": thread}})\n        out.append(final["messages"][-1].content)\n    print(json.dumps(out))\n\n\nmain()\n'

CONFIG = """\
integrations:
  langgraph:
    enabled: {enabled}
transition:
  agent_id: lg-agent
  policy_version: "1"
action_ledger:
  storage: postgres
  dsn_env: MYCELIUM_LEDGER_URL
tools:
  charge:
    callable: lg_tools:charge
    side_effect_class: non_idempotent_mutate
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "lg_tools.py").write_text(TOOLS)
    (tmp_path / "lg_main.py").write_text(MAIN)
    for enabled in ("true", "false"):
        (tmp_path / f"langgraph-{enabled}.yaml").write_text(CONFIG.format(enabled=enabled))
    return tmp_path


def start(app: Path, dsn: str, *argv: str, mycelium: str | None = "true", sleep: float = 0,
          ready: Path | None = None) -> subprocess.Popen:
    """``mycelium run --config … -- python -m lg_main runs thread call_id`` (or plain python)."""
    command = [sys.executable, "-m", "lg_main", *argv]
    if mycelium is not None:
        command = [sys.executable, "-m", "mycelium.cli.main", "run", "--config",
                   f"langgraph-{mycelium}.yaml", "--", *command[:1], "-m", "lg_main", *argv]
    env = {**os.environ, "MYCELIUM_LEDGER_URL": dsn, "EFFECTS": str(app / "effects"), "SLEEP": str(sleep),
           "PYTHONPATH": f"{app}{os.pathsep}{ROOT}"}
    if ready is not None:
        env["READY"] = str(ready)
    return subprocess.Popen(command, cwd=app, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(proc: subprocess.Popen) -> list[str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def effects(app: Path) -> list[str]:
    path = app / "effects"
    return path.read_text().splitlines() if path.exists() else []


def test_a_rerun_of_the_same_thread_and_tool_call_runs_the_side_effect_once(app, db_dsn):
    results = finish(start(app, db_dsn, "2", "thread-1", "call_1"))
    assert results == ["charged 5 to acct"] * 2
    assert len(effects(app)) == 1


def test_without_mycelium_the_same_rerun_runs_the_side_effect_twice(app, db_dsn):
    finish(start(app, db_dsn, "2", "thread-1", "call_1", mycelium=None))
    assert len(effects(app)) == 2


def test_two_processes_running_the_redispatch_at_once_run_it_once(app, db_dsn):
    ready = app / "a.ready"
    a = start(app, db_dsn, "1", "thread-7", "call_7", sleep=3.0, ready=ready)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert a.poll() is None, a.stderr.read() if a.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.02)
    b = start(app, db_dsn, "1", "thread-7", "call_7", sleep=3.0)
    assert finish(a) == finish(b) == ["charged 5 to acct"]  # B polled A's call and returned its result
    assert len(effects(app)) == 1


def test_two_plain_langgraph_processes_run_it_twice(app, db_dsn):
    ready = app / "a.ready"
    a = start(app, db_dsn, "1", "thread-7", "call_7", mycelium=None, sleep=1.0, ready=ready)
    while not ready.exists():
        assert a.poll() is None
        time.sleep(0.02)
    b = start(app, db_dsn, "1", "thread-7", "call_7", mycelium=None, sleep=1.0)
    finish(a), finish(b)
    assert len({line.split()[-1] for line in effects(app)}) == 2  # one effect in each process


def test_the_tool_call_id_and_thread_enter_the_key(app, db_dsn):
    """Distinct tool calls with equal arguments stay distinct with the integration; without it (the
    ledger alone) they collapse into one, because only the arguments tell them apart."""
    for call_id in ("call_a", "call_b"):
        finish(start(app, db_dsn, "1", "thread-2", call_id))
    finish(start(app, db_dsn, "1", "thread-3", "call_a"))  # the same id in another thread: another call
    assert len(effects(app)) == 3
    (app / "effects").unlink()
    for call_id in ("call_c", "call_d"):
        finish(start(app, db_dsn, "1", "thread-4", call_id, mycelium="false"))
    assert len(effects(app)) == 1


def test_config_apply_adds_the_hidden_runtime_and_explicit_ids_win(app, db_dsn, monkeypatch):
    from langgraph.prebuilt import ToolRuntime

    monkeypatch.setenv("MYCELIUM_LEDGER_URL", db_dsn)
    monkeypatch.setenv("EFFECTS", str(app / "effects"))
    monkeypatch.syspath_prepend(str(app))
    config = load_config(app / "langgraph-true.yaml")
    import lg_tools

    original = lg_tools.charge
    charge = config.apply(original)
    params = inspect.signature(charge).parameters
    assert params["runtime"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["runtime"].annotation is ToolRuntime
    assert "runtime" not in inspect.signature(original).parameters  # the function itself is unchanged

    def runtime(call_id: str, thread: str = "t-apply") -> ToolRuntime:
        return ToolRuntime(state={}, context=None, stream_writer=lambda _: None, store=None,
                           tool_call_id=call_id, config={"configurable": {"thread_id": thread},
                                                           "metadata": {"langgraph_node": "tools"}})

    charge(amount=1, recipient="r", runtime=runtime("call_x"))
    charge(amount=1, recipient="r", runtime=runtime("call_x"))  # the redispatch: stored result
    assert len(effects(app)) == 1
    charge(amount=1, recipient="r", runtime=runtime("call_x"), tool_call_id="explicit-1")
    charge(amount=1, recipient="r", runtime=runtime("call_y"), tool_call_id="explicit-1")
    assert len(effects(app)) == 2  # the explicit id won over the runtime's (one new call, not two)
    assert charge(amount=2, recipient="direct", tool_call_id="outside") == "charged 2 to direct"
    assert len(effects(app)) == 3  # called outside LangGraph: still works, still ledgered
    sys.modules.pop("lg_tools", None)
