"""`mycelium up --workers N`: several hub processes on one port are replicas on one database, each
with its own pool and its one listener; a message posted through one wakes an await held by any,
and each is delivered once."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from tests.support.processes import HubProcess


@pytest.mark.slow
async def test_two_workers_on_one_port_deliver_every_message_once_and_stop_cleanly(db_dsn, task, tmp_path,
                                                                                  admin_conn):
    hub = HubProcess(data_dir=tmp_path / "hub", database_url=db_dsn, extra=["--no-mirror", "--workers", "2"])
    try:
        hub.wait_ready()
        handles = [f"agent{i}" for i in range(16)]
        # a client of its own per waiter: each connection may land on either worker
        clients = [httpx.AsyncClient(base_url=hub.url, timeout=30) for _ in handles]
        try:
            waiting = [asyncio.create_task(c.get("/api/rooms/atlas/await", params={"handle": h, "timeout": 20}))
                       for c, h in zip(clients, handles, strict=True)]
            await asyncio.sleep(0.5)
            async with httpx.AsyncClient(base_url=hub.url, timeout=30) as poster:
                for h in handles:
                    r = await poster.post("/api/rooms/atlas/messages",
                                          json={"sender_handle": "julia", "recipient_handle": h, "content": f"to {h}"})
                    assert r.status_code == 201, r.text
            answers = [(await asyncio.wait_for(w, 20)).json() for w in waiting]
        finally:
            for c in clients:
                await c.aclose()
        assert [a["message"]["content"] for a in answers] == [f"to {h}" for h in handles]
        delivered = await admin_conn.fetchval(
            "SELECT count(*) FROM mycelium.delivery_cursors WHERE room = 'atlas' AND woken_by IS NOT NULL")
        assert delivered == len(handles)
    finally:
        code = hub.signal(signal.SIGTERM) if hub.proc.poll() is None else hub.proc.returncode
    assert code == 0
