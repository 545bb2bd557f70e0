"""``GET /health``: what this process runs on, what its background loops are doing, and every process
running loops on the same database.

``schema_fingerprint`` digests the database's whole schema (``mycelium.schema_fingerprint()``):
replicas on one schema report the same one, whatever revision id they were told. ``status`` is
``ok``, or ``degraded`` when a loop of this process is failing, stuck or warns (mirror files it
cannot write, say; ``problems`` says which).
The HTTP status stays 200 either way: the API of a degraded process still serves, so a load
balancer must not take it out of rotation for a background loop; monitoring reads ``status``.
``workers`` lists the processes of the deployment that beat within the last
:data:`~mycelium.workers.supervisor.ALIVE_SECONDS` (``alive``) or stopped beating without saying
they stopped (``alive: false``: killed or hung); ``leaders`` names the process leading each loop
that has one leader.
"""

from __future__ import annotations

from typing import Any

from litestar import get

from mycelium import __version__
from mycelium.api.deps import HubDep
from mycelium.db import schema
from mycelium.slim.publisher import report as slim_report
from mycelium.verbs import HUB_PROCESS, verbs_of
from mycelium.workers.loop import STUCK_INTERVALS
from mycelium.workers.supervisor import ALIVE_SECONDS

_WORKER_FIELDS = ("kind", "host", "pid", "started_at")
_LOOP_FIELDS = ("loop", "state", "leader", "interval_seconds", "last_success_at", "last_error",
                "last_error_at", "warning", "failures", "stuck", "heartbeat_at")


def _problem(loop: dict[str, Any]) -> str | None:
    if loop["state"] == "failing":
        return f"{loop['loop']} is failing ({loop['failures']} in a row): {loop['last_error']}"
    if loop["stuck"]:
        return f"{loop['loop']} is stuck: no success in {loop['interval_seconds'] * STUCK_INTERVALS:g} s"
    if loop.get("warning"):
        return f"{loop['loop']}: {loop['warning']}"
    return None


def _deployment(rows: list[Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    workers: dict[str, dict[str, Any]] = {}
    leaders: dict[str, str] = {}
    for r in rows:
        if r["state"] == "stopped":
            continue
        wid = str(r["worker_id"])
        worker = workers.setdefault(wid, {"worker_id": wid, **{k: r[k] for k in _WORKER_FIELDS},
                                          "alive": r["alive"], "loops": []})
        worker["loops"].append({k: r[k] for k in _LOOP_FIELDS})
        if r["leader"]:
            leaders[r["loop"]] = wid
    return list(workers.values()), leaders


@get("/health")
async def health(hub: HubDep) -> dict[str, Any]:
    async with verbs_of(hub).transaction(readonly=True) as verbs:
        row = await verbs.call(HUB_PROCESS, "hub_health")
        report = await verbs.call(HUB_PROCESS, "worker_report", alive_seconds=ALIVE_SECONDS)
    embedder = hub.embedder
    supervisor = hub.supervisor
    loops = supervisor.report() if supervisor else []
    problems = [p for p in map(_problem, loops) if p]
    workers, leaders = _deployment(report)
    return {
        "status": "degraded" if problems else "ok",
        "problems": problems,
        "version": __version__,
        "postgres": row["postgres"],
        "pgvector": row["pgvector"],
        "migration": row["migration"],
        "migration_head": schema.head(),
        "schema_fingerprint": row["schema_fingerprint"],
        "embedder": {"name": embedder.name, "dimensions": embedder.dimensions} if embedder else None,
        "store_id": row["store_id"],
        "database": "embedded" if hub.embedded is not None else "external",
        "slim": await slim_report(hub),
        "worker": {
            "worker_id": str(supervisor.worker_id), "kind": supervisor.kind, "host": supervisor.host,
            "pid": supervisor.pid, "started_at": supervisor.started_at,
            "heartbeat_at": supervisor.heartbeat_at, "heartbeat_error": supervisor.heartbeat_error,
        } if supervisor else None,
        "loops": loops,
        "workers": workers,
        "leaders": leaders,
    }
