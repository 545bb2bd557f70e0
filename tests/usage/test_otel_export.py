"""The OpenTelemetry exporter against a collector of the test's own (an OTLP/HTTP JSON receiver in
this process): a real hub process sends usage events as log records, holds them while the
collector refuses, sends each once when it takes them, and a second replica's exporter never
doubles one. A record carries the event's fields and nobody's name."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow


class Collector:
    """Answers POST /v1/logs with ``status`` (503: down) and keeps what it took."""

    def __init__(self) -> None:
        self.status = 503
        self.tries = 0
        self.taken: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                owner.tries += 1
                if self.path == "/v1/logs" and owner.status == 200:
                    owner.taken.append(json.loads(body))
                    owner.headers.append(dict(self.headers))
                self.send_response(owner.status if self.path == "/v1/logs" else 404)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def records(self) -> list[dict[str, Any]]:
        return [r for body in self.taken for rl in body["resourceLogs"] for sl in rl["scopeLogs"]
                for r in sl["logRecords"]]


def attrs(record: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in record["attributes"]}


async def add_usage(dsn: str, n: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        for i in range(n):
            await conn.execute("SELECT (mycelium.record_usage('model_call', 'nova', 'persona', 'chat:small', "
                               "'answered', $1, 120, 30, jsonb_build_object('attempt', 1))).id", 10.0 + i)
    finally:
        await conn.close()


def wait(until: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_usage_events_reach_the_collector_once_held_while_it_is_down(hub_processes, db_dsn):
    collector = Collector()
    env = {"MYCELIUM_SLIM": "off", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
           "OTEL_EXPORTER_OTLP_HEADERS": "x-team=ops", "OTEL_SERVICE_NAME": "hub-under-test"}
    first = hub_processes(env=env)
    asyncio.run(add_usage(db_dsn, 3))
    wait(lambda: collector.tries >= 2)  # tried, refused, tried again: nothing taken, nothing marked
    assert collector.taken == []
    collector.status = 200
    wait(lambda: len(collector.records()) >= 3)
    second = hub_processes(env=env)  # another replica: its exporter waits for the lock
    asyncio.run(add_usage(db_dsn, 2))
    wait(lambda: len(collector.records()) >= 5)
    time.sleep(3)  # time for a doubled send to show
    got = collector.records()
    ids = [attrs(r)["mycelium.usage.id"] for r in got]
    assert len(ids) == 5 and len(set(ids)) == 5, ids
    one = attrs(got[0])
    assert (one["mycelium.usage.kind"], one["gen_ai.request.model"], one["mycelium.engine_kind"]) == (
        "model_call", "chat:small", "persona")
    assert one["gen_ai.usage.input_tokens"] == "120" and one["mycelium.attr.attempt"] == "1"
    assert got[0]["severityText"] == "INFO" and int(got[0]["timeUnixNano"]) > 0
    resource = collector.taken[0]["resourceLogs"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "hub-under-test"}} in resource
    assert all(h.get("x-team") == "ops" for h in collector.headers)
    loops = {h.url: {loop["loop"]: loop for loop in httpx.get(h.url + "/health").json()["loops"]}
             for h in (first, second)}
    leaders = [url for url, ls in loops.items() if ls["otel"]["leader"]]
    assert len(leaders) == 1
