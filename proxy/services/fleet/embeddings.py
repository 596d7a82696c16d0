"""Embeddings from the fleet's `/v1/embeddings` with `--embedding-model`: the one client of that
route, for vector stores (many texts at once for ingestion, one for a search) and the semantic
cache (one text, with the cache's own shorter deadline).

Batched: at most `BATCH` texts per call, calls one after another (a big file does not take
every slot of a replica at once). Each call is bounded by `timeout` seconds; any failure (no
model configured, a refusal, a body that is not vLLM's, a timeout) is `EmbeddingFailed`, whose
message says what (never the texts).

Metered (embeddings are the fleet's work, charged like tokens): an `EmbeddingAccount` (the key's,
services/metering/embedding.py) is asked before each call what is left of the key's budget (it
raises when nothing is), and is told each call's tokens after it: the fleet's `usage`, or the texts'
bytes / 4 when the answer has none. A call is cut to the texts whose estimate fits what is left (at
least one text), so one embedding run overruns a budget by at most one call's estimate error or one
text.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
else:
    from proxy.core.vectors import lazynumpy as np
import orjson

from proxy.core.errors import ProxyError
from proxy.services.fleet.fleet import Fleet

PATH = "/v1/embeddings"
BATCH = 64
# vLLM's bound on one input is the model's context; ours keeps one call's body reasonable.
MAX_TEXT_CHARS = 32_000


# A text's tokens estimated from its bytes when the fleet reports no usage (as for a cut
# stream: services/metering/meter.py BYTES_PER_TOKEN).
BYTES_PER_TOKEN = 4


class EmbeddingFailed(Exception):
    pass


class EmbeddingAccount(Protocol):
    """Whose embedding work this is: asked before each call, told after it."""

    async def left(self) -> int | None:
        """Tokens the key may still spend (None: no budget). Raises (a ProxyError, e.g.
        QuotaExceeded) when nothing is left: no call is made then."""
        ...

    async def spent(self, tokens: int) -> None:
        ...


def estimated(text: str) -> int:
    return max(1, len(text.encode()) // BYTES_PER_TOKEN)


class Embedder:
    def __init__(self, fleet: Fleet, model: str | None, *, timeout: float = 60.0,
                 max_chars: int | None = MAX_TEXT_CHARS) -> None:
        self._fleet = fleet
        self.model = model
        self._timeout = timeout
        # Texts are cut to this (None: sent whole; the cache embeds its query as it is).
        self._max_chars = max_chars

    async def embed(self, texts: list[str], account: EmbeddingAccount | None = None
                    ) -> np.ndarray:
        """(len(texts), dim) float32, in order. `account`: the key charged, checked before
        each call (module docstring)."""
        if self.model is None:
            raise EmbeddingFailed("this server has no --embedding-model to index files with")
        if self._max_chars is not None:
            texts = [t[:self._max_chars] for t in texts]
        rows: list[np.ndarray] = []
        start = 0
        while start < len(texts):
            left = await account.left() if account is not None else None
            batch = _fitting(texts[start:start + BATCH], left)
            matrix, used = await self._call(batch)
            if account is not None:
                await account.spent(used if used is not None else
                                    sum(estimated(t) for t in batch))
            rows.append(matrix)
            start += len(batch)
        return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)

    async def _call(self, texts: list[str]) -> tuple[np.ndarray, int | None]:
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


def _fitting(texts: list[str], left: int | None) -> list[str]:
    """The first texts whose estimated tokens fit in `left` (at least one: the caller's
    account has refused already when nothing is left)."""
    if left is None:
        return texts
    total = 0
    for n, text in enumerate(texts):
        total += estimated(text)
        if total > left:
            return texts[:max(1, n)]
    return texts


def _parse(raw: bytes, count: int) -> tuple[np.ndarray, int | None]:
    """The vectors, and the tokens the answer's `usage` reports (None: none reported)."""
    try:
        body: Any = orjson.loads(raw)
        data = body["data"]
        ordered = sorted(data, key=lambda d: int(d["index"]))
        matrix = np.array([d["embedding"] for d in ordered], dtype=np.float32)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise EmbeddingFailed("the embedding model's answer is not vLLM's shape") from None
    if matrix.ndim != 2 or len(matrix) != count or matrix.shape[1] == 0:
        raise EmbeddingFailed("the embedding model's answer has the wrong number of vectors")
    usage = body.get("usage") if isinstance(body, dict) else None
    used = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(used, int) and isinstance(usage, dict):
        used = usage.get("total_tokens")
    return matrix, used if isinstance(used, int) and used >= 0 else None
