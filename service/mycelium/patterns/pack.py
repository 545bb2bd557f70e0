"""Reading a pattern: ``pattern.yaml`` and the files it names, checked whole before anything is written.

A pattern is data, never code: ``yaml.safe_load`` into strict models (an unknown field is a problem),
every file it names a plain relative path inside its own folder, every protocol parsed by the
conductor's own flow parser. :func:`read_pattern` returns the pattern with its files' text, or raises
:class:`PatternProblems` listing every problem found, each naming where it is.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mycelium.engines.flows import FlowError, parse_protocol

#: A pattern's name: its folder's name.
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
#: The largest file a pattern may name (a memory's text).
MAX_FILE_BYTES = 1 << 20
SPEC = "pattern.yaml"


class PatternProblems(ValueError):
    """A pattern the hub cannot load: every problem, each a line naming where it is."""

    def __init__(self, name: str, problems: list[str]) -> None:
        super().__init__(f"pattern {name!r}: " + "; ".join(problems))
        self.name, self.problems = name, problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoomSpec(_Strict):
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    private: bool = False


class EngineSpec(_Strict):
    handle: str = Field(min_length=1, max_length=64)
    kind: str = Field(min_length=1, max_length=64)
    description: str | None = Field(default=None, max_length=2000)
    notes: str | None = None
    """A file: the engine's ``agents/<handle>/notes`` memory (a persona's character)."""


class MemorySpec(_Strict):
    key: str = Field(min_length=1, max_length=512)
    file: str | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> MemorySpec:
        if (self.file is None) == (self.text is None):
            raise ValueError("a memory has a file or a text (one of them)")
        return self


class ProtocolSpec(_Strict):
    name: str = Field(min_length=1, max_length=64)
    file: str


class RunnerSpec(_Strict):
    """A runner as ``POST …/runners`` takes it (unset: that API's default)."""

    handle: str = Field(min_length=1, max_length=64)
    command: list[str] | str
    cwd: str | None = None
    env: list[str] | None = None
    max_concurrent: int | None = None
    timeout_s: float | None = None
    max_turns_per_room: int | None = None
    max_attempts: int | None = None
    approval: Literal["none", "required"] | None = None


class TaskSpec(_Strict):
    title: str = Field(min_length=1, max_length=500)
    assignee: str | None = None


class SummonSpec(_Strict):
    engine: str = Field(min_length=1, max_length=64)
    text: str = Field(min_length=1, max_length=10000)


class PatternSpec(_Strict):
    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=4000)
    room: RoomSpec = RoomSpec()
    engines: list[EngineSpec] = Field(default_factory=list)
    memories: list[MemorySpec] = Field(default_factory=list)
    protocols: list[ProtocolSpec] = Field(default_factory=list)
    runners: list[RunnerSpec] = Field(default_factory=list)
    task: TaskSpec | None = None
    run: list[SummonSpec] = Field(default_factory=list)
    """What ``run`` posts: on the task (the conductor's coordinate) when there is one, else in the room."""


@dataclass(frozen=True)
class Pattern:
    name: str
    folder: Path
    spec: PatternSpec
    files: dict[str, str] = field(default_factory=dict)
    """The text of every file the pattern names, by its path in the folder."""
    digest: str = ""
    """SHA-256 of pattern.yaml and the files it names: what was loaded, recorded with the room."""
    source: str = "hub"
    """``hub`` (the pack shipped with the hub) or ``operator`` (``MYCELIUM_PATTERNS_DIR``)."""

    def text(self, path: str | None) -> str:
        return self.files[path] if path is not None else ""

    def summary(self) -> dict[str, Any]:
        s = self.spec
        return {"name": self.name, "title": s.title, "description": s.description, "source": self.source,
                "engines": [{"handle": e.handle, "kind": e.kind} for e in s.engines],
                "memories": [m.key for m in s.memories], "protocols": [p.name for p in s.protocols],
                "runners": [r.handle for r in s.runners], "task": s.task.title if s.task else None,
                "run": [r.model_dump() for r in s.run], "digest": self.digest}

    def detail(self) -> dict[str, Any]:
        return {**self.summary(), "spec": self.spec.model_dump(mode="json"), "files": sorted(self.files)}


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "pattern.yaml"


