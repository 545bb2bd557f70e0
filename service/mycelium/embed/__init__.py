"""Text embeddings for semantic search: the bundled offline MiniLM, or an OpenAI-compatible endpoint.

Use :func:`make_embedder` with the settings' ``embedder`` kind; all embedders return L2-normalised
vectors and raise :class:`EmbedderError` on failure.
"""

from __future__ import annotations

from mycelium.embed.base import Embedder, EmbedderError, make_embedder
from mycelium.embed.http import HttpEmbedder
from mycelium.embed.minilm import MiniLMEmbedder

__all__ = ["Embedder", "EmbedderError", "HttpEmbedder", "MiniLMEmbedder", "make_embedder"]
