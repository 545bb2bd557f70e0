"""``mycelium init``: scaffold a mycelium.yaml and one ledgered tool module that run as written.

* ``mycelium init`` — the on-ramp: a ``transition`` section, the LangGraph integration, and one
  ledgered tool (``subagent_task``), so a redispatched call runs once.
* ``mycelium init --minimal`` — the small multi-guard scaffold: a cached, bounded read and a
  bounded payment, the registry and the message validator.
* ``mycelium init --full`` — the reference: every section, with TODOs to fill.

Each writes ``mycelium.yaml`` and a package (``my_agent`` unless ``--package``) holding
``tools.py`` and a ``__main__.py`` that calls the tools, so the next step is
``mycelium run --config mycelium.yaml -- python -m my_agent``. The ledger is the database named by
``MYCELIUM_LEDGER_URL``. Existing files are kept unless ``--force``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HEADER = """\
# Mycelium: {what}
# Scaffolded by `mycelium init{flag}`. Run it:
#   export MYCELIUM_LEDGER_URL=postgresql://…   # the hub's database (or its http:// URL)
#   mycelium run --config mycelium.yaml -- python -m {pkg}
# Every section and key: the SDK part of the README.
"""

ON_RAMP = """\
integrations:
  langgraph:
    enabled: true   # LangGraph's ToolNode ids enter the transition key (needs mycelium-hub[langgraph])

transition:
  agent_id: my-agent            # TODO: your agent's id (transition keys and receipts)
  policy_version: "2026.07.1"   # TODO: bump when the tools' policy changes
  lease_ttl: 3600

action_ledger:
  tools: [subagent_task]

tools:
  subagent_task:
    callable: {pkg}.tools:subagent_task
    side_effect_class: non_idempotent_mutate
"""

MINIMAL = """\
integrations:
  langgraph:
    enabled: true

transition:
  agent_id: my-agent            # TODO: your agent's id
  policy_version: "2026.07.1"

action_ledger:
  tools: [subagent_task, send_payment]

tools:
  subagent_task:
    callable: {pkg}.tools:subagent_task
    side_effect_class: non_idempotent_mutate
  fetch_customer:
    callable: {pkg}.tools:fetch_customer
    side_effect_class: read
    protect: {{entity_param: customer_id, ttl: 60}}
    bounded:
      schema:
        customer_id: {{type: string, required: true, pattern: "^c\\\\d+$"}}
  send_payment:
    callable: {pkg}.tools:send_payment
    side_effect_class: keyed_mutate
    bounded:
      schema:
        amount: {{type: number, required: true}}
        recipient: {{type: string, required: true, min_length: 1}}

registry:
  auto: true

message_validator:
  enabled: true
"""

FULL = """\
integrations:
  langgraph:
    enabled: true

transition:
  agent_id: my-agent            # TODO: your agent's id (transition keys and receipts)
  policy_version: "2026.07.1"   # TODO: your policy version
  lease_ttl: 3600
  # lease_renew_interval: 1200  # default lease_ttl / 3; 0 disables auto-renew

action_ledger:
  # storage: postgres           # TODO: dsn / dsn_env, or storage: hub with url / url_env;
  #                             # default: MYCELIUM_LEDGER_URL
  tools: [subagent_task, send_payment, search_docs]

task_ledger:
  tasks: [process_invoice]

state_flush:
  storage: file
  path: ./mycelium-state.json   # TODO: where an interrupted run's state is kept

audit_receipt:
  signing_key_env: MYCELIUM_SIGNING_KEY   # receipts are written and signed by the hub

tools:
  subagent_task:
    callable: {pkg}.tools:subagent_task
    side_effect_class: non_idempotent_mutate
  fetch_customer:
    callable: {pkg}.tools:fetch_customer
    side_effect_class: read
    protect: {{entity_param: customer_id, ttl: 60}}
    bounded:
      schema:
        customer_id: {{type: string, required: true, pattern: "^c\\\\d+$"}}
      output_schema:
        customer_id: {{type: string, required: true}}
        name: {{type: string, required: true}}
  send_payment:
    callable: {pkg}.tools:send_payment
    side_effect_class: keyed_mutate
    retry_permission: manual_reconciliation_required
    bounded:
      schema:
        amount: {{type: number, required: true}}
        recipient: {{type: string, required: true}}
  search_docs:
    callable: {pkg}.tools:search_docs
    side_effect_class: read
    bounded:
      schema:
        query: {{type: string, required: true, min_length: 1, max_length: 500}}
        path: {{type: string}}
      allowed_paths: [./docs/]    # TODO: the folders this tool may read

tasks:
  process_invoice:
    callable: {pkg}.tools:process_invoice
    ledger: true
    id_from: [invoice_id]

registry:
  auto: true                    # the allow-list: every tool above

runner:
  max_llm_retries: 2
  max_tool_retries: 3

history_guard:
  max_tokens: 100000            # TODO: your model's context budget
  max_messages: 500

message_validator:
  enabled: true
