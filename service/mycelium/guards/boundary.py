"""``@bounded`` / ``bounded_sync``: check a tool's arguments, scope and result at its boundary.

Schemas are plain dicts of field specs: ``{"customer_id": {"type": "string", "required": True,
"pattern": r"^c\\d+$", "min_length": 2, "max_length": 32}}``. ``type`` is one of string, integer,
number, boolean (an integer is a number; a bool is neither), and, as later upstream releases,
array (with ``items``: the spec of each element) and object; ``pattern`` is searched in the text
(anchor it with ``^…$``); the lengths apply to strings and arrays. A required field that is absent
or null is refused. Fields not in the schema are not checked, but a keyword argument the function
does not take is refused (``unexpected_kwarg``) instead of reaching it as a TypeError.

Paths are resolved before the ``allowed_paths`` check (``..`` and symbolic links cannot leave an
allowed folder; a symlink loop is refused).

Order: input schema, then scope (``entity_pattern`` on ``entity_param``, ``allowed_paths`` on
``path_param``), then the tool, then ``output_schema`` on its result. A failure raises
:class:`ToolBoundaryError` whose ``llm_message`` tells the model what was wrong and how to call
again; the tool body does not run for an input or scope failure, and an invalid result is not
returned. Nothing is retried here (see ``ToolRunner``).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (Mapping,),
}
SPEC_KEYS = frozenset({"type", "required", "pattern", "min_length", "max_length", "items", "description"})
# Keyword arguments the ledger reads: passed through, never refused as unexpected.
BOOKKEEPING = frozenset({"request_id", "tool_call_id", "thread_id", "run_id", "node", "state_ref",
                         "decision_id", "parent_request_id", "handoff_id", "runtime"})
OUTPUT_VIOLATION = "output_validation_failed"


class ToolBoundaryError(Exception):
    """A tool call or result outside its boundary; ``llm_message`` is written for the model."""

    def __init__(
        self,
        message: str,
        *,
        violation: str,
        tool_name: str,
        llm_message: str,
        field: str | None = None,
        expected: str | None = None,
        actual: str | None = None,
        recovery_hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.violation = violation
        self.tool_name = tool_name
        self.llm_message = llm_message
        self.field = field
        self.expected = expected
        self.actual = actual
        self.recovery_hint = recovery_hint


class ToolBoundaryExhaustedError(Exception):
    """The retries are used up; ``last_error`` is the final :class:`ToolBoundaryError`."""

    def __init__(self, message: str, *, last_error: ToolBoundaryError) -> None:
        super().__init__(message)
        self.last_error = last_error


def tool_error_message(tool_call_id: str, llm_message: str) -> dict[str, str]:
    """The tool-result message that tells the model why its call was refused."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": llm_message}


def _shown(value: Any) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(tool: str, violation: str, phase: str, field: str | None, expected: str | None, actual: Any,
           hint: str, *, has_actual: bool = True) -> ToolBoundaryError:
    head = {"input": "failed input validation", "scope": "failed scope validation",
            "output": "returned invalid output"}[phase]
    parts = [f"Tool {tool!r} {head}."]
    if field:
        parts.append(f"Field: {field}.")
    if has_actual:
        parts.append(f"Received: {_shown(actual)}.")
    if expected:
        parts.append(f"Expected: {expected}.")
    parts.append(hint)
    return ToolBoundaryError(
        f"{tool}: {violation}" + (f" on {field}" if field else ""),
        violation=violation, tool_name=tool, llm_message=" ".join(parts), field=field,
        expected=expected, actual=_shown(actual) if has_actual else None, recovery_hint=hint,
    )


@dataclass(frozen=True)
class FieldCheck:
    name: str
    types: tuple[type, ...] | None
    type_name: str
    required: bool
    pattern: re.Pattern[str] | None
    min_length: int | None
    max_length: int | None
    items: FieldCheck | None = None

    def problem(self, present: bool, value: Any) -> tuple[str, str] | None:
        """(violation, expected) or None when the value passes."""
        if not present:
            return ("missing_required_field", "a value for this field") if self.required else None
        if value is None:
            return ("type_mismatch", f"{self.type_name}, not null") if self.required else None
        if self.types is not None and (
            not isinstance(value, self.types) or (isinstance(value, bool) and self.type_name != "boolean")
        ):
            return "type_mismatch", self.type_name
        if isinstance(value, (str, list, tuple)):
            unit = "characters" if isinstance(value, str) else "items"
            if isinstance(value, str) and self.pattern is not None and self.pattern.search(value) is None:
                return "pattern_mismatch", f"string matching pattern {self.pattern.pattern!r}"
            if self.min_length is not None and len(value) < self.min_length:
                return "too_short", f"at least {self.min_length} {unit}"
            if self.max_length is not None and len(value) > self.max_length:
                return "too_long", f"at most {self.max_length} {unit}"
            if self.items is not None and not isinstance(value, str):
                for element in value:
                    found = self.items.problem(True, element)
                    if found is not None:
                        return found[0], f"an array of {found[1]}"
        return None


