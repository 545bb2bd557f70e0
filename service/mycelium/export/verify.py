"""Checking a bundle offline: the manifest's signature (against the key it names, and against a
key the verifier trusts when one is given), every file's SHA-256 and record count, every record's
own digest, the receipts' hashes, chains and signatures, and the audit trail's chain."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mycelium.export.bundle import DIGEST, DOMAIN, FILES, FORMAT, manifest_digest, record_digest
from mycelium.ledger.receipts import verify_records

AUDIT_HEADER = "mycelium.audit/v1"
AUDIT_FIELDS = ("id", "at", "action", "actor", "actor_kind", "principal", "principal_role", "room", "target",
                "detail")


def audit_hash(entry: dict[str, Any]) -> str:
    """The hash of one audit entry, as mycelium.audit computes it (sql/audit.sql)."""
    preimage = "\n".join([AUDIT_HEADER, *("" if entry[f] is None else str(entry[f]) for f in AUDIT_FIELDS)])
    return hashlib.sha256(((entry["prev_hash"] or "") + "\n" + preimage).encode()).hexdigest()


def verify(data: bytes, trusted_key: bytes | None = None) -> tuple[dict[str, Any], list[str]]:
    """A summary of the bundle and every problem found (none: it is intact and signed)."""
    problems: list[str] = []
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        manifest = json.loads(archive.read("manifest.json"))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        return {}, [f"not a bundle: {exc}"]
    if manifest.get("format") != FORMAT:
        problems.append(f"manifest: format {manifest.get('format')!r} is not {FORMAT}")
    try:
        signer = bytes.fromhex(manifest["public_key"])
        Ed25519PublicKey.from_public_bytes(signer).verify(bytes.fromhex(manifest["signature"]),
                                                          DOMAIN + manifest_digest(manifest))
    except (KeyError, ValueError, InvalidSignature):
        problems.append("manifest: the signature does not verify")
        signer = b""
    if trusted_key is not None and signer != trusted_key:
        problems.append("manifest: signed by a key other than the one trusted")
    listed = manifest.get("files", {})
    if set(listed) != set(FILES) or set(archive.namelist()) != {*FILES, "manifest.json"}:
        problems.append(f"manifest: the files are not {', '.join(FILES)}")
    records: dict[str, list[dict[str, Any]]] = {}
    for name in FILES:
        try:
            raw = archive.read(name)
        except KeyError:
            continue
        entry = listed.get(name, {})
        if hashlib.sha256(raw).hexdigest() != entry.get("sha256"):
            problems.append(f"{name}: does not match its SHA-256 in the manifest")
        rows = []
        for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
            try:
                row = json.loads(line)
            except ValueError:
                problems.append(f"{name} line {number}: not JSON")
                continue
            if row.get(DIGEST) != record_digest(row):
                problems.append(f"{name} line {number} ({_label(row)}): the record does not match its digest")
            rows.append({k: v for k, v in row.items() if k != DIGEST})
        if len(rows) != entry.get("records"):
            problems.append(f"{name}: {len(rows)} records, the manifest says {entry.get('records')}")
        records[name] = rows
    keys = records.get("keys.jsonl", [])
    ring = {k["key_id"]: bytes.fromhex(k["public_key"]) for k in keys if k.get("purpose") == "receipts"}
    if signer and signer not in ring.values():
        problems.append("keys.jsonl: the manifest's signing key is not among the keys in force")
    checked, receipt_problems = verify_records(records.get("receipts.jsonl", []), ring)
    problems += [f"receipts.jsonl seq {p.get('seq')} of {p.get('agent_id')}: {p['problem']}"
                 for p in receipt_problems]
    before: str | None = None
    for entry in records.get("audit.jsonl", []):
        if entry.get("prev_hash") != before:
            problems.append(f"audit.jsonl id {entry.get('id')}: does not follow the entry before it")
        if audit_hash(entry) != entry.get("hash"):
            problems.append(f"audit.jsonl id {entry.get('id')}: content does not match its hash")
        before = entry.get("hash")
    summary = {"room": manifest.get("room"), "since": manifest.get("since"),
               "created_at": manifest.get("created_at"), "signed_by": manifest.get("signed_by"),
               "records": {name: len(rows) for name, rows in records.items()}, "receipts_checked": checked}
    return summary, problems


def _label(row: dict[str, Any]) -> str:
    for field in ("id", "request_id", "key", "name", "key_id"):
        if field in row:
            return f"{field} {row[field]}"
    return "record"