"""

TOOLS = '''\
"""The agent's tools (TODO: replace the bodies with your own). Plain functions: `mycelium run`
wraps them as mycelium.yaml says before the app imports this module."""

RUNS: list[str] = []  # what really ran in this process


def subagent_task(task: str) -> dict:
    """Hand a task to a sub-agent (a side effect that must not happen twice)."""
    RUNS.append("subagent_task")
    return {{"task": task, "status": "started"}}
{more}'''

MORE_TOOLS = '''

def fetch_customer(customer_id: str) -> dict:
    """Read a customer (cached for 60 s per customer_id)."""
    RUNS.append("fetch_customer")
    return {"customer_id": customer_id, "name": "Alice"}


def send_payment(amount: float, recipient: str) -> dict:
    """Charge the recipient (ledgered: a retried call returns the first result)."""
    RUNS.append("send_payment")
    return {"paid": amount, "to": recipient}
'''

FULL_TOOLS = MORE_TOOLS + '''

def search_docs(query: str, path: str = "./docs/") -> list:
    """Search the documentation under an allowed path."""
    RUNS.append("search_docs")
    return [f"{path}: {query}"]


def process_invoice(invoice_id: str, amount: float) -> dict:
    """A task: ledgered as a whole, keyed by invoice_id."""
    customer = fetch_customer(customer_id="c1")
    payment = send_payment(amount=amount, recipient=customer["customer_id"], tool_call_id=invoice_id)
    return {"invoice_id": invoice_id, "payment": payment}
'''

MAIN = '''\
"""Run with `mycelium run --config mycelium.yaml -- python -m {pkg}`: the same logical call twice
(a framework retry with the same tool-call id) runs its side effect once."""

import json

from {pkg} import tools


def main() -> None:
    first = tools.subagent_task(task="summarise the report", tool_call_id="call_1")
    again = tools.subagent_task(task="summarise the report", tool_call_id="call_1")  # a redispatch
    out = {{"first": first, "again": again}}
{more}    out["ran"] = tools.RUNS
    print(json.dumps(out))


if __name__ == "__main__":
    main()
'''

MAIN_MINIMAL = '''\
    out["customer"] = [tools.fetch_customer(customer_id="c1") for _ in range(2)]  # one fetch, cached
    out["payment"] = tools.send_payment(amount=10, recipient="acct_1", tool_call_id="call_2")
'''

MAIN_FULL = MAIN_MINIMAL + '''\
    out["invoice"] = tools.process_invoice(invoice_id="inv-1", amount=25)
    out["docs"] = tools.search_docs(query="refunds")
    from mycelium import load_config

    config = load_config("mycelium.yaml")
    with config.run("thread-1"):  # a cache session, the thread in the keys, the flushed state
        out["messages"] = config.prepare_messages([{{"role": "user", "content": "pay invoice 1"}}])
'''

SCAFFOLDS = {
    "on-ramp": ("on-ramp: a redispatched tool call runs once", "", ON_RAMP, "", ""),
    "minimal": ("a small multi-guard scaffold", " --minimal", MINIMAL, MORE_TOOLS, MAIN_MINIMAL),
    "full": ("the reference scaffold: every section (fill the TODOs)", " --full", FULL, FULL_TOOLS,
             MAIN_FULL),
}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("init", help="scaffold mycelium.yaml and a ledgered tool module (--full, --minimal)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--full", action="store_const", const="full", dest="kind",
                      help="the reference: every guard section, with TODOs")
    kind.add_argument("--minimal", action="store_const", const="minimal", dest="kind",
                      help="a small multi-guard scaffold")
    p.add_argument("--dir", type=Path, default=Path("."), help="where to write (default: here)")
    p.add_argument("--package", default="my_agent", help="the tool package's name (default my_agent)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=run, kind="on-ramp")


def files(kind: str, pkg: str) -> dict[str, str]:
    """Relative path -> content of the scaffold."""
    what, flag, config, more_tools, more_main = SCAFFOLDS[kind]
    return {
        "mycelium.yaml": HEADER.format(what=what, flag=flag, pkg=pkg) + "\n" + config.format(pkg=pkg),
        f"{pkg}/__init__.py": "",
        f"{pkg}/tools.py": TOOLS.format(more=more_tools),
        f"{pkg}/__main__.py": MAIN.format(pkg=pkg, more=more_main.format(pkg=pkg) if more_main else ""),
    }


def run(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.package):
        print(f"mycelium init: --package must be a Python module name, got {args.package!r}", file=sys.stderr)
        return 2
    scaffold = files(args.kind, args.package)
    existing = [name for name in scaffold if (args.dir / name).exists()]
    if existing and not args.force:
        print(f"mycelium init: {', '.join(existing)} already exist in {args.dir} (--force overwrites)",
              file=sys.stderr)
        return 1
    for name, content in scaffold.items():
        path = args.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        print(f"wrote {path}")
    print(f"next: mycelium run --config {args.dir / 'mycelium.yaml'} -- python -m {args.package}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mycelium.cli.init`` (the same as ``mycelium init``)."""
    parser = argparse.ArgumentParser(prog="mycelium")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["init", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
