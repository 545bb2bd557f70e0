"""``/metrics``: what the hub's engines, model calls and runner jobs cost over the last ``days``, as
charts drawn on the server (``mycelium.web.charts``) from ``GET /api/observability/usage``'s reads."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Request, get
from litestar.response import Template

from mycelium.api.deps import Annotated, Query, VerbsDep
from mycelium.api.observability import usage_of
from mycelium.web.charts import bars
from mycelium.web.pages import page


@get("/metrics")
async def metrics(request: Request[Any, Any, Any], verbs: VerbsDep,
                  days: Annotated[int, Query(ge=1, le=365)] = 30) -> Template:
    since = datetime.now(UTC) - timedelta(days=days)
    by_day, by_kind, by_model, by_engine, by_outcome = await asyncio.gather(
        *(usage_of(verbs, g, since, None) for g in ("day", "kind", "model", "engine_kind", "outcome")))

    def rows(summary: dict[str, Any], field: str, named: bool = False) -> list[tuple[str, float]]:
        return [(g.group or "(none)", float(getattr(g, field) or 0)) for g in summary["groups"]
                if g.group or not named]

    models = by_model["groups"]
    charts = [
        bars("Events per day", rows(by_day, "events")),
        bars("Events by kind", rows(by_kind, "events")),
        bars("Model calls by model", rows(by_model, "events", named=True)),
        bars("Tokens by model (in + out)",
             [(g.group, float((g.tokens_in or 0) + (g.tokens_out or 0))) for g in models if g.group]),
        bars("Median duration by engine kind", rows(by_engine, "p50_ms", named=True), "ms", 1),
        bars("Events by outcome", rows(by_outcome, "events")),
    ]
    return page("metrics.html", request, days=days, total=by_kind["total"], charts=charts,
                kinds=by_kind["groups"])


ROUTES = [metrics]