def _file_problem(folder: Path, rel: str) -> str | None:
    if not rel or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in rel.split("/")):
        return "is not a plain relative path in the pattern's folder"
    path = folder / rel
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return "is missing"
    if not resolved.is_relative_to(folder.resolve()):
        return "leads out of the pattern's folder"
    if not resolved.is_file():
        return "is not a file"
    if resolved.stat().st_size > MAX_FILE_BYTES:
        return f"is over {MAX_FILE_BYTES} bytes"
    return None


def read_pattern(folder: Path, source: str = "hub") -> Pattern:
    """The pattern in ``folder`` (its name is the folder's), or :class:`PatternProblems`."""
    name = folder.name
    spec_path = folder / SPEC
    if not NAME.match(name):
        raise PatternProblems(name, ["a pattern's folder is named in lowercase letters, digits and dashes"])
    try:
        raw_text = spec_path.read_text(encoding="utf-8")
        raw = yaml.safe_load(raw_text)
    except FileNotFoundError:
        raise PatternProblems(name, [f"{SPEC} is missing"]) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PatternProblems(name, [f"{SPEC} is not readable YAML ({str(exc).splitlines()[0]})"]) from None
    try:
        spec = PatternSpec.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise PatternProblems(name, [f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors()]) from None
    problems: list[str] = []
    named: list[tuple[str, str]] = [(f"engines[{i}].notes", e.notes) for i, e in enumerate(spec.engines)
                                    if e.notes is not None]
    named += [(f"memories[{i}].file", m.file) for i, m in enumerate(spec.memories) if m.file is not None]
    named += [(f"protocols[{i}].file", p.file) for i, p in enumerate(spec.protocols)]
    files: dict[str, str] = {}
    for where, rel in named:
        problem = _file_problem(folder, rel)
        if problem is None:
            try:
                files[rel] = (folder / rel).read_text(encoding="utf-8")
            except UnicodeDecodeError:
                problem = "is not UTF-8 text"
        if problem is not None:
            problems.append(f"{where}: file {rel!r} {problem}")
    for i, p in enumerate(spec.protocols):
        if p.file in files:
            try:
                parse_protocol(files[p.file], p.name)
            except FlowError as exc:
                problems.append(f"protocols[{i}] ({p.name}): {exc}")
    handles = [e.handle.lstrip("@").lower() for e in spec.engines]
    twice = sorted({h for h in handles if handles.count(h) > 1})
    problems += [f"engines: @{h} is named twice" for h in twice]
    keys = [m.key for m in spec.memories]
    problems += [f"memories: {k!r} is named twice" for k in sorted({k for k in keys if keys.count(k) > 1})]
    for i, s in enumerate(spec.run):
        if s.engine.lstrip("@").lower() not in handles:
            problems.append(f"run[{i}]: @{s.engine} is none of the pattern's engines")
    if problems:
        raise PatternProblems(name, problems)
    digest = hashlib.sha256(raw_text.encode())
    for rel in sorted(files):
        digest.update(b"\0" + rel.encode() + b"\0" + files[rel].encode())
    return Pattern(name, folder, spec, files, digest.hexdigest(), source)


#: The pack the hub ships (``mycelium/patterns/pack``).
SHIPPED = Path(__file__).parent / "pack"


def folders(operator: Path | None) -> dict[str, tuple[Path, str]]:
    """Every pattern folder by name, with where it comes from; the operator's win over the hub's."""
    found: dict[str, tuple[Path, str]] = {}
    for base, source in ((SHIPPED, "hub"), (operator, "operator")):
        if base is None or not base.is_dir():
            continue
        for sub in sorted(base.iterdir()):
            if sub.is_dir() and (sub / SPEC).is_file():
                found[sub.name] = (sub, source)
    return found
