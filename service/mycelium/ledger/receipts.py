"""Receipt signing and verification.

The database chains receipts (``hash = sha256(prev_hash_hex + "\\n" + preimage)``) but cannot sign
with Ed25519, so the hub holds a key under its data folder and signs each receipt's hash as it
appears; the key id is stored with the signature and public keys live in ``mycelium.receipt_keys``.
Verification here needs only exported receipts and public keys: it re-renders the exact preimage,
recomputes each hash, follows each chain (one per agent and lane) and checks each signature.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PREIMAGE_HEADER = "mycelium.receipt/v2"
# The order is part of the format (sql/receipts.sql, receipt_preimage).
RECEIPT_FIELDS = (
    "receipt_id",
    "agent_id",
    "lane",
    "seq",
    "kind",
    "action",
    "request_id",
    "transition_key",
    "side_effect_class",
    "policy_version",
    "inputs_hash",
    "outputs_hash",
    "outcome",
    "boundary",
    "fence",
    "external_operation_ref",
    "error",
    "verified",
    "resolved_by",
    "resolution_reason",
    "started_at",
    "finished_at",
    "recorded_at",
)
SIGNING_DOMAIN = b"mycelium-receipt-signature/v1\n"


# -- the canonical bytes ---------------------------------------------------------------------------


def render_preimage(receipt: Mapping[str, Any]) -> str:
    """The receipt's fields rendered exactly as the database hashes them."""
    out = [PREIMAGE_HEADER + "\n"]
    for name in RECEIPT_FIELDS:
        value = receipt.get(name)
        out.append(f"{name}:-\n" if value is None else f"{name}:{len(str(value))}:{value}\n")
    return "".join(out)


def receipt_hash(prev_hash_hex: str | None, receipt: Mapping[str, Any]) -> str:
    text = (prev_hash_hex or "") + "\n" + render_preimage(receipt)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- keys ------------------------------------------------------------------------------------------


def key_id_of(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:16]


def public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class ReceiptKey:
    key_id: str
    private: Ed25519PrivateKey

    @property
    def public_bytes(self) -> bytes:
        return public_raw(self.private.public_key())

    def sign(self, hash_hex: str) -> bytes:
        return self.private.sign(SIGNING_DOMAIN + bytes.fromhex(hash_hex))

    def public_pem(self) -> str:
        return (
            self.private.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )


class KeyStore:
    """Signing keys in a folder: ``<key_id>.pem`` (private, mode 0600) and ``current`` (the key id)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def for_data_dir(cls, data_dir: Path) -> KeyStore:
        override = os.environ.get("MYCELIUM_RECEIPT_KEY_DIR")
        return cls(Path(override) if override else data_dir / "keys" / "receipts")

    def current(self) -> ReceiptKey:
        """The key in use, created on first use."""
        pointer = self.folder / "current"
        if pointer.exists():
            key_id = pointer.read_text().strip()
            return self._load(key_id)
        return self.rotate()

    def rotate(self) -> ReceiptKey:
        """Make a new key and use it from now on (the old files stay, for the record)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        private = Ed25519PrivateKey.generate()
        key = ReceiptKey(key_id_of(public_raw(private.public_key())), private)
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path = self.folder / f"{key.key_id}.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        tmp = self.folder / "current.tmp"
        tmp.write_text(key.key_id + "\n")
        tmp.replace(self.folder / "current")
        return key

    def _load(self, key_id: str) -> ReceiptKey:
        private = serialization.load_pem_private_key(
            (self.folder / f"{key_id}.pem").read_bytes(), password=None
        )
        if not isinstance(private, Ed25519PrivateKey):
            raise ValueError(f"receipt key {key_id} is not an Ed25519 key")
        return ReceiptKey(key_id, private)


# -- verification (anyone, offline) ----------------------------------------------------------------


def load_public_keys(text: str) -> dict[str, bytes]:
    """Public keys from a keyring (``{"keys": [{"key_id", "public_key": hex}]}``) or PEM blocks."""
    text = text.strip()
    if text.startswith("{"):
        data = json.loads(text)
        return {k["key_id"]: bytes.fromhex(k["public_key"]) for k in data.get("keys", [])}
    keys: dict[str, bytes] = {}
    for block in text.split("-----END PUBLIC KEY-----"):
        if "-----BEGIN PUBLIC KEY-----" not in block:
            continue
        pub = serialization.load_pem_public_key((block.strip() + "\n-----END PUBLIC KEY-----\n").encode())
        if not isinstance(pub, Ed25519PublicKey):
            raise ValueError("only Ed25519 public keys sign receipts")
        raw = public_raw(pub)
        keys[key_id_of(raw)] = raw
    return keys


def check_signature(public_key: bytes, hash_hex: str, signature_hex: str) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            bytes.fromhex(signature_hex), SIGNING_DOMAIN + bytes.fromhex(hash_hex)
        )
    except (InvalidSignature, ValueError):
        return False
    return True


def verify_records(
    records: Iterable[Mapping[str, Any]], keys: Mapping[str, bytes]
) -> tuple[int, list[dict[str, Any]]]:
    """Check exported receipts: each hash, each chain (agent and lane) within the export, each signature.
    Returns (how many were checked, the problems found)."""
    problems: list[dict[str, Any]] = []
    last: dict[tuple[str, int], Mapping[str, Any]] = {}
    count = 0

    def problem(r: Mapping[str, Any], text: str) -> None:
        problems.append(
            {
                "agent_id": r.get("agent_id"),
                "lane": r.get("lane"),
                "seq": r.get("seq"),
                "receipt_id": r.get("receipt_id"),
                "problem": text,
            }
        )

    def chain_of(r: Mapping[str, Any]) -> tuple[str, int]:
        return str(r.get("agent_id")), int(r.get("lane") or 0)

    for r in sorted(records, key=lambda r: (*chain_of(r), int(r.get("seq") or 0))):
        count += 1
        if receipt_hash(r.get("prev_hash"), r) != r.get("hash"):
            problem(r, "content does not match its hash (edited)")
        prior = last.get(chain_of(r))
        if prior is not None:
            if int(r["seq"]) != int(prior["seq"]) + 1:
                problem(r, f"gap: seq {r['seq']} follows {prior['seq']} (receipts missing)")
            elif r.get("prev_hash") != prior.get("hash"):
                problem(r, "prev_hash does not match the previous receipt's hash")
        elif int(r["seq"]) == 1 and r.get("prev_hash"):
            problem(r, "first receipt links to a predecessor")
        last[chain_of(r)] = r
        wrong = signature_problem(r, keys)
        if wrong is not None:
            problem(r, wrong)
    return count, problems


def signature_problem(r: Mapping[str, Any], keys: Mapping[str, bytes]) -> str | None:
    """What is wrong with a receipt's signature against a keyring (key id -> raw public key):
    unsigned, signed with a key the ring lacks, or a signature that does not check; None when
    it checks."""
    if not r.get("signature"):
        return "unsigned"
    if r.get("key_id") not in keys:
        return f"signed with unknown key {r.get('key_id')}"
    if not check_signature(keys[r["key_id"]], str(r.get("hash")), str(r["signature"])):
        return f"bad signature (key {r['key_id']})"
    return None
