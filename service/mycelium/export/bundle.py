"""A bundle is a zip of JSON Lines files and a manifest:

* each record carries ``_sha256``, the SHA-256 of its canonical JSON (sorted keys, no spaces,
  without ``_sha256``), so a changed byte names its record;
* ``manifest.json`` lists every file with its SHA-256 and record count, and is signed (Ed25519)
  with the hub's key over ``DOMAIN`` + SHA-256 of its canonical JSON without ``signature``;
* ``keys.json`` holds the public keys in force (receipts, member tokens), ``audit.jsonl`` the whole
  audit trail with the text each hash covers, ``receipts.jsonl`` the receipts as ``mycelium
  receipts export`` writes them.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from mycelium.ledger.receipts import ReceiptKey

FORMAT = "mycelium.export/v1"
DOMAIN = b"mycelium.export/v1\n"
FILES = ("room.jsonl", "messages.jsonl", "memories.jsonl", "memory_versions.jsonl", "leases.jsonl",
         "transitions.jsonl", "receipts.jsonl", "audit.jsonl", "keys.jsonl")
DIGEST = "_sha256"


def _default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def plain(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record as JSON values (what the bundle holds and the verifier reads back)."""
    return json.loads(json.dumps(dict(record), default=_default))  # type: ignore[no-any-return]


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def record_digest(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical({k: v for k, v in record.items() if k != DIGEST})).hexdigest()


def manifest_digest(manifest: Mapping[str, Any]) -> bytes:
    return hashlib.sha256(canonical({k: v for k, v in manifest.items() if k != "signature"})).digest()


def jsonl(records: Iterable[Mapping[str, Any]]) -> tuple[bytes, int]:
    lines = []
    for record in records:
        row = plain(record)
        row[DIGEST] = record_digest(row)
        lines.append(json.dumps(row, sort_keys=True, ensure_ascii=False))
    return ("\n".join(lines) + ("\n" if lines else "")).encode(), len(lines)


def build(room: str, since: datetime | None, parts: Mapping[str, Iterable[Mapping[str, Any]]],
          key: ReceiptKey) -> bytes:
    """The bundle's bytes: ``parts`` maps each of ``FILES`` to its records."""
    missing = set(FILES) - set(parts)
    if missing:
        raise ValueError(f"a bundle needs {', '.join(sorted(missing))}")
    files: dict[str, bytes] = {}
    listed: dict[str, dict[str, Any]] = {}
    for name in FILES:
        data, count = jsonl(parts[name])
        files[name] = data
        listed[name] = {"sha256": hashlib.sha256(data).hexdigest(), "records": count}
    manifest: dict[str, Any] = {
        "format": FORMAT, "room": room, "since": since.isoformat() if since else None,
        "created_at": datetime.now(UTC).isoformat(), "files": listed,
        "signed_by": key.key_id, "public_key": key.public_bytes.hex(),
    }
    manifest["signature"] = key.private.sign(DOMAIN + manifest_digest(manifest)).hex()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
        for name, data in files.items():
            z.writestr(name, data)
    return out.getvalue()
