"""Loading mirror files back: which files there are, which memory each one is, and what importing
it means against the memory's current version.

A file's key is its frontmatter ``key:``, else what its path says (:func:`mycelium.mirror.files.key_of`).
A file is *unchanged* when its body, tags and unmanaged frontmatter are the memory's current ones:
it is skipped, whatever version it was exported at, so importing a folder twice writes nothing the
second time. A *changed* file is written at the version it was exported from (its frontmatter
``version``): if the memory moved on since, it is refused as stale with the difference summarised.
A file for a memory that does not exist creates it (at "no memory here", so a concurrent create
refuses it rather than being overwritten).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from mycelium.mirror.files import decode_name, key_of
from mycelium.mirror.render import MalformedFile, ParsedFile, body_of, is_prose, parse_file


@dataclass(frozen=True)
class MirrorFile:
    room: str
    key: str
    path: Path
    parsed: ParsedFile

    @property
    def bare(self) -> bool:
        """A file with no frontmatter at all: only its body says anything."""
        return not self.parsed.frontmatter

    @property
    def tags(self) -> list[str] | None:
        tags = self.parsed.frontmatter.get("tags")
        return [str(t) for t in tags] if isinstance(tags, list) else None

    @property
    def version(self) -> int | None:
        version = self.parsed.frontmatter.get("version")
        return version if isinstance(version, int) and not isinstance(version, bool) else None


def _visible(path: Path, below: Path) -> bool:
    """Not inside a dot-folder (``.git``) nor a dot-file (a write's temporary file)."""
    return not any(part.startswith(".") for part in path.relative_to(below).parts)


def collect(folder: Path, room: str | None) -> tuple[list[MirrorFile], list[str]]:
    """Every markdown file below ``folder`` (a folder of room folders, or ``room``'s folder) and the
    problems of those that cannot be imported."""
    problems: list[str] = []
    if room is not None:
        roots = [(room, folder)]
    else:
        roots = []
        for d in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            name = decode_name(d.name)
            if name is None:
                problems.append(f"{d.name}/: the folder name does not say which room it is "
                                "(import it alone with --room NAME)")
            else:
                roots.append((name, d))
    found: list[MirrorFile] = []
    seen: dict[tuple[str, str], Path] = {}
    for room_name, root in roots:
        for path in sorted(p for p in root.rglob("*.md") if _visible(p, root)):
            where = f"{room_name}/{path.relative_to(root).as_posix()}"
            try:
                parsed = parse_file(path.read_text(encoding="utf-8"))
            except (MalformedFile, UnicodeDecodeError) as exc:
                problems.append(f"{where}: {exc}")
                continue
            key = parsed.frontmatter.get("key")
            key = str(key) if isinstance(key, str | int) and not isinstance(key, bool) else None
            key = key or key_of(path.relative_to(root))
            if key is None:
                problems.append(f"{where}: no key: neither its frontmatter nor its file name says it")
                continue
            if (room_name, key) in seen:
                problems.append(f"{where}: key {key!r} is also {seen[room_name, key].name}")
                continue
            seen[room_name, key] = path
            found.append(MirrorFile(room_name, key, path, parsed))
    return found, problems


Verdict = Literal["unchanged", "create", "change", "refuse"]


@dataclass(frozen=True)
class Plan:
    verdict: Verdict
    item: dict[str, Any] | None = None
    """The memory write to send (create, change)."""
    reason: str = ""
    """Why a file is refused."""


def json_safe(fields: dict[str, Any]) -> dict[str, Any]:
    """Frontmatter as JSON holds it (a date YAML read stays the text it was written as)."""
    return json.loads(json.dumps(fields, default=str))


def _value(file: MirrorFile, current: dict[str, Any] | None) -> dict[str, Any] | str:
    """The body as the memory's content: fields again if the memory holds fields and the body
    still reads as them, else prose."""
    if current is not None and not is_prose(current["value"]):
        try:
            fields = yaml.safe_load(file.parsed.body)
        except yaml.YAMLError:
            fields = None
        if isinstance(fields, dict):
            return fields
    return file.parsed.body


def differences(file: MirrorFile, current: dict[str, Any]) -> list[str]:
    """What differs between a file and the memory's current version, in a few words each."""
    out: list[str] = []
    if body_of(current["value"]) != file.parsed.body:
        old, new = body_of(current["value"]).splitlines(), file.parsed.body.splitlines()
        diff = list(difflib.unified_diff(old, new, lineterm="", n=0))
        added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
        removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
        out.append(f"body +{added} -{removed} lines" if added or removed else "body whitespace")
    if not file.bare:
        if file.tags is not None and file.tags != list(current["tags"]):
            out.append(f"tags {list(current['tags'])} -> {file.tags}")
        meta, mine = current["meta"] or {}, json_safe(file.parsed.meta)
        changed = sorted(k for k in set(meta) | set(mine) if meta.get(k) != mine.get(k))
        if changed:
            out.append("frontmatter " + ", ".join(changed))
    return out


def plan(file: MirrorFile, current: dict[str, Any] | None, by: str, force: bool) -> Plan:
    """What importing ``file`` does, given the memory's current version (None: there is none)."""
    item: dict[str, Any] = {"key": file.key, "value": _value(file, current), "created_by": by}
    if not file.bare:
        item["meta"] = json_safe(file.parsed.meta)
        if file.tags is not None:
            item["tags"] = file.tags
    if current is None:
        if not force:
            item["base_version"] = 0
        return Plan("create", item)
    diff = differences(file, current)
    if not diff:
        return Plan("unchanged")
    if "meta" in item:  # a field taken out of the file is taken off the memory
        item["meta"].update({k: None for k in (current["meta"] or {}) if k not in item["meta"]})
    if not force:
        if file.version is None:
            return Plan("refuse", reason=f"the file has no version and the hub is at v{current['version']}, "
                                         f"differing in {'; '.join(diff)} (--force overwrites)")
        if file.version != current["version"]:
            return Plan("refuse", reason=(
                f"stale: the file is from v{file.version}, the hub is at v{current['version']} "
                f"(by {current['updated_by']}); it differs in {'; '.join(diff)} (--force overwrites)"))
        item["base_version"] = file.version
    return Plan("change", item)
