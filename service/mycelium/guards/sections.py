"""The guard sections of mycelium.yaml, checked when the file loads and built on first use.

==================== ===================================================================================
section              keys
==================== ===================================================================================
``registry``         ``auto`` (true: every tool under ``tools:``), ``allowed`` (names); or ``registry: auto``
``runner``           ``max_llm_retries`` (2), ``max_tool_retries`` (3)
``history_guard``    ``max_tokens``, ``max_messages``, ``warn_at``, ``detect_duplicates``, ``track_keywords``,
                     ``tokenizer`` (auto / estimate)
``message_validator`` ``enabled`` (true), ``mode`` (repair / validate), ``strict_roles``, ``check_indices``,
                     ``check_parsed``; or ``message_validator: true``
``state_flush``      ``storage`` (memory / file), ``path`` (file), ``flush_on`` (cancel, disconnect, error),
                     ``flush_on_complete`` (true)
``integrations``     ``langgraph: {enabled: true}`` (or ``langgraph: true``)
tool ``protect:``    ``entity_param``, ``ttl``
tool ``bounded:``    ``schema``, ``output_schema``, ``entity_param``, ``entity_pattern``, ``allowed_paths``,
                     ``path_param``
==================== ===================================================================================

An unknown key or a wrong value raises :class:`SectionError` naming it.
"""

from __future__ import annotations

from typing import Any

SECTION_KEYS: dict[str, frozenset[str]] = {
    "registry": frozenset({"auto", "allowed"}),
    "runner": frozenset({"max_llm_retries", "max_tool_retries"}),
    "history_guard": frozenset({"max_tokens", "max_messages", "warn_at", "detect_duplicates",
                                "track_keywords", "tokenizer"}),
    "message_validator": frozenset({"enabled", "mode", "strict_roles", "check_indices", "check_parsed"}),
    "state_flush": frozenset({"storage", "path", "flush_on", "flush_on_complete"}),
    "integrations": frozenset({"langgraph"}),
}
PROTECT_KEYS = frozenset({"entity_param", "ttl"})
BOUNDED_KEYS = frozenset({"schema", "output_schema", "entity_param", "entity_pattern", "allowed_paths",
                          "path_param"})


class SectionError(ValueError):
    """A guard section is wrong; the message names the key."""


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SectionError(f"{where} must be a mapping, got {value!r}")
    return value


def _keys(value: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = set(value) - allowed
    if unknown:
        raise SectionError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                           f"(known: {', '.join(sorted(allowed))})")


