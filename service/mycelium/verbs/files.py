"""Files: the answer every transport shares, and the content type read from a file's first bytes.
The rules are the database's (sql/files.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

#: how much of an upload is written at once (the database's block), and of a download read
CHUNK_BYTES = 1 << 20
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"\x7fELF", "application/x-executable"),
)


class FileRead(BaseModel):
    room: str
    name: str
    size: int
    sha256: str
    content_type: str
    created_by: str
    created_at: datetime


def file_read(row: Any) -> FileRead:
    got = dict(row)
    return FileRead(**{k: got[k] for k in FileRead.model_fields if k in got})


def sniff(head: bytes) -> str:
    """The content type of a file that begins with ``head`` (its first bytes; never its name)."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    if not head:
        return "application/octet-stream"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # (a character cut at the end of the sample is still text)
            return "application/octet-stream"
        text = head[: exc.start].decode("utf-8")
    if "\x00" in text:
        return "application/octet-stream"
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return "application/json"
    if stripped[:14].lower().startswith(("<!doctype html", "<html")):
        return "text/html"
    return "text/plain; charset=utf-8"
