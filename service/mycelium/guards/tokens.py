"""Counting a transcript's tokens: a real tokenizer where one is installed, else a documented estimate.

``counter_for("auto")`` uses the ``tokenizers`` library (the hub extra installs it) with the
WordPiece vocabulary the hub ships for its embedder; without ``tokenizers`` it falls back to the
estimate. Pass your model's own tokenizer for an exact budget: any object with ``encode(text)``
(a ``tokenizers.Tokenizer``, a ``tiktoken`` encoding) or a function ``text -> int``.

The estimate (``"estimate"``): ``ceil(characters / 4)`` per message text — about right for
English prose under GPT-style BPE vocabularies, low for code and non-Latin scripts. Either way each
message adds :data:`PER_MESSAGE` tokens of framing (role and delimiters) and each transcript
:data:`PRIMING`.
"""

from __future__ import annotations

import gzip
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

PER_MESSAGE = 4
PRIMING = 3
_VOCABULARY = Path(__file__).resolve().parent.parent / "embed" / "data" / "minilm-tokenizer.json.gz"


def estimate(text: str) -> int:
    return (len(text) + 3) // 4


def _from_encoder(encoder: Any) -> Callable[[str], int]:
    def count(text: str) -> int:
        encoded = encoder.encode(text)
        ids = getattr(encoded, "ids", encoded)
        return len(ids)

    return count


def _installed() -> Callable[[str], int] | None:
    if importlib.util.find_spec("tokenizers") is None or not _VOCABULARY.is_file():
        return None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(gzip.decompress(_VOCABULARY.read_bytes()).decode("utf-8"))
    tok.no_padding()
    tok.no_truncation()
    tok.model.max_input_chars_per_word = 1 << 20  # a long unbroken string is many pieces, not one [UNK]

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def counter_for(tokenizer: Any) -> tuple[Callable[[str], int], str]:
    """(text -> token count, the name of what counts)."""
    if tokenizer in (None, "auto"):
        found = _installed()
        return (found, "tokenizers") if found is not None else (estimate, "estimate")
    if tokenizer == "estimate":
        return estimate, "estimate"
    if hasattr(tokenizer, "encode"):
        return _from_encoder(tokenizer), type(tokenizer).__name__
    if callable(tokenizer):
        return tokenizer, getattr(tokenizer, "__name__", "callable")
    raise ValueError(f"tokenizer must be 'auto', 'estimate', an encoder or a function, got {tokenizer!r}")
