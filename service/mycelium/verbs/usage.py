"""Usage events: the model seam's recorder, and the summary every transport shares. The rules (what
an event may hold, how it is grouped) are the database's (sql/usage.sql)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mycelium.engines.models import Record
from mycelium.verbs import HUB_PROCESS, Verbs

GROUPS = ("kind", "engine_kind", "engine", "model", "outcome", "day", "hour")


class UsageGroup(BaseModel):
    group: str | None
    events: int
    failures: int
    tokens_in: int | None
    tokens_out: int | None
    duration_ms: float | None
    p50_ms: float | None
    p95_ms: float | None


def usage_group(row: Any) -> UsageGroup:
    got = dict(row)
    return UsageGroup(group=got.pop("grp"), **got)


def recorder(verbs: Verbs) -> Record:
    """What :class:`mycelium.engines.models.Metered` calls: one ``model_call`` event per call."""

    async def record(call: dict[str, Any]) -> None:
        await verbs.call(HUB_PROCESS, "record_usage", kind="model_call", engine_kind=None, attrs={}, **call)

    return record
