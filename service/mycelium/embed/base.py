"""The embedder interface shared by the bundled model and remote endpoints.

The hub only ever needs "texts in, unit vectors of a known width out", so the interface is that and
nothing more. Vectors are L2-normalised by every implementation, which makes cosine similarity a plain
dot product and keeps pgvector's distances comparable across embedders.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float32]


class EmbedderError(RuntimeError):
    """Embedding failed: the model could not load, or the endpoint is down or answered wrongly."""


class Embedder(ABC):
    """Turns texts into L2-normalised vectors of ``dimensions`` floats."""

    name: str
    """Identifies the vector space, e.g. ``minilm-l6-v2-int8`` or ``http:<model>``; vectors from
    embedders with different names must not be compared."""
    dimensions: int

    @abstractmethod
    def embed_array(self, texts: Sequence[str]) -> FloatMatrix:
        """``(len(texts), dimensions)`` float32, rows L2-normalised. Bulk callers (benchmarks) use this
        directly because a numpy matrix is ~8x smaller than the equivalent nested lists."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in input order."""
        return self.embed_array(texts).tolist()

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        """Like :meth:`embed`, in a worker thread so CPU-bound inference does not block the event loop."""
        return await asyncio.to_thread(self.embed, texts)

    async def aclose(self) -> None:  # noqa: B027 -- an optional hook, deliberately not abstract
        """Release connections; a no-op for embedders that hold none."""


def text_list(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list; a bare string is refused because it would silently embed its characters."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str")
    return list(texts)


def l2_normalise(vectors: FloatMatrix) -> FloatMatrix:
    """Rows scaled to unit length; an all-zero row stays zero instead of becoming NaN."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def make_embedder(
    kind: str, *, url: str | None, model: str, api_key: str | None, dimensions: int = 384
) -> Embedder | None:
    """The embedder the settings ask for; ``None`` for ``kind="none"`` (search falls back to full text).

    Nothing is loaded or contacted here: the local model loads on first use, the endpoint on first call.
    """
    if kind == "none":
        return None
    if kind == "minilm":
        from mycelium.embed.minilm import MiniLMEmbedder

        if dimensions != MiniLMEmbedder.dimensions:
            raise ValueError(
                f"the bundled MiniLM embedder gives {MiniLMEmbedder.dimensions}-d vectors, "
                f"but {dimensions} dimensions were configured"
            )
        return MiniLMEmbedder()
    if kind == "http":
        if not url:
            raise ValueError("embedder 'http' needs an endpoint URL (MYCELIUM_EMBEDDING_URL)")
        from mycelium.embed.http import HttpEmbedder

        return HttpEmbedder(url=url, model=model, api_key=api_key, dimensions=dimensions)
    raise ValueError(f"unknown embedder kind {kind!r}; expected 'minilm', 'http' or 'none'")
