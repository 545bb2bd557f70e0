"""The HTTP protocol `mycelium up` serves with sends a response's head and body in one write, and
still sends a stream's head while the stream waits, and what is pending before a close."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT

from mycelium.api.http_protocol import _OneSendPerTurn


class Recorder:
    """A transport that records what reaches it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_writes_in_one_loop_turn_reach_the_transport_as_one_write() -> None:
    real = Recorder()
    t = _OneSendPerTurn(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"{}")
    assert real.writes == []
    await asyncio.sleep(0)
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    t.write(b"later")
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"later"]
    assert t.get_extra_info("peername") == "info:peername"


async def test_a_close_sends_what_is_pending_first_and_nothing_goes_out_after_it() -> None:
    real = Recorder()
    t = _OneSendPerTurn(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 400 Bad Request\r\n")
    t.write(b"connection: close\r\n\r\n")
    t.close()
    assert real.writes == [b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n"] and real.closed
    await asyncio.sleep(0)
    assert len(real.writes) == 1 and t.is_closing()


async def test_a_large_body_goes_out_at_once_instead_of_waiting_for_the_turn_to_end() -> None:
    real = Recorder()
    t = _OneSendPerTurn(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.write(b"x" * (HIGH_WATER_LIMIT - 100))
    assert real.writes == []
    t.write(b"y" * 200)  # past the transport's high-water mark: written now, under its flow control
    assert len(real.writes) == 1 and len(real.writes[0]) == 19 + HIGH_WATER_LIMIT + 100
    await asyncio.sleep(0)
    assert len(real.writes) == 1


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> tuple[bytes, bytes]:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: hub\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return head, await reader.readexactly(length)


async def test_a_keep_alive_connection_gets_each_response_whole_and_a_waiting_stream_its_head(
        served, task) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", int(served.url.rsplit(":", 1)[1]))
    try:
        for _ in range(3):
            head, body = await request(reader, writer, "/health")
            assert head.startswith(b"HTTP/1.1 200") and body.startswith(b"{")
        head, body = await request(reader, writer, "/api/rooms/nowhere/messages")
        assert head.startswith(b"HTTP/1.1 404") and b"room" in body
        # a stream with nothing to send yet: its head is written, then the handler waits
        writer.write(f"GET /api/rooms/{task.room}/messages/stream HTTP/1.1\r\nHost: hub\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
    finally:
        writer.close()
