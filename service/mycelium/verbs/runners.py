"""Runners and their jobs: the request models and the answers every transport shares (HTTP, the
CLI, the web app). The rules are the database's (sql/runners.sql)."""

from __future__ import annotations

import shlex
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

JobState = Literal["waiting", "queued", "running", "done", "failed", "skipped", "denied"]
JOB_STATES: tuple[str, ...] = ("waiting", "queued", "running", "done", "failed", "skipped", "denied")


class RunnerCreate(BaseModel):
    """A runner: ``command`` is the argv (a string is split as a shell would, and never run by one)."""

    model_config = ConfigDict(extra="forbid")
    handle: str = Field(min_length=1, max_length=200)
    command: list[str] = Field(max_length=200)
    cwd: str = Field(default="", max_length=4096)
    env: list[str] = Field(default_factory=list, max_length=200)
    max_concurrent: int = 1
    timeout_s: float = 600.0
    max_turns_per_room: int = 100
    max_attempts: int = 3
    approval: Literal["none", "required"] = "none"
    created_by: str = Field(min_length=1, max_length=200)

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"the command line cannot be split: {exc}") from None
        return value


class JobDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(min_length=1, max_length=200)


class RunnerRead(BaseModel):
    room: str
    handle: str
    command: list[str]
    cwd: str
    env: list[str]
    max_concurrent: int
    timeout_s: float
    max_turns_per_room: int
    max_attempts: int
    approval: str
    turns: int
    failures: int
    paused_reason: str | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    running: int = 0
    pending: int = 0


class JobRead(BaseModel):
    room: str
    id: int
    handle: str
    kind: str
    state: str
    reason: str | None
    attempt: int
    retry_of: int | None
    wake_position: int | None
    episode: str | None
    task: str | None
    not_before: datetime
    approved_by: str | None
    approved_at: datetime | None
    worker: str | None
    command: list[str] | None
    cwd: str | None
    pid: int | None
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    duration_ms: float | None
    created_at: datetime
    stdout_tail: str | None = None
    stderr_tail: str | None = None


def runner_read(row: Any) -> RunnerRead:
    got = dict(row)
    return RunnerRead(**{k: got[k] for k in RunnerRead.model_fields if k in got})


def job_read(row: Any) -> JobRead:
    got = dict(row)
    return JobRead(**{k: got[k] for k in JobRead.model_fields if k in got})
