"""Join codes as people type them: three groups of four from an alphabet with no look-alikes
(``k7pm-2xqa-9rtd``), normalised before hashing so ``K7PM 2XQA-9rtd`` is the same code."""

from __future__ import annotations

import hashlib
import secrets

ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
GROUPS, GROUP_LENGTH = 3, 4
TTL_SECONDS = 600


def new_code() -> str:
    chars = "".join(secrets.choice(ALPHABET) for _ in range(GROUPS * GROUP_LENGTH))
    return "-".join(chars[i:i + GROUP_LENGTH] for i in range(0, len(chars), GROUP_LENGTH))


def normalise(code: str) -> str:
    """Lower case, letters and digits only, regrouped by four."""
    chars = "".join(c for c in code.lower() if c.isascii() and c.isalnum())
    return "-".join(chars[i:i + GROUP_LENGTH] for i in range(0, len(chars), GROUP_LENGTH))


def code_hash(code: str) -> bytes:
    return hashlib.sha256(normalise(code).encode()).digest()
