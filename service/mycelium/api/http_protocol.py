"""The HTTP/1.1 protocol ``mycelium up`` serves with: uvicorn's httptools protocol, one send per response.

uvicorn writes a response's status line and headers, then its body, as two ``transport.write``
calls, and uvloop sends each at once: two system calls per response, two segments on the wire, and
a client that may wake twice to read them. Every request of the wake path (a post, an await, the
await re-issued) pays that. Here the transport's writes of one loop turn are joined and sent
together at the start of the next turn, so a response answered in one go leaves as one send, and a
stream still sends its head as soon as the handler waits for something.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _OneSendPerTurn:
    """A transport whose writes within one loop turn go out as one write of the real transport."""

    __slots__ = ("_loop", "_pending", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None
        self._size = 0

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending, self._size = [data], len(data)
            self._loop.call_soon(self._flush)
        else:
            self._pending.append(data)
            self._size += len(data)
        if self._size >= HIGH_WATER_LIMIT:  # a large body goes out now, under the transport's flow control
            self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneSendHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over :class:`_OneSendPerTurn`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_OneSendPerTurn(transport, self.loop))  # type: ignore[arg-type]
