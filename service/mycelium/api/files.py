"""Files over HTTP: ``POST /api/rooms/{room}/files?name=…&created_by=…[&replace=true]`` (the body is
the file, streamed into the database in blocks, in one transaction: 201 with its size, SHA-256 and sniffed
content type), ``GET …/files`` (the room's files), ``GET …/files/{name}`` (the bytes; a ``Range:
bytes=…`` header reads one range: 206, or 416 when it is outside the file), ``DELETE …/files/{name}``.

A name that is no safe relative path is a 422 before the body is read; a body over
``files.max_bytes`` is a 413, declared (``Content-Length``) or as it arrives; either way nothing of it
is stored, and neither is an upload whose connection breaks.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

from litestar import Controller, Request, delete, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Response, Stream

from mycelium.api.deps import VERBS, Annotated, Query, VerbsDep
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY, Actor
from mycelium.verbs.files import CHUNK_BYTES, FileRead, file_read, sniff

SNIFF_BYTES = 512
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
#: served in the page (any other type is a download, so no file runs as the hub's own page)
INLINE = ("image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf",
          "text/plain; charset=utf-8")


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range ``header`` asks of a ``size``-byte file as (first, last); None: the whole file
    (no header, or one this server does not read: several ranges, another unit); Unsatisfiable when
    it is outside the file."""
    if not header:
        return None
    m = _RANGE.match(header.strip())
    if m is None:
        return None
    first, last = m.group(1), m.group(2)
    if not first and not last:
        return None
    if not first:  # the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            raise unsatisfiable(size)
        return max(size - n, 0), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or (last and int(last) < start):
        raise unsatisfiable(size)
    return start, end


class Unsatisfiable(Exception):
    """A range outside the file: answered 416 with ``Content-Range: bytes */<size>``."""


def unsatisfiable(size: int) -> Unsatisfiable:
    return Unsatisfiable(size)


def disposition(name: str, content_type: str) -> str:
    leaf = name.rsplit("/", 1)[-1]
    quoted = leaf.replace("\\", "_").replace('"', "_")
    how = "inline" if content_type in INLINE else "attachment"
    return f"{how}; filename=\"{quoted}\""


class FileController(Controller):
    path = "/api/rooms/{room:str}/files"
    dependencies = VERBS

    @post("/", status_code=201, request_max_body_size=None)
    async def upload(
        self, request: Request[Any, Any, Any], verbs: VerbsDep, room: FromPath[str],
        name: Annotated[str, Query(min_length=1, max_length=1024)],
        created_by: Annotated[str, Query(min_length=1, max_length=200)],
        replace: FromQuery[bool] = False,
    ) -> FileRead:
        declared = request.headers.get("content-length")
        length = int(declared) if declared and declared.isdigit() else None
        cap = int(await verbs.call(NOBODY, "check_file", room=room, name=name, length=length,
                                   replace=replace))
        digest = hashlib.sha256()
        head = b""
        size = 0
        buffer = bytearray()
        async with verbs.transaction() as tx:
            data = await tx.call(NOBODY, "new_file_upload")
            # one block is written while the next is read: the statement runs on the connection as
            # the body arrives (one statement at a time: each write waits for the one before)
            writing: asyncio.Task[Any] | None = None
            try:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > cap:
                        raise Refusal(413, "file_too_large", f"the body is over the limit of {cap} bytes "
                                      "(files.max_bytes); nothing is stored", {"limit": cap})
                    digest.update(chunk)
                    if len(head) < SNIFF_BYTES:
                        head += chunk[: SNIFF_BYTES - len(head)]
                    buffer += chunk
                    if len(buffer) >= CHUNK_BYTES:
                        if writing is not None:
                            await writing
                        whole = len(buffer) - len(buffer) % CHUNK_BYTES  # (whole blocks; the rest waits)
                        writing = asyncio.ensure_future(tx.call(
                            NOBODY, "append_file_bytes", room=room, data=data, chunk=bytes(buffer[:whole])))
                        del buffer[:whole]
            finally:
                if writing is not None:  # (the transaction ends only once its statement has)
                    await asyncio.gather(writing, return_exceptions=True)
            if writing is not None:
                writing.result()
            if buffer:
                await tx.call(NOBODY, "append_file_bytes", room=room, data=data, chunk=bytes(buffer))
            row = await tx.call(Actor.declared(created_by, "person"), "add_file", room=room, name=name,
                                data=data, sha256=digest.hexdigest(), content_type=sniff(head), by=None,
                                replace=replace)
        return file_read(row)

    @get("/")
    async def files(self, verbs: VerbsDep, room: FromPath[str]) -> list[FileRead]:
        return [file_read(r) for r in await verbs.call(NOBODY, "list_files", room=room)]

    @get("/{name:path}")
    async def download(self, request: Request[Any, Any, Any], verbs: VerbsDep, room: FromPath[str],
                       name: FromPath[str]) -> Response[Any]:
        f = await verbs.call(NOBODY, "get_file", room=room, name=name.lstrip("/"))
        size = int(f["size"])
        try:
            wanted = byte_range(request.headers.get("range"), size)
        except Unsatisfiable:
            return Response({"error": "range_not_satisfiable", "size": size,
                             "message": f"the range is outside the file ({size} bytes)"},
                            status_code=416, headers={"Content-Range": f"bytes */{size}"})
        first, last = wanted if wanted is not None else (0, size - 1)
        headers = {
            "Accept-Ranges": "bytes", "ETag": f'"{f["sha256"]}"', "Content-Length": str(last - first + 1),
            "Content-Disposition": disposition(f["name"], f["content_type"]),
            "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox",
        }
        if wanted is not None:
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"

        async def body() -> AsyncIterator[bytes]:
            offset = first
            while offset <= last:
                n = min(CHUNK_BYTES, last - offset + 1)
                chunk = await verbs.call(NOBODY, "read_file_chunk", room=room, name=f["name"], offset=offset,
                                         length=n)
                yield bytes(chunk)
                offset += n

        return Stream(body(), status_code=206 if wanted is not None else 200, headers=headers,
                      media_type=f["content_type"])

    @delete("/{name:path}", status_code=200)
    async def remove(self, verbs: VerbsDep, room: FromPath[str], name: FromPath[str]) -> FileRead:
        return file_read(await verbs.call(NOBODY, "remove_file", room=room, name=name.lstrip("/")))
