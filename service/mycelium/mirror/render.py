"""The upstream file format: YAML frontmatter between ``---`` lines, then the body."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

MANAGED = ("key", "created_by", "updated_by", "version", "tags", "created_at", "updated_at", "episode")


def _iso(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def is_prose(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"text"} and isinstance(value["text"], str)


def body_of(value: dict[str, Any]) -> str:
    """A memory's content as the body of its file: prose as it is, other content as YAML."""
    if is_prose(value):
        return str(value["text"])
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True)


def render_memory(row: Any) -> str:
    """One memory row as a markdown file."""
    front: dict[str, Any] = {
        "key": row["key"],
        "created_by": row["created_by"],
        "updated_by": row["updated_by"],
        "version": row["version"],
        "tags": list(row["tags"]),
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
        "episode": row["episode"],
    }
    for k, v in (row["meta"] or {}).items():
        if k not in front:
            front[k] = v
    body = body_of(row["value"])
    header = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return f"---\n{header}---\n{body}\n"


@dataclass(frozen=True)
class ParsedFile:
    frontmatter: dict[str, Any]
    body: str

    @property
    def meta(self) -> dict[str, Any]:
        """The unmanaged frontmatter: what a write may carry in ``meta``."""
        return {k: v for k, v in self.frontmatter.items() if k not in MANAGED}


class MalformedFile(ValueError):
    pass


def parse_file(text: str) -> ParsedFile:
    """Split a markdown file into frontmatter and body (a file without frontmatter is all body)."""
    if not text.startswith("---\n"):
        return ParsedFile({}, text[:-1] if text.endswith("\n") else text)
    end = text.find("\n---\n", 4)
    if end < 0:
        if text.rstrip().endswith("\n---"):
            end = text.rstrip().rfind("\n---")
        else:
            raise MalformedFile("frontmatter opened with --- is never closed")
    try:
        front = yaml.safe_load(text[4:end]) or {}
    except yaml.YAMLError as exc:
        raise MalformedFile(f"frontmatter is not valid YAML: {exc}") from exc
    if not isinstance(front, dict):
        raise MalformedFile("frontmatter is not a mapping")
    body = text[end + 5:]
    if body.endswith("\n"):
        body = body[:-1]
    return ParsedFile(front, body)