def compile_schema(schema: Mapping[str, Any] | None, where: str) -> tuple[FieldCheck, ...]:
    """Field specs -> checks; a wrong spec is a ValueError naming the field and key."""
    if schema is None:
        return ()
    if not isinstance(schema, Mapping):
        raise ValueError(f"{where}: a schema is a mapping of field name -> field spec, got {schema!r}")
    return tuple(compile_field(str(name), spec, f"{where}.{name}") for name, spec in schema.items())


def compile_field(name: str, spec: Any, where: str) -> FieldCheck:
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: a field spec is a mapping (type, required, pattern, ...)")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown field spec key(s) {', '.join(sorted(unknown))}")
    type_name = spec.get("type")
    if type_name is not None and type_name not in TYPES:
        raise ValueError(f"{where}.type: unknown type {type_name!r} (one of {', '.join(TYPES)})")
    for key in ("min_length", "max_length"):
        if spec.get(key) is not None and (isinstance(spec[key], bool) or not isinstance(spec[key], int)):
            raise ValueError(f"{where}.{key} must be an integer")
    if spec.get("items") is not None and type_name != "array":
        raise ValueError(f"{where}.items applies to type: array")
    try:
        pattern = re.compile(spec["pattern"]) if spec.get("pattern") is not None else None
    except (re.error, TypeError) as exc:
        raise ValueError(f"{where}.pattern: {exc}") from exc
    items = compile_field(name, spec["items"], f"{where}.items") if spec.get("items") is not None else None
    return FieldCheck(
        name, TYPES[type_name] if type_name else None, str(type_name or "any"),
        bool(spec.get("required", False)), pattern, spec.get("min_length"), spec.get("max_length"), items,
    )


