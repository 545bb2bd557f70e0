"""YAML configuration: ``load_config(path).instrument(module)`` wraps the configured tools and tasks.

Sections read: ``transition`` (agent, policy, lease and polling), ``action_ledger`` / ``task_ledger``
(the store: ``storage: memory``; ``storage: file`` with ``path`` (a folder); ``storage: redis`` with
``url``/``url_env``; ``storage: postgres`` with ``dsn``/``dsn_env`` and ``install_schema`` (default
true: install the hub's schema in a database that never had it); or ``storage: hub`` with
``url``/``url_env``; which tools or tasks are ledgered), ``tools`` and ``tasks`` (``callable:
module:function``, ``side_effect_class`` and the other envelope fields), ``audit_receipt``
(``signing_key_env``, ``storage: file``, ``path``: with a memory, file or Redis store the SDK signs and
chains the receipts into that file; with postgres or hub the database writes them and the hub signs).
Sections for guards this SDK does not implement are reported and ignored.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from mycelium.ledger.binding import ToolTransitionBinding
from mycelium.ledger.decorators import LEDGER_ATTR, ledger, ledger_sync
from mycelium.ledger.ledger import ActionLedger
from mycelium.ledger.storage import LedgerStorage
from mycelium.ledger.stores import MEMORY_URL, default_url, storage_for
from mycelium.ledger.tasks import task_ledger, task_ledger_sync

log = logging.getLogger("mycelium.ledger.config")

KNOWN = {"transition", "action_ledger", "task_ledger", "audit_receipt", "tools", "tasks", "integrations"}
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
}
TASK_KEYS = {"callable", "ledger", "id_from", "side_effect_class", "wait"}
IGNORED_TOOL_KEYS = {"protect", "bounded"}


class ConfigError(ValueError):
    """The configuration file is wrong; the message names the key."""


def import_target(path: str) -> tuple[ModuleType, str, Any]:
    """``module:attribute`` → (module, attribute name, object)."""
    if not isinstance(path, str) or ":" not in path:
        raise ConfigError(f"callable must be 'module:function', got {path!r}")
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

    def ledgered_tools(self) -> list[str]:
        listed = (self.data.get("action_ledger") or {}).get("tools")
        names = list(listed) if listed is not None else list(self.tools)
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
            storage = _with_receipts(
                storage_for(url, install_schema=install), url, dict(self.data.get("audit_receipt") or {})
            )
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

    def wrap_tool(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if getattr(fn, LEDGER_ATTR, False):
            return fn
        spec = self.tools.get(name, {})
        unknown = set(spec) - TOOL_KEYS - IGNORED_TOOL_KEYS
        if unknown:
            raise ConfigError(f"tools.{name}: unknown key(s) {', '.join(sorted(unknown))}")
        reconciler = None
        if spec.get("reconciler"):
            _, _, target = import_target(spec["reconciler"])
            reconciler = target() if isinstance(target, type) else target
        deco = ledger if _is_async(fn) else ledger_sync
        return deco(
            action_ledger=self.action_ledger(),
            transition_binding=self.binding(name),
            reconciler=reconciler,
            defer_read_only_unknown=bool(spec.get("defer_read_only_unknown")),
        )(fn)

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

    def instrument(self, module: ModuleType) -> ModuleType:
        """Replace the module's configured tools and tasks with their ledgered versions."""
        for names, wrap in ((self.ledgered_tools(), self.wrap_tool), (self.ledgered_tasks(), self.wrap_task)):
            for name in names:
                fn = getattr(module, name, None)
                if callable(fn):
                    setattr(module, name, wrap(name, fn))
        return module

    def instrument_callables(self) -> list[str]:
        """Import every configured ``callable`` and replace it in its module (``mycelium run``)."""
        seen: dict[str, str] = {}
        done: list[str] = []
        for names, specs, wrap, section in (
            (self.ledgered_tools(), self.tools, self.wrap_tool, "tools"),
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


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn)


def load_config(path: str | Path) -> LedgerConfig:
    """Read a mycelium.yaml (see the module docstring for the sections used)."""
    import yaml  # here, not at the top: importing the SDK does not load the YAML parser

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    for section in sorted(set(data) - KNOWN):
        log.warning("%s: section %r is not supported by this SDK and is ignored", path, section)
    for section in ("action_ledger", "task_ledger"):
        _install_schema(dict(data.get(section) or {}), section)
    cfg = LedgerConfig(data)
    if cfg.transition:
        for name in cfg.ledgered_tools():
            cfg.binding(name)  # side_effect_class present and valid
    return cfg
