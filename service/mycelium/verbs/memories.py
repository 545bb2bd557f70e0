"""Memories and skills: the request models and the answers every transport shares."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mycelium.errors import Refusal


class MemoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    value: dict[str, Any] | str
    tags: list[str] | None = None
    content_text: str | None = None
    embed: bool = True
    created_by: str = Field(min_length=1, max_length=200)
    base_version: int | None = Field(default=None, ge=0)
    meta: dict[str, Any] | None = None


class MemoryBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[MemoryCreate] = Field(min_length=1, max_length=100)


class MemoryRead(BaseModel):
    room_name: str
    key: str
    value: dict[str, Any]
    content_text: str | None
    tags: list[str]
    meta: dict[str, Any]
    episode: str
    version: int
    created_by: str
    updated_by: str
    created_at: datetime
    updated_at: datetime
    embedded: bool


class MemorySearch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=10_000)
    limit: int = Field(default=10, ge=1, le=100)
    tags_filter: list[str] | None = None
    min_similarity: float = Field(default=0.0, ge=0.0, le=1.0)


class SearchHit(BaseModel):
    memory: MemoryRead
    similarity: float | None


class SearchResults(BaseModel):
    results: list[SearchHit]
    total: int


class MemoryVersion(BaseModel):
    version: int
    op: str
    episode: str
    value: dict[str, Any] | None
    meta: dict[str, Any] | None
    tags: list[str] | None
    content_text: str | None
    written_by: str
    written_at: datetime


class MemoryHistory(BaseModel):
    room_name: str
    key: str
    versions: list[MemoryVersion]


def memory_read(row: Any) -> MemoryRead:
    return MemoryRead(
        room_name=row["room"], key=row["key"], value=row["value"], content_text=row["content_text"],
        tags=list(row["tags"]), meta=row["meta"], episode=row["episode"], version=row["version"],
        created_by=row["created_by"], updated_by=row["updated_by"], created_at=row["created_at"],
        updated_at=row["updated_at"], embedded=row["embedding"] is not None,
    )


def memory_history(room: str, key: str, rows: list[Any]) -> MemoryHistory:
    versions = [MemoryVersion(**{k: r[k] for k in MemoryVersion.model_fields}) for r in rows]
    return MemoryHistory(room_name=room, key=key, versions=versions)


def text_to_embed(item: MemoryCreate) -> str:
    """What a memory's vector is computed from: content_text, else its prose, else its fields."""
    if item.content_text is not None:
        return item.content_text
    if isinstance(item.value, str):
        return item.value
    text = item.value.get("text")
    if text is not None:
        return str(text)
    return yaml.safe_dump(item.value, sort_keys=False, allow_unicode=True)


def write_params(room: str, item: MemoryCreate, vector: Any) -> dict[str, Any]:
    """The parameters of ``write_memory`` for one item."""
    return {"room": room, "key": item.key, "value": item.value, "created_by": item.created_by,
            "tags": item.tags, "meta": item.meta, "content_text": item.content_text,
            "base_version": item.base_version, "embedding": vector, "embed": item.embed}


# -- skills: a skill-shaped view of the skills/ namespace ------------------------------------------

SKILL_NAME = r"^[a-z0-9][a-z0-9._-]*$"
SKILL_PREFIX = "skills/"


class SkillCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128, pattern=SKILL_NAME)
    description: str = Field(default="", max_length=512)
    body: str
    tags: list[str] | None = None
    created_by: str = Field(min_length=1, max_length=200)
    meta: dict[str, Any] | None = None


class SkillRead(BaseModel):
    name: str
    key: str
    description: str
    body: str
    tags: list[str]
    meta: dict[str, Any]
    episode: str
    version: int
    created_by: str
    updated_by: str
    created_at: datetime
    updated_at: datetime


class SkillList(BaseModel):
    skills: list[SkillRead]
    total: int


def skill_read(row: Any) -> SkillRead:
    meta = dict(row["meta"])
    description = meta.pop("description", "")
    return SkillRead(
        name=row["key"].removeprefix(SKILL_PREFIX), key=row["key"],
        description=description if isinstance(description, str) else str(description),
        body=row["body"], tags=list(row["tags"]), meta=meta, episode=row["episode"],
        version=row["version"], created_by=row["created_by"], updated_by=row["updated_by"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )


def skill_not_found(room: str, name: str) -> Refusal:
    return Refusal(404, "skill_not_found", f"no skill '{name}' in room '{room}'",
                   {"room": room, "name": name})


def skill_key(room: str, name: str) -> str:
    """The memory key of a skill; a name no skill can have is simply not found."""
    if len(name) > 128 or not re.fullmatch(SKILL_NAME, name):
        raise skill_not_found(room, name)
    return SKILL_PREFIX + name
