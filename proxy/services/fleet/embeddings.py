"""Embeddings from the fleet's `/v1/embeddings` with `--embedding-model`: the one client of that
route, for vector stores (many texts at once for ingestion, one for a search) and the semantic
cache (one text, with the cache's own shorter deadline).

Batched: at most `BATCH` texts per call, calls one after another (a big file does not take
every slot of a replica at once). Each call is bounded by `timeout` seconds; any failure (no
model configured, a refusal, a body that is not vLLM's, a timeout) is `EmbeddingFailed`, whose
message says what (never the texts).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import orjson

from proxy.core.errors import ProxyError
from proxy.services.fleet.fleet import Fleet

PATH = "/v1/embeddings"
BATCH = 64
# vLLM's bound on one input is the model's context; ours keeps one call's body reasonable.
MAX_TEXT_CHARS = 32_000


class EmbeddingFailed(Exception):
    pass


class Embedder:
    def __init__(self, fleet: Fleet, model: str | None, *, timeout: float = 60.0,
                 max_chars: int | None = MAX_TEXT_CHARS) -> None:
        self._fleet = fleet
        self.model = model
        self._timeout = timeout
        # Texts are cut to this (None: sent whole; the cache embeds its query as it is).
        self._max_chars = max_chars

    async def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, in order."""
        if self.model is None:
            raise EmbeddingFailed("this server has no --embedding-model to index files with")
        rows: list[np.ndarray] = []
        for start in range(0, len(texts), BATCH):
            batch = texts[start:start + BATCH]
            if self._max_chars is not None:
                batch = [t[:self._max_chars] for t in batch]
            rows.append(await self._call(batch))
        return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)

    async def _call(self, texts: list[str]) -> np.ndarray:
        assert self.model is not None
        body = orjson.dumps({"model": self.model, "input": texts})
        try:
            async with asyncio.timeout(self._timeout):
                call = await self._fleet.open(self.model, PATH, body, stream=False)
                status = call.response.status_code
                raw = await call.read_all()
        except TimeoutError:
            raise EmbeddingFailed(f"the embedding model took over {self._timeout:g}s") from None
        except (ProxyError, OSError) as exc:
            raise EmbeddingFailed(f"the embedding model is unavailable: "
                                  f"{getattr(exc, 'message', type(exc).__name__)}") from None
        if status != 200:
            raise EmbeddingFailed(f"the embedding model answered HTTP {status}")
        return _parse(raw, len(texts))


def _parse(raw: bytes, count: int) -> np.ndarray:
    try:
        data: Any = orjson.loads(raw)["data"]
        ordered = sorted(data, key=lambda d: int(d["index"]))
        matrix = np.array([d["embedding"] for d in ordered], dtype=np.float32)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise EmbeddingFailed("the embedding model's answer is not vLLM's shape") from None
    if matrix.ndim != 2 or len(matrix) != count or matrix.shape[1] == 0:
        raise EmbeddingFailed("the embedding model's answer has the wrong number of vectors")
    return matrix
