"""YAML configuration: ``load_config(path).instrument(module)`` wraps the configured tools and tasks.

Sections read: ``transition`` (agent, policy, lease and polling), ``action_ledger`` / ``task_ledger``
(the store: ``storage: memory``; ``storage: file`` with ``path`` (a folder); ``storage: redis`` with
``url``/``url_env``; ``storage: postgres`` with ``dsn``/``dsn_env`` and ``install_schema`` (default
true: install the hub's schema in a database that never had it); or ``storage: hub`` with
``url``/``url_env``; which tools or tasks are ledgered), ``tools`` and ``tasks`` (``callable:
module:function``, ``side_effect_class`` and the other envelope fields), ``audit_receipt``
(``signing_key_env``, ``storage: file``, ``path``: with a memory, file or Redis store the SDK signs and
chains the receipts into that file; with postgres or hub the database writes them and the hub signs).
The guard sections (``registry``, ``runner``, ``history_guard``, ``message_validator``, ``state_flush``,
``integrations``) and each tool's ``protect:`` / ``bounded:`` are described in
:mod:`mycelium.guards.sections`. A section or key this SDK does not know is an error naming it.

A configured tool is wrapped, outermost first: the LangGraph integration (``integrations.langgraph``),
the ledger (tools listed under ``action_ledger.tools``, default all), ``bounded``, ``protect``, the
function. ``config.run(thread_id)`` scopes one agent run (a cache Session, the thread in the
transition keys, the state flush); ``config.prepare_messages(messages)`` runs the message validator
and the history guard and records the messages in the run's flushed state.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import re
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from mycelium.guards import sections
from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.decorators import LEDGER_ATTR, ledger, ledger_sync
from mycelium.ledger.identity import execution_scope
from mycelium.ledger.ledger import ActionLedger
from mycelium.ledger.storage import LedgerStorage
from mycelium.ledger.stores import MEMORY_URL, default_url, storage_for
from mycelium.ledger.tasks import task_ledger, task_ledger_sync

KNOWN = {
    "transition", "action_ledger", "task_ledger", "audit_receipt", "tools", "tasks", *sections.SECTION_KEYS
}
TOOL_KEYS = {
    "callable",
    "side_effect_class",
    "retry_permission",
    "spendability",
    "capability",
    "provider_idempotency_key_param",
    "provider_idempotency_key_ttl",
    "request_id_from",
    "scope_from",
    "reconciler",
    "defer_read_only_unknown",
    "ledger",
    "side_effect_boundary",
    "protect",
    "bounded",
}
TASK_KEYS = {"callable", "ledger", "id_from", "side_effect_class", "wait"}
#: set on a function this configuration wrapped (so it is not wrapped twice)
CONFIGURED_ATTR = "__mycelium_configured__"


class ConfigError(ValueError):
    """The configuration file is wrong; the message names the key."""


#: a ``callable``: a dotted module path, a colon, one name in that module
CALLABLE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def _check_callable(where: str, path: Any) -> None:
    if not isinstance(path, str) or not CALLABLE_PATH.fullmatch(path):
        raise ConfigError(f"{where} must be 'package.module:function', got {path!r}")


def import_target(path: str) -> tuple[ModuleType, str, Any]:
    """``module:attribute`` → (module, attribute name, object)."""
    _check_callable("callable", path)
    mod_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {mod_name!r} for {path!r}: {exc}") from exc
    if not hasattr(module, attr):
        raise ConfigError(f"{mod_name!r} has no {attr!r} (callable {path!r})")
    return module, attr, getattr(module, attr)


def _store_url(section: dict[str, Any], name: str) -> str | None:
    """The ledger URL a section names (``storage: memory|file|redis|postgres|hub``), or None."""
    kind = section.get("storage")
    if kind == "memory":
        return MEMORY_URL
    if kind == "file":
        return Path(os.path.expandvars(str(section.get("path") or "mycelium-ledger"))).resolve().as_uri()
    if kind in (None, "postgres", "hub", "redis"):
        for key in ("dsn", "url"):
            if section.get(key):
                return os.path.expandvars(str(section[key]))
        for key in ("dsn_env", "url_env"):
            if section.get(key):
                value = os.environ.get(str(section[key]))
                if not value:
                    raise ConfigError(f"{name}.{key}: environment variable {section[key]} is not set")
                return value
        if kind == "redis":
            raise ConfigError(f"{name}: storage redis needs url (redis://host:6379/0) or url_env")
        return None
    raise ConfigError(
        f"{name}.storage: {kind!r} is not a ledger store (memory, file, redis, postgres or hub)"
    )


def _with_receipts(storage: LedgerStorage, url: str, section: dict[str, Any]) -> LedgerStorage:
    """The store, writing signed receipts where ``audit_receipt`` says, unless the hub's database
    (postgres, hub) chains them itself."""
    if not section or url.startswith(("postgresql://", "postgres://", "http://", "https://")):
        return storage
    from mycelium.ledger.receipt_log import ReceiptingStorage, ReceiptLog, key_from_env

    kind = section.get("storage", "file")
    if kind != "file":
        raise ConfigError(f"audit_receipt.storage: {kind!r} is not supported (file)")
    env = section.get("signing_key_env")
    if not env:
        raise ConfigError("audit_receipt.signing_key_env: name the environment variable holding the key")
    try:
        key = key_from_env(str(env))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    path = Path(os.path.expandvars(str(section.get("path") or "mycelium-receipts.jsonl"))).resolve()
    return ReceiptingStorage(storage, ReceiptLog(path, key))


def _install_schema(section: dict[str, Any], name: str) -> bool:
    value = section.get("install_schema", True)
    if not isinstance(value, bool):
        raise ConfigError(f"{name}.install_schema must be true or false, got {value!r}")
    return value


@dataclass
class LedgerConfig:
    data: dict[str, Any]
    _ledgers: dict[tuple[str, bool], ActionLedger] = field(default_factory=dict)
    _guards: dict[str, Any] = field(default_factory=dict)

    # -- sections ----------------------------------------------------------------------------------

    @property
    def transition(self) -> dict[str, Any]:
        return dict(self.data.get("transition") or {})

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v or {}) for k, v in (self.data.get("tools") or {}).items()}

    @property
    def tasks(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v or {}) for k, v in (self.data.get("tasks") or {}).items()}

    @property
    def langgraph_enabled(self) -> bool:
        """Whether ``integrations.langgraph`` is on (LangGraph's ToolRuntime names the transitions)."""
        return sections.langgraph_enabled(self.data)

    def ledgered_tools(self) -> list[str]:
        """``action_ledger.tools``, else every tool except those configured only for the guards
        (``protect`` / ``bounded`` with no ``side_effect_class``); ``ledger: false`` opts one out."""
        listed = (self.data.get("action_ledger") or {}).get("tools")
        if listed is not None:
            names = list(listed)
        else:
            guards_only = {"protect", "bounded"}
            names = [n for n, spec in self.tools.items()
                     if "side_effect_class" in spec or spec.get("ledger") or not guards_only & set(spec)]
        return [n for n in names if self.tools.get(n, {}).get("ledger", True)]

    def ledgered_tasks(self) -> list[str]:
        listed = (self.data.get("task_ledger") or {}).get("tasks")
        names = list(listed) if listed is not None else list(self.tasks)
        return [n for n in names if self.tasks.get(n, {}).get("ledger", True)]

    def action_ledger(self, section: str = "action_ledger") -> ActionLedger:
        """The ActionLedger for tools (``action_ledger``) or tasks (``task_ledger``); one per store."""
        settings = dict(self.data.get(section) or {})
        url = _store_url(settings, section) or default_url()
        install = _install_schema(settings, section)
        led = self._ledgers.get((url, install))
        if led is None:
            t = self.transition
            lease_ttl = float(t.get("lease_ttl", 3600))
            dead = t.get("presumed_dead_after")
            if t.get("reclaim_requires_death_signal") and dead is None:
                dead = 2 * lease_ttl
            try:
                store = storage_for(url, install_schema=install)
            except ValueError as exc:  # a URL that names no store, from the file or the environment
                raise ConfigError(f"{section}: {exc}") from exc
            storage = _with_receipts(store, url, dict(self.data.get("audit_receipt") or {}))
            led = self._ledgers[(url, install)] = ActionLedger(
                storage,
                agent_id=str(t.get("agent_id", "")),
                policy_version=str(t.get("policy_version", "")),
                lease_ttl=lease_ttl,
                lease_renew_interval=t.get("lease_renew_interval"),
                poll_interval=float(t.get("poll_interval", 0.05)),
                poll_timeout=float(t.get("poll_timeout", 300)),
                presumed_dead_after=float(dead) if dead is not None else None,
            )
        return led

    # -- wrapping ----------------------------------------------------------------------------------

    def binding(self, name: str) -> ToolTransitionBinding:
        spec = self.tools.get(name, {})
        if "side_effect_class" not in spec:
            raise ConfigError(
                f"tools.{name}.side_effect_class is required for a ledgered tool "
                "(read, idempotent_mutate, keyed_mutate, non_idempotent_mutate, irreversible)"
            )
        t = self.transition
        try:
            return ToolTransitionBinding.for_tool(
                agent_id=str(t.get("agent_id", "")),
                policy_version=str(t.get("policy_version", "")),
                side_effect_class=spec["side_effect_class"],
                retry_permission=spec.get("retry_permission"),
                spendability=spec.get("spendability"),
                capability=spec.get("capability"),
                scope_from=spec.get("scope_from") or t.get("scope_from"),
                provider_idempotency_key_param=spec.get("provider_idempotency_key_param"),
                provider_idempotency_key_ttl=spec.get("provider_idempotency_key_ttl"),
                request_id_from=spec.get("request_id_from"),
            )
        except ValueError as exc:
            raise ConfigError(f"tools.{name}: {exc}") from exc

    def guarded_tools(self) -> list[str]:
        """The tools ``instrument`` wraps: the ledgered ones and those with ``protect`` / ``bounded``."""
        names = self.ledgered_tools()
        guarded = [n for n, spec in self.tools.items() if "protect" in spec or "bounded" in spec]
        return names + [n for n in guarded if n not in names]

    def wrap_tool(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if getattr(fn, CONFIGURED_ATTR, False):
            return fn
        spec = self.tools.get(name, {})
        unknown = set(spec) - TOOL_KEYS
        if unknown:
            raise ConfigError(f"tools.{name}: unknown key(s) {', '.join(sorted(unknown))}")
        is_async = _is_async(fn)
        wrapped = fn
        if "protect" in spec:
            options = sections.protect_options(name, spec["protect"])
            from mycelium.guards.protect import protect, protect_sync

            wrapped = (protect if is_async else protect_sync)(**options)(wrapped)
        if "bounded" in spec:
            options = sections.bounded_options(name, spec["bounded"])
            from mycelium.guards.boundary import bounded, bounded_sync

            wrapped = (bounded if is_async else bounded_sync)(**options)(wrapped)
        if name in self.ledgered_tools() and not getattr(fn, LEDGER_ATTR, False):
            reconciler = None
            if spec.get("reconciler"):
                _, _, target = import_target(spec["reconciler"])
                reconciler = target() if isinstance(target, type) else target
            wrapped = (ledger if is_async else ledger_sync)(
                action_ledger=self.action_ledger(),
                transition_binding=self.binding(name),
                reconciler=reconciler,
                defer_read_only_unknown=bool(spec.get("defer_read_only_unknown")),
            )(wrapped)
        if self.langgraph_enabled:
            from mycelium.integrations.langgraph import LangGraphIntegrationError, instrument_langgraph_tool

            try:
                wrapped = instrument_langgraph_tool(wrapped)
            except LangGraphIntegrationError as exc:
                raise ConfigError(f"tools.{name}: {exc}") from exc
        if wrapped is fn:
            return fn
        setattr(wrapped, CONFIGURED_ATTR, True)
        return wrapped

    def wrap_task(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if getattr(fn, LEDGER_ATTR, False):
            return fn
        spec = self.tasks.get(name, {})
        unknown = set(spec) - TASK_KEYS
        if unknown:
            raise ConfigError(f"tasks.{name}: unknown key(s) {', '.join(sorted(unknown))}")
        deco = task_ledger if _is_async(fn) else task_ledger_sync
        options: dict[str, Any] = {
            "action_ledger": self.action_ledger("task_ledger"),
            "id_from": spec.get("id_from"),
            "wait": bool(spec.get("wait", False)),
        }
        if spec.get("side_effect_class"):
            options["side_effect_class"] = spec["side_effect_class"]
        return deco(**options)(fn)

    def apply(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: ledger this function as the configured tool of the same name."""
        if fn.__name__ not in self.tools:
            raise ConfigError(f"{fn.__name__} is not under tools: in the configuration")
        return self.wrap_tool(fn.__name__, fn)

    def apply_task(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: ledger this function as the configured task of the same name."""
        if fn.__name__ not in self.tasks:
            raise ConfigError(f"{fn.__name__} is not under tasks: in the configuration")
        return self.wrap_task(fn.__name__, fn)

    def instrument(self, module: ModuleType, *, tasks: bool = True) -> ModuleType:
        """Replace the module's configured tools (and tasks, unless ``tasks=False``) with their ledgered
        versions."""
        parts = [(self.guarded_tools(), self.wrap_tool)]
        if tasks:
            parts.append((self.ledgered_tasks(), self.wrap_task))
        for names, wrap in parts:
            for name in names:
                fn = getattr(module, name, None)
                if callable(fn):
                    setattr(module, name, wrap(name, fn))
        return module

    def wrap_module(self, module: ModuleType) -> ModuleType:
        """:meth:`instrument` for the tools only."""
        return self.instrument(module, tasks=False)

    def instrument_callables(self) -> list[str]:
        """Import every configured ``callable`` and replace it in its module (``mycelium run``)."""
        seen: dict[str, str] = {}
        done: list[str] = []
        for names, specs, wrap, section in (
            (self.guarded_tools(), self.tools, self.wrap_tool, "tools"),
            (self.ledgered_tasks(), self.tasks, self.wrap_task, "tasks"),
        ):
            for name in names:
                target = specs.get(name, {}).get("callable")
                if not target:
                    raise ConfigError(f"{section}.{name}.callable is required (module:function)")
                if target in seen:
                    raise ConfigError(f"{section}.{name}: callable {target} is also {seen[target]}")
                seen[target] = name
                module, attr, fn = import_target(target)
                if not callable(fn):
                    raise ConfigError(f"{target} is not callable")
                setattr(module, attr, wrap(name, fn))
                done.append(target)
        return done

    # -- guards ------------------------------------------------------------------------------------

    @property
    def registry(self) -> Any:
        """The ``registry`` allow-list as a ToolRegistry (no section: an empty one, as upstream)."""
        from mycelium.guards.registry import ToolRegistry

        return ToolRegistry(allowed=self.registry_allowed)

    @property
    def registry_allowed(self) -> list[str]:
        """The tool names ``registry`` allows (``auto``: every tool under ``tools:``); none without it."""
        return sections.registry_allowed(self.data) or []

    @property
    def runner_settings(self) -> dict[str, int]:
        """The ``runner`` section's retry settings as configured (max_llm_retries, max_tool_retries)."""
        return sections.runner_settings(self.data)

    def build_runner(self, registry: Any = None) -> Any:
        """A ToolRunner with the ``registry`` allow-list and the ``runner`` retry settings."""
        from mycelium.guards.runner import ToolRunner

        chosen = registry if registry is not None else self.registry
        return ToolRunner(registry=chosen, **self.runner_settings)

    def build_history_guard(self) -> Any:
        """A new HistoryGuard from ``history_guard`` (None when the section is absent)."""
        return sections.history_guard(self.data) if "history_guard" in self.data else None

    def build_message_validator(self) -> Any:
        """A MessageValidator when ``message_validator`` is enabled, else None."""
        found = sections.message_validator(self.data) if "message_validator" in self.data else None
        return found[0] if found else None

    def build_state_flush(self) -> Any:
        """The StateFlush of ``state_flush`` (one per configuration), or None."""
        if "state_flush" not in self.data:
            return None
        if "state_flush" not in self._guards:
            self._guards["state_flush"] = sections.state_flush(self.data)
        return self._guards["state_flush"]

    def prepare_messages(self, messages: list[Any]) -> list[Any]:
        """Before a model call: repair (or validate) the messages, check the history guard, and record
        the messages in the active run's flushed state. Inside ``config.run`` the history guard is the
        run's own, so ``check_for_drops`` compares against this run's last messages."""
        if "validator" not in self._guards:
            found = sections.message_validator(self.data) if "message_validator" in self.data else None
            self._guards["validator"] = found
        found = self._guards["validator"]
        if found is not None:
            validator, mode = found
            messages = validator.repair(messages) if mode == "repair" else validator.validate(messages)
        guard = self.history_guard()
        if guard is not None:
            messages = guard.validate(messages)
        from mycelium.guards.state_flush import get_active_flush_run

        active = get_active_flush_run()
        if active is not None:
            active.record({"messages": list(messages)})
        return messages

    def history_guard(self) -> Any:
        """The active run's HistoryGuard (outside ``config.run``: this configuration's), or None."""
        if "history_guard" not in self.data:
            return None
        scope = _active_run.get()
        if scope is not None and scope.config is self:
            if scope.guard is None:
                scope.guard = self.build_history_guard()
            return scope.guard
        if "history_guard" not in self._guards:
            self._guards["history_guard"] = self.build_history_guard()
        return self._guards["history_guard"]

    def run(self, thread_id: str, *, run_id: str = "", use_session: bool = True) -> AgentRun:
        """``with config.run(thread_id) as run:`` (or ``async with``): one agent run — a cache
        Session, ``thread_id`` (and ``run_id``) in the transition keys of the calls inside, and the
        ``state_flush`` run (``run.record``; flushed when the block ends)."""
        return AgentRun(self, str(thread_id), str(run_id), use_session)


_active_run: ContextVar[AgentRun | None] = ContextVar("mycelium_agent_run", default=None)


class _NoFlush:
    """The run handle when no ``state_flush`` is configured: records nothing."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.state: dict[str, Any] = {}

    def record(self, patch: dict[str, Any]) -> None:
        return None


class AgentRun:
    """The context ``config.run`` returns (sync and async)."""

    def __init__(self, config: LedgerConfig, thread_id: str, run_id: str, use_session: bool) -> None:
        self.config = config
        self.guard: Any = None
        self._thread_id, self._run_id, self._use_session = thread_id, run_id, use_session
        self._stack: list[Any] = []

    @contextlib.contextmanager
    def _entered(self) -> Iterator[Any]:
        flush = self.config.build_state_flush()
        with contextlib.ExitStack() as stack:
            stack.enter_context(execution_scope(thread_id=self._thread_id, run_id=self._run_id))
            if flush is not None:
                handle = stack.enter_context(flush.run(self._thread_id, use_session=self._use_session))
            else:
                if self._use_session:
                    from mycelium.guards.session import Session

                    stack.enter_context(Session())
                handle = _NoFlush(self._thread_id)
            token = _active_run.set(self)
            stack.callback(_active_run.reset, token)
            yield handle

    def __enter__(self) -> Any:
        cm = self._entered()
        handle = cm.__enter__()
        self._stack.append(cm)
        return handle

    def __exit__(self, *exc: Any) -> bool:
        return bool(self._stack.pop().__exit__(*exc))

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> bool:
        return self.__exit__(*exc)


#: a tool setting's type, where YAML could give another (``key_param: 123``, ``ledger: "no"``)
_TOOL_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("callable", "side_effect_class", "retry_permission", "spendability", "capability",
                     "provider_idempotency_key_param", "request_id_from", "reconciler",
                     "side_effect_boundary"), (str,)),
    **dict.fromkeys(("defer_read_only_unknown", "ledger"), (bool,)),
    "provider_idempotency_key_ttl": (int, float),
    "scope_from": (dict,),
}


_TYPE_NAMES = {str: "a string", bool: "true or false", int: "a number", float: "a number", dict: "a mapping"}


def _check_types(where: str, spec: dict[str, Any]) -> None:
    for key, value in spec.items():
        want = _TOOL_TYPES.get(key)
        if want is None or value is None:
            continue
        if not isinstance(value, want) or (bool not in want and isinstance(value, bool)):
            names = " or ".join(dict.fromkeys(_TYPE_NAMES[t] for t in want))
            raise ConfigError(f"{where}.{key} must be {names}, not {value!r}")


def _entries(path: str, data: dict[str, Any], section: str, keys: set[str]) -> dict[str, Any]:
    """The ``tools`` or ``tasks`` section: a mapping of names to settings, each setting one of ``keys``."""
    entries = data.get(section) or {}
    if not isinstance(entries, dict):
        raise ConfigError(f"{path}: {section} must be a mapping of {section[:-1]} name -> settings")
    for name, spec in entries.items():
        if spec is not None and not isinstance(spec, dict):
            raise ConfigError(f"{section}.{name} must be a mapping of settings")
        bad = set(spec or {}) - keys
        if bad:
            raise ConfigError(f"{section}.{name}: unknown key(s) {', '.join(sorted(bad))}")
    return entries


def _check_callables(tools: dict[str, Any], tasks: dict[str, Any]) -> None:
    """Each ``callable`` well formed, and no function configured twice (two tools, or a tool and a task)."""
    seen: dict[str, str] = {}
    for section, specs in (("tools", tools), ("tasks", tasks)):
        for name, spec in specs.items():
            target = (spec or {}).get("callable")
            if target is None:
                continue
            where = f"{section}.{name}.callable"
            _check_callable(where, target)
            if target in seen:
                raise ConfigError(
                    f"{where}: {target!r} is configured more than once ({seen[target]} and {where})"
                )
            seen[target] = where


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scalar(value: Any) -> bool:
    """A value YAML may give for a name: text, or a number such as an unquoted ``2026.07``."""
    return isinstance(value, str) or _number(value)


#: the transition section's settings: what each must be (the lease and polling times in seconds)
_TRANSITION_KEYS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "agent_id": ("a string", _scalar),
    "policy_version": ("a string", _scalar),
    "scope_from": ("a mapping of scope key -> argument name", lambda v: isinstance(v, dict)),
    "lease_ttl": ("a positive number of seconds", lambda v: _number(v) and v > 0),
    "lease_renew_interval": (
        "a number of seconds, 0 or more (0: no auto-renew)", lambda v: _number(v) and v >= 0
    ),
    "poll_interval": ("a positive number of seconds", lambda v: _number(v) and v > 0),
    "poll_timeout": ("a positive number of seconds", lambda v: _number(v) and v > 0),
    "presumed_dead_after": ("a positive number of seconds", lambda v: _number(v) and v > 0),
    "reclaim_requires_death_signal": ("true or false", lambda v: isinstance(v, bool)),
}


def _check_transition(section: Any) -> None:
    if section is None:
        return
    if not isinstance(section, dict):
        raise ConfigError(f"transition must be a mapping of settings, got {section!r}")
    unknown = sorted(map(str, set(section) - set(_TRANSITION_KEYS)))
    if unknown:
        raise ConfigError(
            f"transition: unknown key(s) {', '.join(unknown)} (known: {', '.join(_TRANSITION_KEYS)})"
        )
    for key, value in section.items():
        what, ok = _TRANSITION_KEYS[key]
        if value is not None and not ok(value):
            raise ConfigError(f"transition.{key} must be {what}, got {value!r}")


#: what each store section reads; upstream's ``in_flight_ttl``, ``prefix`` and ``table`` (its own stores'
#: settings) are accepted with a warning that they change nothing here
_STORE_KEYS = {"storage", "path", "dsn", "dsn_env", "url", "url_env", "install_schema"}
_SECTION_KEYS = {
    "action_ledger": _STORE_KEYS | {"tools"},
    "task_ledger": _STORE_KEYS | {"tasks"},
    "audit_receipt": {"storage", "path", "signing_key_env", "auto"},
}
_UPSTREAM_ONLY = {"in_flight_ttl", "prefix", "table"}


def _check_store_section(name: str, section: Any) -> None:
    if section is None:
        return
    if not isinstance(section, dict):
        raise ConfigError(f"{name} must be a mapping of settings, got {section!r}")
    known = _SECTION_KEYS[name]
    ignored = sorted(map(str, set(section) & _UPSTREAM_ONLY)) if name != "audit_receipt" else []
    unknown = sorted(map(str, set(section) - known - set(ignored)))
    if unknown:
        raise ConfigError(f"{name}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    for key in ignored:
        warnings.warn(f"{name}.{key} is a setting of upstream's own stores: it changes nothing here",
                      UserWarning, stacklevel=4)
    if name == "audit_receipt":
        if section.get("auto", True) is not True:
            raise ConfigError(
                "audit_receipt.auto: only true (every ledgered call gets a receipt) is supported, "
                f"got {section['auto']!r}"
            )
    else:
        _install_schema(section, name)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn)


def load_config(path: str | Path) -> LedgerConfig:
    """Read a mycelium.yaml (see the module docstring for the sections used)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return _parsed(text, str(path))


def load_config_from_string(text: str) -> LedgerConfig:
    """The same as :func:`load_config`, from the YAML text itself."""
    return _parsed(text, "the configuration")


def _parsed(text: str, path: str) -> LedgerConfig:
    import yaml  # here, not at the top: importing the SDK does not load the YAML parser

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    unknown = sorted(map(str, set(data) - KNOWN))
    if unknown:
        known = ", ".join(sorted(KNOWN))
        raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)} (known: {known})")
    tools = _entries(path, data, "tools", TOOL_KEYS)
    for name, spec in tools.items():
        _check_types(f"tools.{name}", spec or {})
    tasks = _entries(path, data, "tasks", TASK_KEYS)
    _check_callables(tools, tasks)
    _check_transition(data.get("transition"))
    try:
        sections.check(data)
    except sections.SectionError as exc:
        raise ConfigError(str(exc)) from exc
    for section in ("action_ledger", "task_ledger", "audit_receipt"):
        _check_store_section(section, data.get(section))
    cfg = LedgerConfig(data)
    if cfg.transition:
        for name in cfg.ledgered_tools():
            cfg.binding(name)  # side_effect_class present and valid
    return cfg


#: upstream's name for what load_config returns
MyceliumConfig = LedgerConfig
