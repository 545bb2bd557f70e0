"""Live fan-out: one LISTEN connection per hub process, fanned out in-process; replicas wake each
other's waiters through the database; a dropped listener comes back without losing a wake."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import httpx
import pytest

from mycelium.conversations.wakes import waiters_of


async def send(conn: asyncpg.Connection, content: str, recipients: list[str] | None = None) -> None:
    await conn.execute("SELECT id FROM mycelium.post_message('atlas', 'julia', $1, NULL, $2)",
                       content, recipients or [])


async def backends(conn: asyncpg.Connection) -> list[int]:
    rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid()")
    return [r["pid"] for r in rows]


@pytest.mark.slow
async def test_a_thousand_awaits_on_one_process_hold_one_listener_connection(served, task, admin_conn):
    handles = [f"agent{i}" for i in range(1000)]
    # many small clients: one client's connection pool slows down with the square of its size
    clients = [served.client(timeout=150) for _ in range(20)]
    try:
        waiting = [asyncio.create_task(clients[i % 20].get("/api/rooms/atlas/await",
                                                           params={"handle": h, "timeout": 120}))
                   for i, h in enumerate(handles)]
        waiters = await waiters_of(served.hub)
        for _ in range(600):
            if waiters.waiting >= len(handles):
                break
            await asyncio.sleep(0.1)
        assert waiters.waiting >= len(handles)
        pids = await backends(admin_conn)
        pool_max = served.hub.settings.pool_max_size
        assert served.hub.wakes.connection_pid in pids
        assert len(pids) <= pool_max + 1, "a waiter must never hold a connection of its own"

        for start in range(0, len(handles), 100):  # ten messages, each addressed to a hundred handles
            await send(admin_conn, "your turn", handles[start:start + 100])
        answers = await asyncio.gather(*waiting)
    finally:
        for c in clients:
            await c.aclose()
    got = {a.json()["handle"]: a.json()["message"] for a in answers}
    assert all(got[h] is not None and got[h]["content"] == "your turn" for h in handles)
    assert len(await backends(admin_conn)) <= pool_max + 1


@pytest.mark.slow
async def test_two_hub_processes_wake_each_others_waiters(hub_process, task):
    a, b = hub_process(), hub_process()
    async with httpx.AsyncClient(timeout=30) as http:
        async def await_on(hub, handle: str):
            r = await http.get(f"{hub.url}/api/rooms/atlas/await", params={"handle": handle, "timeout": 20})
            return r.json()["message"]

        on_b = asyncio.create_task(await_on(b, "bob"))
        on_a = asyncio.create_task(await_on(a, "alice"))
        await asyncio.sleep(0.5)
        r = await http.post(f"{a.url}/api/rooms/atlas/messages", json={"sender_handle": "alice", "content": "@bob go"})
        assert r.status_code == 201
        assert (await asyncio.wait_for(on_b, 15))["content"] == "@bob go"
        r = await http.post(f"{b.url}/api/rooms/atlas/reply", json={"handle": "bob", "text": "done @alice"})
        assert r.status_code == 201
        assert (await asyncio.wait_for(on_a, 15))["content"] == "done @alice"


async def test_a_dropped_listener_comes_back_without_losing_a_wake(served, task, admin_conn):
    listener = served.hub.wakes
    async with served.client() as http:
        waiting = asyncio.create_task(
            http.get("/api/rooms/atlas/await", params={"handle": "bob", "timeout": 10}))
        waiters = await waiters_of(served.hub)
        for _ in range(500):
            if waiters.waiting:
                break
            await asyncio.sleep(0.02)
        old_pid = listener.connection_pid
        before = listener.reconnects
        assert await admin_conn.fetchval("SELECT pg_terminate_backend($1)", old_pid)
        await send(admin_conn, "@bob sent while the listener was gone")  # its NOTIFY reaches nobody
        answer = (await asyncio.wait_for(waiting, 15)).json()
        for _ in range(200):
            if listener.connection_pid is not None:
                break
            await asyncio.sleep(0.05)
    assert answer["message"] is not None, "the wake was lost with the connection"
    assert answer["message"]["content"] == "@bob sent while the listener was gone"
    assert listener.reconnects > before and listener.connection_pid not in (None, old_pid)


async def test_the_stream_sends_the_timeline_as_it_grows(served, task, admin_conn):
    head = await admin_conn.fetchval("SELECT last FROM mycelium.message_positions WHERE room = 'atlas'")
    async with served.client() as http, http.stream(
            "GET", "/api/rooms/atlas/messages/stream", params={"after": head}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events: list[dict] = []

        async def read() -> None:
            event: dict = {}
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    event["id"] = int(line[4:])
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif not line and "data" in event:
                    events.append(event)
                    event = {}
                    if len(events) == 3:
                        return

        reader = asyncio.create_task(read())
        await send(admin_conn, "first")
        await asyncio.sleep(0.2)
        await admin_conn.execute("SELECT id FROM mycelium.post_message('atlas', 'api', 'in thread', $1)",
                                 task.episode)
        await asyncio.wait_for(reader, 10)
    kinds = [(e["data"]["payload_type"], e["data"]["content"]) for e in events]
    assert kinds == [("message", "first"), ("message", "in thread"), ("ping", "")]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
