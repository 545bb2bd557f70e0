"""An embedder backed by any OpenAI-compatible ``POST /embeddings`` endpoint.

This lets a deployment use a hosted or self-served model instead of the bundled MiniLM. Whatever the
server does, callers see the same contract as the local model: vectors in input order, of the configured
width, L2-normalised, and every failure (down, slow, wrong answer) as :class:`EmbedderError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from mycelium.embed.base import Embedder, EmbedderError, FloatMatrix, l2_normalise, text_list


class HttpEmbedder(Embedder):
    """Client for ``{url}/embeddings``; connections are pooled, so reuse one instance and close it."""

    def __init__(
        self,
        *,
        url: str,
        model: str,
        api_key: str | None = None,
        dimensions: int = 384,
        timeout: float = 30.0,
        batch_size: int = 256,
    ) -> None:
        """``batch_size`` inputs go in one request, well under OpenAI's 2048-input limit."""
        try:
            self._endpoint = httpx.URL(url.rstrip("/") + "/embeddings")
        except httpx.InvalidURL as exc:
            raise ValueError(f"invalid embedding URL {url!r}: {exc}") from exc
        if self._endpoint.scheme not in ("http", "https"):
            raise ValueError(f"embedding URL must be http(s), got {url!r}")
        self.name = f"http:{model}"
        self.dimensions = dimensions
        self._model = model
        self._batch_size = batch_size
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout)
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None

    def embed_array(self, texts: Sequence[str]) -> FloatMatrix:
        texts = text_list(texts)
        if self._client is None:
            self._client = httpx.Client(headers=self._headers, timeout=self._timeout)
        parts = [self._empty()]
        for chunk in self._chunks(texts):
            try:
                response = self._client.post(self._endpoint, json=self._body(chunk))
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from exc
            parts.append(self._parse(response, len(chunk)))
        return np.concatenate(parts)

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        """Native async; the client is created on first use and belongs to that event loop."""
        texts = text_list(texts)
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(headers=self._headers, timeout=self._timeout)
        parts = [self._empty()]
        for chunk in self._chunks(texts):
            try:
                response = await self._aclient.post(self._endpoint, json=self._body(chunk))
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from exc
            parts.append(self._parse(response, len(chunk)))
        return np.concatenate(parts).tolist()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        self.close()
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None

    def _chunks(self, texts: list[str]) -> list[list[str]]:
        return [texts[i : i + self._batch_size] for i in range(0, len(texts), self._batch_size)]

    def _empty(self) -> FloatMatrix:
        return np.empty((0, self.dimensions), dtype=np.float32)

    def _body(self, chunk: list[str]) -> dict[str, Any]:
        return {"model": self._model, "input": chunk, "dimensions": self.dimensions}

    def _transport_error(self, exc: httpx.HTTPError) -> EmbedderError:
        return EmbedderError(f"embedding endpoint {self._endpoint} unreachable: {type(exc).__name__}: {exc}")

    def _parse(self, response: httpx.Response, count: int) -> FloatMatrix:
        """Checks the answer's shape so a misconfigured model fails loudly here, not later in pgvector."""
        if response.is_error:
            raise EmbedderError(
                f"embedding endpoint {self._endpoint} answered HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            rows = sorted(response.json()["data"], key=lambda row: row["index"])
            vectors = [row["embedding"] for row in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(
                f"embedding endpoint {self._endpoint} sent a malformed answer: {exc!r}"
            ) from exc
        if len(vectors) != count:
            raise EmbedderError(f"asked for {count} embeddings, the endpoint returned {len(vectors)}")
        for vector in vectors:
            if not isinstance(vector, list) or len(vector) != self.dimensions:
                received = len(vector) if isinstance(vector, list) else type(vector).__name__
                raise EmbedderError(
                    f"expected {self.dimensions}-dimensional embeddings from model {self._model!r}, "
                    f"received {received}"
                )
        try:
            matrix = np.asarray(vectors, dtype=np.float32)
        except (ValueError, TypeError) as exc:
            raise EmbedderError(f"embedding endpoint {self._endpoint} sent non-numeric vectors") from exc
        if not np.isfinite(matrix).all():
            raise EmbedderError(f"embedding endpoint {self._endpoint} sent NaN or infinite values")
        return l2_normalise(matrix)
