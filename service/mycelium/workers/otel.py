"""The ``otel`` loop: usage events sent to an OpenTelemetry collector as OTLP/HTTP (JSON) log records.

It runs when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_LOGS_ENDPOINT``) is set, in one process of the
deployment at a time (its lock). It reads the events after the mark it keeps in the database
(``mycelium.usage_exports``), posts them in batches to ``<endpoint>/v1/logs`` and moves the mark only
once the collector has answered 2xx: a collector that is down is tried again (the loop's backoff)
from the same place, and a process killed between a post and its mark resends that batch, never
skips one. A record carries the event's fields and nothing else (usage events name nobody).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx

from mycelium.settings import Settings
from mycelium.verbs import HUB_PROCESS
from mycelium.workers.loop import Loop, LoopContext

log = logging.getLogger("mycelium.otel")

EXPORTER = "otlp"
BATCH = 500
IDLE_SECONDS = 2.0
#: OTLP severity number of INFO.
INFO = 9


def logs_url(settings: Settings) -> str | None:
    """Where log records go: the logs endpoint as given, else ``<endpoint>/v1/logs``."""
    if settings.otel_logs_endpoint:
        return settings.otel_logs_endpoint
    if settings.otel_endpoint:
        return settings.otel_endpoint.rstrip("/") + "/v1/logs"
    return None


def headers_of(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` (OTEL_EXPORTER_OTLP_HEADERS) as headers; a pair without ``=`` is left out."""
    pairs = (p.split("=", 1) for p in (text or "").split(",") if "=" in p)
    return {k.strip(): v.strip() for k, v in pairs if k.strip()}


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def _nanos(moment: datetime) -> str:
    return str(int(moment.timestamp() * 1_000_000_000))


def record(event: Mapping[str, Any]) -> dict[str, Any]:
    """One usage event as an OTLP log record (GenAI semantic names where there is one)."""
    fields = {
        "mycelium.usage.id": event["id"], "mycelium.usage.kind": event["kind"],
        "mycelium.engine": event["engine"], "mycelium.engine_kind": event["engine_kind"],
        "gen_ai.request.model": event["model"], "mycelium.outcome": event["outcome"],
        "mycelium.duration_ms": event["duration_ms"], "gen_ai.usage.input_tokens": event["tokens_in"],
        "gen_ai.usage.output_tokens": event["tokens_out"],
        **{f"mycelium.attr.{k}": v for k, v in (event["attrs"] or {}).items()},
    }
    return {"timeUnixNano": _nanos(event["at"]), "observedTimeUnixNano": _nanos(event["at"]),
            "severityNumber": INFO, "severityText": "INFO", "body": {"stringValue": f"usage {event['kind']}"},
            "attributes": [{"key": k, "value": _value(v)} for k, v in fields.items() if v is not None]}


def payload(events: list[Mapping[str, Any]], service: str) -> dict[str, Any]:
    return {"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeLogs": [{"scope": {"name": "mycelium.usage"}, "logRecords": [record(e) for e in events]}],
    }]}


async def export_usage(ctx: LoopContext) -> None:
    settings = ctx.hub.settings
    url = logs_url(settings)
    assert url is not None  # (the loop runs only when it is set)
    verbs = ctx.verbs
    async with httpx.AsyncClient(timeout=10.0, headers=headers_of(settings.otel_headers),
                                 trust_env=False) as http:
        while True:
            after = await verbs.call(HUB_PROCESS, "usage_export_mark", exporter=EXPORTER)
            rows = await verbs.call(HUB_PROCESS, "usage_after", after=after, limit=BATCH)
            if rows:
                try:
                    answer = await http.post(url, json=payload(rows, settings.otel_service_name))
                except httpx.HTTPError as exc:
                    raise RuntimeError(f"the collector at {url} could not be reached: {exc}") from None
                if not 200 <= answer.status_code < 300:
                    raise RuntimeError(f"the collector at {url} answered HTTP {answer.status_code}: "
                                       f"{answer.text[:200]}")
                last = rows[-1]["id"]
                await verbs.call(HUB_PROCESS, "mark_usage_exported", exporter=EXPORTER, last_id=last)
            ctx.succeeded()
            if len(rows) < BATCH:
                await asyncio.sleep(IDLE_SECONDS)


OTEL = Loop("otel", export_usage, interval=IDLE_SECONDS * 5, lead="mycelium.otel-exporter")
