"""Engines, the room's agents and episodes: the request models and the answers every transport
shares (HTTP and the CLI)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mycelium.contracts import vocabulary
from mycelium.verbs.messages import MessageRead, message_read

#: what an engine may be (contracts/vocabulary.json, which the database's create_engine reads too)
ENGINE_KINDS: tuple[str, ...] = tuple(vocabulary()["engine_kinds"])
EngineKind = Literal[ENGINE_KINDS]  # type: ignore[valid-type]


class EngineCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: str = Field(min_length=1, max_length=200)
    kind: EngineKind = "conductor"
    description: str = Field(default="", max_length=4000)
    created_by: str = Field(min_length=1, max_length=200)


class EngineInvoke(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=100_000)
    sender_handle: str = Field(min_length=1, max_length=200)
    episode: str | None = Field(default=None, max_length=500)


class Coordinate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=512)
    engine: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=100_000)
    sender_handle: str = Field(min_length=1, max_length=200)


class AgentRead(BaseModel):
    handle: str
    kind: str
    adapter: str
    description: str
    present: bool
    seen_at: datetime | None
    created_by: str | None
    created_at: datetime | None


def agent_read(row: Any) -> AgentRead:
    return AgentRead(**{k: row[k] for k in AgentRead.model_fields})


def engine_read(row: Any) -> AgentRead:
    return AgentRead(
        handle=row["handle"],
        kind=row["kind"],
        adapter="engine",
        description=row["description"],
        present=True,
        seen_at=None,
        created_by=row["created_by"],
        created_at=row["created_at"],
    )


class EpisodeSummaryRead(BaseModel):
    short_id: str
    episode: str
    topic: str
    outcome: str
    subkind: str | None
    participants: list[str]
    metrics: dict[str, Any] | None
    assignments: dict[str, Any]
    tasks: list[str]
    message_count: int
    updated_at: datetime
    updated_by: str
    within: str
    flow: dict[str, Any]
    trace: list[dict[str, Any]]
    current_step: str | None
    reason: str | None


class EpisodeDetailRead(EpisodeSummaryRead):
    messages: list[MessageRead]


class EpisodeListResponse(BaseModel):
    episodes: list[EpisodeSummaryRead]


def episode_metrics(row: Any) -> dict[str, Any] | None:
    """MPC, GAR, SCR and provenance weight (computed by the database: mycelium.episode_quality) and
    what the run recorded (min_satisfaction of a convergence); None when there is neither."""
    quality, recorded = row["quality"] or {}, row["metrics"] or {}
    return {**quality, **recorded} if quality or recorded else None


def episode_summary(row: Any, message_count: int | None = None) -> EpisodeSummaryRead:
    flow = row["flow"] or {}
    protocol = flow.get("protocol", {})
    pending = row["pending"] or {}
    chosen = next((o for o in pending.get("options", []) if o.get("label") == pending.get("pick")), None)
    return EpisodeSummaryRead(
        short_id=row["short_id"],
        episode=row["episode"],
        topic=row["topic"],
        outcome=row["outcome"],
        subkind=row["subkind"],
        participants=list(flow.get("cast", [])),
        metrics=episode_metrics(row),
        assignments=row["assignments"]
        or ({"decision": chosen["text"]} if chosen and row["outcome"] == "converged" else {}),
        tasks=list(row.get("tasks") or []),
        message_count=message_count if message_count is not None else row["post_count"],
        updated_at=row["updated_at"],
        updated_by=row["engine"],
        within=row["within"],
        flow={
            "name": protocol.get("name"),
            "description": protocol.get("description"),
            "roles": protocol.get("roles", []),
            "steps": protocol.get("steps", []),
            "bound": flow.get("bound", {}),
            "cast": flow.get("cast", []),
            "ask": flow.get("ask"),
        },
        trace=list(row["trace"]),
        current_step=row["current_step"],
        reason=row["reason"],
    )


def episode_detail(row: Any, messages: list[Any]) -> EpisodeDetailRead:
    summary = episode_summary(row, len(messages))
    return EpisodeDetailRead(**summary.model_dump(), messages=[message_read(m) for m in messages])
