"""An ingestion run in-process on fakes (no Redis, no fleet), for measuring what one costs:
`ingest_text` ingests one text file as the worker would and returns the tracemalloc peak (bytes
allocated at once above what was held before) and the chunks stored. The fakes keep what the
real store and embedder would hold at their peak: the store serialises the chunks' texts as
store/objects/vectors.py does, the embedder returns a float32 batch as embeddings.py does."""

from __future__ import annotations

import asyncio
import random
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson

from proxy.core.vectors.stores import file_record, parse_chunking
from proxy.services.files.files import Files
from proxy.services.vectors.ingest import Ingester, job_of
from proxy.settings.groups import VectorSettings

TENANT = "t"
DIM = 256
CHUNK = 512 * 1024


def text_of(size: int, seed: int = 7) -> bytes:
    """`size` bytes of English-like words (1-10 letters, ~5.5 on average) and spaces."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choice("etaoinshrdlu") for _ in range(rnd.randint(1, 10)))
             for _ in range(4096)]
    out = bytearray()
    while len(out) < size:
        out += " ".join(rnd.choices(words, k=2048)).encode() + b"\n"
    return bytes(out[:size])


class Blobs:
    """A BlobStore (store/objects/files.py) of files `file-1`, `file-2`... holding `data` each; how
    many times a file's bytes were read."""

    def __init__(self, data: bytes, filename: str, count: int = 1) -> None:
        self.data = data
        self.ids = [f"file-{i}" for i in range(1, count + 1)]
        self.meta = {"bytes": len(data), "filename": filename}
        self.reads = 0

    async def get(self, tenant: str, file_id: str) -> dict[str, Any] | None:
        return {"id": file_id, **self.meta} if file_id in self.ids else None

    async def read(self, tenant: str, file_id: str) -> AsyncIterator[bytes]:
        self.reads += 1
        for start in range(0, len(self.data), CHUNK):
            yield self.data[start:start + CHUNK]


class Budget:
    async def check_storage(self, tenant: str) -> None:
        return None


class Stores:
    def __init__(self) -> None:
        # As a file added with the default ("auto") chunking: 800 tokens, 400 shared.
        self.file = file_record("file-1", "vs_1", 0, None, parse_chunking(None))
        self.done: dict[str, Any] = {}

    async def get_file(self, tenant: str, vs_id: str, file_id: str) -> dict[str, Any]:
        return dict(self.file)

    async def get(self, tenant: str, vs_id: str) -> tuple[dict[str, Any], int]:
        return {"id": vs_id}, 0

    async def finish_file(self, tenant: str, file: dict[str, Any], chunks: Any, **_: Any
                          ) -> int:
        # As store/objects/vectors.py sends it.
        stored = orjson.dumps(chunks.texts) if chunks else b""
        self.done = {"status": file["status"], "last_error": file.get("last_error"),
                     "chunks": len(chunks.texts) if chunks else 0, "stored": len(stored)}
        return 1


class Embedder:
    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: list[str], account: object = None) -> np.ndarray:
        self.calls += 1
        return np.ones((len(texts), DIM), np.float32)


def ingester(data: bytes, filename: str = "big.txt", **kwargs: Any) -> tuple[Ingester, Stores]:
    stores = Stores()
    files = Files(Blobs(data, filename), Budget(), ttl=3600,  # type: ignore[arg-type]
                  max_bytes=64 * 1024 * 1024, max_in_flight=1)
    return Ingester(stores, files, Embedder(), VectorSettings(),  # type: ignore[arg-type]
                    ttl_of=lambda record: 3600, **kwargs), stores


def ingest_text(data: bytes) -> tuple[int, dict[str, Any]]:
    """(the tracemalloc peak of one ingestion of `data` as a text file, the stored outcome)."""
    run, stores = ingester(data)
    _, spec = job_of(TENANT, "vs_1", "file-1")
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        asyncio.run(run.run(spec))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, stores.done
