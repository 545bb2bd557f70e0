"""Embedders: the real bundled model offline, and the HTTP client against a real local server."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from mycelium.embed import Embedder, EmbedderError, HttpEmbedder, MiniLMEmbedder, make_embedder

CAT = "The cat sat on the mat"
KITTEN = "A kitten was sitting on the rug"
REVENUE = "Quarterly revenue rose by five percent"


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLMEmbedder]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # any attempt to reach the hub would fail loudly
        embedder = MiniLMEmbedder()
        embedder.embed(["load now, with the hub offline"])
        yield embedder


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


# --- the bundled model ---------------------------------------------------------------------------


def test_minilm_gives_384d_unit_vectors(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed([CAT, "", "x" * 10_000])  # empty and over-long (truncated) inputs too
    assert minilm.name == "minilm-l6-v2-int8"
    assert minilm.dimensions == 384
    assert len(vectors) == 3
    for v in vectors:
        assert len(v) == 384
        assert all(isinstance(x, float) for x in v)
        assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5)


def test_paraphrase_ranks_above_unrelated(minilm: MiniLMEmbedder) -> None:
    cat, kitten, revenue = minilm.embed([CAT, KITTEN, REVENUE])
    assert cos(cat, kitten) > 0.5
    assert abs(cos(cat, revenue)) < 0.2
    assert cos(cat, kitten) > cos(cat, revenue) + 0.4


def test_batch_equals_single_and_keeps_order(minilm: MiniLMEmbedder) -> None:
    texts = [REVENUE, "", CAT, "a much longer sentence about databases, invariants and agents " * 5, KITTEN]
    batch = minilm.embed(texts)
    for text, vector in zip(texts, batch, strict=True):
        assert cos(minilm.embed([text])[0], vector) > 0.999


def test_chunking_matches_one_batch(minilm: MiniLMEmbedder) -> None:
    texts = [f"note {i}: " + "word " * (i % 9) for i in range(23)]
    small_chunks = MiniLMEmbedder(batch_size=4)
    a = small_chunks.embed_array(texts)
    b = minilm.embed_array(texts)
    assert a.shape == b.shape == (23, 384)
    assert a.dtype == np.float32
    assert np.all(np.sum(a * b, axis=1) > 0.999)


def test_empty_input_and_bare_string(minilm: MiniLMEmbedder) -> None:
    assert minilm.embed([]) == []
    assert minilm.embed_array([]).shape == (0, 384)
    with pytest.raises(TypeError):
        minilm.embed(CAT)


async def test_minilm_aembed(minilm: MiniLMEmbedder) -> None:
    vectors = await minilm.aembed([CAT, KITTEN])
    assert len(vectors) == 2
    assert cos(vectors[0], minilm.embed([CAT])[0]) > 0.999


def test_concurrent_first_use_loads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    builds = 0
    original = MiniLMEmbedder._build

    def counting_build(self: MiniLMEmbedder):
        nonlocal builds
        builds += 1
        return original(self)

    monkeypatch.setattr(MiniLMEmbedder, "_build", counting_build)
    fresh = MiniLMEmbedder()
    results: list[list[list[float]]] = []
    threads = [threading.Thread(target=lambda: results.append(fresh.embed([CAT]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == 1
    assert len(results) == 4
    assert all(cos(r[0], results[0][0]) > 0.9999 for r in results)


# --- factory -------------------------------------------------------------------------------------


def test_make_embedder() -> None:
    common = {"url": None, "model": "text-embedding-3-small", "api_key": None}
    assert make_embedder("none", **common) is None
    assert isinstance(make_embedder("minilm", **common), MiniLMEmbedder)
    with pytest.raises(ValueError, match="384"):
        make_embedder("minilm", **common, dimensions=768)
    with pytest.raises(ValueError, match="URL"):
        make_embedder("http", **common)
    with pytest.raises(ValueError, match="unknown embedder"):
        make_embedder("word2vec", **common)
    remote = make_embedder("http", url="http://127.0.0.1:1/v1", model="m", api_key=None, dimensions=256)
    assert isinstance(remote, HttpEmbedder)
    assert isinstance(remote, Embedder)
    assert (remote.name, remote.dimensions) == ("http:m", 256)
    with pytest.raises(ValueError, match="http"):
        HttpEmbedder(url="ftp://example.org", model="m")


# --- HTTP embedder against a real server ----------------------------------------------------------


class FakeOpenAI(ThreadingHTTPServer):
    """Serves ``POST /v1/embeddings`` in the OpenAI shape, computed by the local MiniLM.

    Rows come back in reverse order (clients must sort by ``index``) and unnormalised (clients must
    normalise). The model name ``slow`` sleeps, to exercise the client's timeout."""

    def __init__(self, embedder: MiniLMEmbedder) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.embedder = embedder
        self.requests: list[tuple[dict[str, str], dict]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def do_POST(self) -> None:
        if self.path != "/v1/embeddings":
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((dict(self.headers), body))
        if body["model"] == "slow":
            time.sleep(1.0)
        vectors = self.server.embedder.embed(body["input"])
        data = [
            {"object": "embedding", "index": i, "embedding": [3.0 * x for x in v]}
            for i, v in enumerate(vectors)
        ]
        payload = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server(minilm: MiniLMEmbedder) -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI(minilm)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_matches_local_model(server: FakeOpenAI, minilm: MiniLMEmbedder) -> None:
    remote = HttpEmbedder(url=server.url + "/", model="mini", api_key="sk-test", dimensions=384, batch_size=2)
    texts = [CAT, KITTEN, REVENUE, ""]
    try:
        got = remote.embed(texts)
    finally:
        remote.close()
    for g, want in zip(got, minilm.embed(texts), strict=True):
        assert np.linalg.norm(g) == pytest.approx(1.0, abs=1e-5)
        assert cos(g, want) > 0.9999
    headers, body = server.requests[-1]
    assert headers["Authorization"] == "Bearer sk-test"
    assert body == {"model": "mini", "input": [REVENUE, ""], "dimensions": 384}  # second chunk of 2
    assert remote.embed([]) == []


async def test_http_aembed(server: FakeOpenAI, minilm: MiniLMEmbedder) -> None:
    remote = HttpEmbedder(url=server.url, model="mini", api_key=None)
    try:
        got = await remote.aembed([CAT, REVENUE])
    finally:
        await remote.aclose()
    assert cos(got[0], minilm.embed([CAT])[0]) > 0.9999
    assert cos(got[1], minilm.embed([REVENUE])[0]) > 0.9999
    assert "Authorization" not in server.requests[-1][0]


async def test_http_wrong_dimension(server: FakeOpenAI) -> None:
    remote = HttpEmbedder(url=server.url, model="mini", dimensions=1536)
    with pytest.raises(EmbedderError, match=r"expected 1536.*received 384"):
        remote.embed([CAT])
    with pytest.raises(EmbedderError, match=r"expected 1536.*received 384"):
        await remote.aembed([CAT])
    await remote.aclose()


async def test_http_unreachable_and_errors(server: FakeOpenAI) -> None:
    down = HttpEmbedder(url=f"http://127.0.0.1:{free_port()}/v1", model="mini", timeout=2.0)
    with pytest.raises(EmbedderError, match="unreachable"):
        down.embed([CAT])
    with pytest.raises(EmbedderError, match="unreachable"):
        await down.aembed([CAT])
    await down.aclose()

    wrong_path = HttpEmbedder(url=server.url + "/nope", model="mini")
    with pytest.raises(EmbedderError, match="HTTP 404"):
        wrong_path.embed([CAT])
    wrong_path.close()

    slow = HttpEmbedder(url=server.url, model="slow", timeout=0.2)
    with pytest.raises(EmbedderError, match="Timeout"):
        slow.embed([CAT])
    slow.close()