def _bool(section: dict[str, Any], key: str, where: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise SectionError(f"{where}.{key} must be true or false, got {value!r}")
    return value


def normalise(name: str, raw: Any) -> dict[str, Any]:
    """A section in its mapping form (``registry: auto``, ``message_validator: true`` expanded)."""
    if name == "registry" and raw == "auto":
        raw = {"auto": True}
    if name == "message_validator" and isinstance(raw, bool):
        raw = {"enabled": raw}
    section = _mapping(raw, name)
    _keys(section, SECTION_KEYS[name], name)
    return section


def check(data: dict[str, Any]) -> None:
    """Build every configured guard once, so a wrong section fails when the file loads."""
    for name in SECTION_KEYS:
        if name in data:
            normalise(name, data[name])
    registry_allowed(data)
    if "runner" in data:
        runner_settings(data)
    if "history_guard" in data:
        history_guard(data)
    if "message_validator" in data:
        message_validator(data)
    if "state_flush" in data:
        state_flush(data)
    langgraph_enabled(data)
    for tool, spec in (data.get("tools") or {}).items():
        spec = spec or {}
        if "protect" in spec:
            protect_options(str(tool), spec["protect"])
        if "bounded" in spec:
            bounded_options(str(tool), spec["bounded"])


def registry_allowed(data: dict[str, Any]) -> list[str] | None:
    """The allow-list, or None when no ``registry`` section is configured."""
    if "registry" not in data:
        return None
    section = normalise("registry", data["registry"])
    allowed = section.get("allowed") or []
    if not isinstance(allowed, list) or not all(isinstance(n, str) for n in allowed):
        raise SectionError(f"registry.allowed must be a list of tool names, got {allowed!r}")
    names = list(allowed)
    if _bool(section, "auto", "registry", False):
        names += [str(n) for n in (data.get("tools") or {}) if n not in names]
    return names


def runner_settings(data: dict[str, Any]) -> dict[str, int]:
    section = normalise("runner", data.get("runner"))
    out = {}
    for key, low in (("max_llm_retries", 0), ("max_tool_retries", 1)):
        if key in section:
            value = section[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SectionError(f"runner.{key} must be an integer >= {low}, got {value!r}")
            out[key] = value
    return out


def history_guard(data: dict[str, Any]) -> Any:
    from mycelium.guards.history import HistoryGuard

    section = normalise("history_guard", data.get("history_guard"))
    if section.get("tokenizer", "auto") not in ("auto", "estimate"):
        raise SectionError(f"history_guard.tokenizer must be auto or estimate, got {section['tokenizer']!r}")
    keywords = section.get("track_keywords")
    if keywords is not None and not (
        isinstance(keywords, list) and all(isinstance(k, str) for k in keywords)
    ):
        raise SectionError("history_guard.track_keywords must be a list of words")
    try:
        return HistoryGuard(**section)
    except (TypeError, ValueError) as exc:
        raise SectionError(f"history_guard: {exc}") from exc


def message_validator(data: dict[str, Any]) -> tuple[Any, str] | None:
    """(validator, "repair" | "validate"), or None when it is not enabled."""
    from mycelium.guards.messages import MessageValidator

    section = normalise("message_validator", data.get("message_validator"))
    if not _bool(section, "enabled", "message_validator", True):
        return None
    mode = section.get("mode", "repair")
    if mode not in ("repair", "validate"):
        raise SectionError(f"message_validator.mode must be repair or validate, got {mode!r}")
    options = {k: _bool(section, k, "message_validator", True)
               for k in ("strict_roles", "check_indices", "check_parsed")}
    return MessageValidator(**options), mode


def state_flush(data: dict[str, Any]) -> Any:
    from mycelium.guards.state_flush import FileStateFlushStorage, InMemoryStateFlushStorage, StateFlush

    section = normalise("state_flush", data.get("state_flush"))
    kind = section.get("storage", "memory")
    if kind == "memory":
        storage: Any = InMemoryStateFlushStorage()
    elif kind == "file":
        if not section.get("path"):
            raise SectionError("state_flush.path is required with storage: file")
        storage = FileStateFlushStorage(str(section["path"]))
    else:
        raise SectionError(f"state_flush.storage must be memory or file, got {kind!r}")
    flush_on = section.get("flush_on")
    if flush_on is not None and not isinstance(flush_on, list):
        raise SectionError("state_flush.flush_on must be a list (cancel, disconnect, error)")
    try:
        return StateFlush(storage, flush_on=flush_on,
                          flush_on_complete=_bool(section, "flush_on_complete", "state_flush", True))
    except ValueError as exc:
        raise SectionError(f"state_flush.{exc}") from exc


def langgraph_enabled(data: dict[str, Any]) -> bool:
    section = normalise("integrations", data.get("integrations"))
    raw = section.get("langgraph")
    if isinstance(raw, bool):  # ``langgraph: true``, upstream's shorthand for ``{enabled: true}``
        return raw
    if raw is not None and not isinstance(raw, dict):
        raise SectionError("integrations.langgraph must be a mapping ({enabled: true}) or true/false, "
                           f"got {raw!r}")
    lg = _mapping(raw, "integrations.langgraph")
    _keys(lg, frozenset({"enabled"}), "integrations.langgraph")
    return _bool(lg, "enabled", "integrations.langgraph", False)


def protect_options(tool: str, raw: Any) -> dict[str, Any]:
    where = f"tools.{tool}.protect"
    options = _mapping(raw, where)
    _keys(options, PROTECT_KEYS, where)
    from mycelium.guards.protect import _check

    try:
        _check(options.get("entity_param"), options.get("ttl", 300.0))
    except (TypeError, ValueError) as exc:
        raise SectionError(f"{where}: {exc}") from exc
    return options


def bounded_options(tool: str, raw: Any) -> dict[str, Any]:
    where = f"tools.{tool}.bounded"
    options = _mapping(raw, where)
    _keys(options, BOUNDED_KEYS, where)
    from mycelium.guards.boundary import make_config

    try:
        make_config(options.get("schema"), options.get("output_schema"), options.get("entity_param"),
                    options.get("entity_pattern"), options.get("allowed_paths"),
                    options.get("path_param", "path"))
    except ValueError as exc:
        raise SectionError(f"{where}: {exc}") from exc
    return options
