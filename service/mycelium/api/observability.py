"""``GET /api/observability/usage``: what the engines, their model calls and the runners' jobs cost,
grouped (``group_by``: kind, engine_kind, engine, model, outcome, day, hour) over the last ``days``
(or from ``since`` to ``until``), with the totals. Usage events name nobody (sql/usage.sql)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import get
from litestar.params import FromQuery

from mycelium.api.deps import VERBS, Annotated, Query, VerbsDep
from mycelium.verbs import NOBODY, Verbs
from mycelium.verbs.usage import UsageGroup, usage_group


async def usage_of(verbs: Verbs, group_by: str, since: datetime, until: datetime | None) -> dict[str, Any]:
    rows = await verbs.call(NOBODY, "usage_summary", group_by=group_by, since=since, until=until)
    groups = [usage_group(r) for r in rows]
    total = UsageGroup(
        group=None, events=sum(g.events for g in groups), failures=sum(g.failures for g in groups),
        tokens_in=_sum(g.tokens_in for g in groups), tokens_out=_sum(g.tokens_out for g in groups),
        duration_ms=_sum(g.duration_ms for g in groups), p50_ms=None, p95_ms=None)
    return {"group_by": group_by, "since": since, "until": until, "groups": groups, "total": total}


def _sum(values: Any) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


@get("/api/observability/usage", dependencies=VERBS)
async def usage(
    verbs: VerbsDep, group_by: FromQuery[str] = "kind", days: Annotated[float, Query(gt=0, le=3660)] = 30.0,
    since: FromQuery[datetime | None] = None, until: FromQuery[datetime | None] = None,
) -> dict[str, Any]:
    start = _aware(since) if since is not None else datetime.now(UTC) - timedelta(days=days)
    return await usage_of(verbs, group_by, start, _aware(until) if until is not None else None)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