def _resolved(path: str) -> str | None:
    """The absolute path with ``..`` and symbolic links resolved; None for a symlink loop."""
    try:
        return str(Path(path).resolve(strict=False))
    except (RuntimeError, OSError):
        return None


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the resolved path is one of the resolved prefixes or inside one."""
    real = _resolved(path)
    if real is None:
        return False
    for prefix in prefixes:
        root = _resolved(prefix)
        if root is not None and (real == root or real.startswith(root.rstrip(os.sep) + os.sep)):
            return True
    return False


@dataclass(frozen=True)
class BoundedConfig:
    input_checks: tuple[FieldCheck, ...]
    output_checks: tuple[FieldCheck, ...] | None
    entity_param: str | None
    entity_pattern: re.Pattern[str] | None
    allowed_paths: tuple[str, ...] | None
    path_param: str
    schema: Mapping[str, Any] | None = None
    output_schema: Mapping[str, Any] | None = None


def make_config(
    schema: Mapping[str, Any] | None,
    output_schema: Mapping[str, Any] | None,
    entity_param: str | None,
    entity_pattern: str | None,
    allowed_paths: list[str] | None,
    path_param: str,
) -> BoundedConfig:
    if entity_pattern is not None and entity_param is None:
        raise ValueError("entity_pattern needs entity_param (the argument it applies to)")
    if isinstance(allowed_paths, str):
        raise ValueError("allowed_paths is a list of path prefixes, not one string")
    try:
        pattern = re.compile(entity_pattern) if entity_pattern is not None else None
    except re.error as exc:
        raise ValueError(f"entity_pattern: {exc}") from exc
    return BoundedConfig(
        compile_schema(schema, "schema"),
        compile_schema(output_schema, "output_schema") if output_schema is not None else None,
        entity_param, pattern, tuple(str(p) for p in allowed_paths) if allowed_paths else None, path_param,
        schema, output_schema,
    )


class _Checker:
    """The per-call checks for one decorated function (argument positions resolved once)."""

    def __init__(self, fn: Callable[..., Any], config: BoundedConfig) -> None:
        self.tool = fn.__name__
        self.config = config
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            params = []  # type: ignore[assignment]
        self.positions = {p.name: i for i, p in enumerate(params)
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)}
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}
        open_kwargs = not params or any(p.kind is p.VAR_KEYWORD for p in params)
        self.accepted = None if open_kwargs else (
            frozenset(p.name for p in params if p.kind is not p.POSITIONAL_ONLY) | BOOKKEEPING)

    def _arg(self, name: str, args: tuple, kwargs: dict) -> tuple[bool, Any]:
        if name in kwargs:
            return True, kwargs[name]
        pos = self.positions.get(name)
        if pos is not None and pos < len(args):
            return True, args[pos]
        if name in self.defaults:
            return True, self.defaults[name]
        return False, None

    def before(self, args: tuple, kwargs: dict) -> None:
        c = self.config
        if self.accepted is not None:
            for key in kwargs:
                if key not in self.accepted:
                    raise _error(self.tool, "unexpected_kwarg", "input", key, None, kwargs[key],
                                 f"{self.tool} takes no argument {key!r}; call it with its own arguments.")
        for check in c.input_checks:
            present, value = self._arg(check.name, args, kwargs)
            found = check.problem(present, value)
            if found is not None:
                violation, expected = found
                raise _error(self.tool, violation, "input", check.name, expected, value,
                             f"Call {self.tool} again with a valid {check.name}.", has_actual=present)
        if c.entity_pattern is not None and c.entity_param is not None:
            present, value = self._arg(c.entity_param, args, kwargs)
            if present and value is not None and c.entity_pattern.fullmatch(str(value)) is None:
                raise _error(self.tool, "scope_entity_pattern", "scope", c.entity_param,
                             f"an id matching {c.entity_pattern.pattern!r}", value,
                             f"Call {self.tool} with a {c.entity_param} in that format.")
        if c.allowed_paths is not None:
            present, value = self._arg(c.path_param, args, kwargs)
            if present and value is not None and not _under(str(value), c.allowed_paths):
                allowed = ", ".join(c.allowed_paths)
                raise _error(self.tool, "scope_path", "scope", c.path_param,
                             f"a path under one of [{allowed}]", value,
                             f"Retry with a path under one of: {allowed}.")

    def after(self, result: Any) -> None:
        checks = self.config.output_checks
        if checks is None:
            return
        data = result.model_dump() if hasattr(result, "model_dump") else result
        if not isinstance(data, Mapping):
            raise _error(self.tool, OUTPUT_VIOLATION, "output", None, "an object with fields "
                         f"{', '.join(c.name for c in checks)}", result,
                         f"The tool {self.tool} will be retried; its result was discarded.")
        for check in checks:
            present = check.name in data
            value = data.get(check.name)
            found = check.problem(present, value)
            if found is not None:
                raise _error(self.tool, OUTPUT_VIOLATION, "output", check.name, found[1], value,
                             f"The tool {self.tool} will be retried; its result was discarded.",
                             has_actual=present)


def _mark(wrapper: Callable[..., Any], config: BoundedConfig) -> None:
    wrapper._mycelium_bounded = True  # type: ignore[attr-defined]
    wrapper._mycelium_bounded_config = config  # type: ignore[attr-defined]


def get_bounded_config(fn: Callable[..., Any]) -> BoundedConfig | None:
    return getattr(fn, "_mycelium_bounded_config", None)


def bounded(
    schema: Mapping[str, Any] | None = None,
    *,
    output_schema: Mapping[str, Any] | None = None,
    entity_param: str | None = None,
    entity_pattern: str | None = None,
    allowed_paths: list[str] | None = None,
    path_param: str = "path",
) -> Callable[[F], F]:
    """Check an async tool's input, scope and output (see the module docstring)."""
    config = make_config(schema, output_schema, entity_param, entity_pattern, allowed_paths, path_param)

    def decorate(fn: F) -> F:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@bounded wraps async functions; use @bounded_sync for {fn.__name__}")
        checker = _Checker(fn, config)

        @functools.wraps(fn)
        async def checked(*args: Any, **kwargs: Any) -> Any:
            checker.before(args, kwargs)
            result = await fn(*args, **kwargs)
            checker.after(result)
            return result

        _mark(checked, config)
        return checked  # type: ignore[return-value]

    return decorate


def bounded_sync(
    schema: Mapping[str, Any] | None = None,
    *,
    output_schema: Mapping[str, Any] | None = None,
    entity_param: str | None = None,
    entity_pattern: str | None = None,
    allowed_paths: list[str] | None = None,
    path_param: str = "path",
) -> Callable[[F], F]:
    """Check a synchronous tool's input, scope and output (same options as :func:`bounded`)."""
    config = make_config(schema, output_schema, entity_param, entity_pattern, allowed_paths, path_param)

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"bounded_sync wraps plain functions; use @bounded for async {fn.__name__}")
        checker = _Checker(fn, config)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            checker.before(args, kwargs)
            result = fn(*args, **kwargs)
            checker.after(result)
            return result

        _mark(checked, config)
        return checked  # type: ignore[return-value]

    return decorate
