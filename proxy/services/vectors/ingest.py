"""Ingestion of a vector store's file, as a job on the background queue (store/jobqueue.py):
any instance's worker runs it, a single `make run` process too.

The queue's entries are the responses' (`r`: an id, `s`: a spec); an ingestion is a second job
kind on the same stream (services/jobs/kinds.py): its spec is
`{"kind": "vector_store_file", "tenant", "vector_store_id", "file_id"}`, with the key's token
limits (`limit`) when it has any. The worker
(services/jobs/runner.py) hands such entries here instead of to a generation. The same
heartbeats and reclaims apply: a worker that dies mid-file leaves the entry to be reclaimed,
and running a file twice only writes the same chunks again (finish_file replaces them).

    the file's text (Files.text_of: PDF, HTML, JSON, text) ─▶ chunks (core/vectors/chunking.py)
        ─▶ vectors (the fleet, --embedding-model) ─▶ unit rows, float32
        ─▶ stored with the file's `completed` (store/objects/vectors.py), or the file `failed` with
           last_error: `unsupported_file`/`invalid_file` (what extraction said), `server_error`
           (no embedding model, the fleet failed, the store is full, the key's token budget
           was spent before the last chunk: its embeddings count in the key's tpm and budget)

A store that is unavailable midway (StoreUnavailable) is raised: the entry stays pending and a
reclaim retries it. Nothing of the file's text is logged.

Memory (bounded, like every input that expands): one ingestion holds its text, its chunks (about
twice the text: neighbours share `overlap` tokens) and their packed float32 vectors, and briefly the
stored form of the chunks (store/objects/vectors.py serialises them: the peak, ~6.7x the file in
all). It never holds the file's words as a list (core/vectors/chunking.py cuts one chunk at a time),
every vector at once or twice, or a second copy of the file's bytes; vectors are embedded and packed
a batch at a time. A PDF, HTML or JSON file is read in a child process
(services/files/extraction.py). The ingestions of a process together wait for a share of
`--ingest-memory-budget` (services/vectors/memory.py) before reading a byte.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    from proxy.core.vectors import lazynumpy as np
import orjson

from proxy.core.errors import InvalidRequest, NotFound, QuotaExceeded
from proxy.core.vectors.chunking import chunk_text
from proxy.core.vectors.search import unit_rows
from proxy.core.vectors.stores import INVALID_FILE, SERVER_ERROR, chunking_of
from proxy.services.files.files import Files
from proxy.services.fleet.embeddings import BATCH, Embedder, EmbeddingAccount, EmbeddingFailed
from proxy.services.metering.embedding import EmbeddingAccounts
from proxy.services.vectors.memory import MemoryBudget
from proxy.settings.groups import VectorSettings
from proxy.store.objects.vectors import RedisVectorStores, StoredChunks
from proxy.telemetry.tracing import Tracing

log = logging.getLogger("proxy.vectors")

# The entry id of a file's ingestion: one per file while queued (the kind is the spec's).
INGEST_PREFIX = "vsjob_"
KIND = "vector_store_file"


def job_of(tenant: str, vs_id: str, file_id: str, traceparent: str | None = None, *,
           limit: dict[str, Any] | None = None) -> tuple[str, bytes]:
    """(the queue entry's id field, its spec) for one file's ingestion. `traceparent`: the
    adding request's span (tracing on), the ingestion's parent across the queue. `limit`: the
    key's token limits (services/metering/embedding.py `job_limit`), for the worker's charge."""
    spec: dict[str, Any] = {"kind": KIND, "tenant": tenant, "vector_store_id": vs_id,
                            "file_id": file_id}
    if traceparent:
        spec["traceparent"] = traceparent
    if limit:
        spec["limit"] = limit
    return f"{INGEST_PREFIX}{vs_id}_{file_id}", orjson.dumps(spec)


class Ingester:
    def __init__(self, stores: RedisVectorStores, files: Files, embedder: Embedder,
                 settings: VectorSettings, *, ttl_of: Any,
                 tracing: Tracing | None = None,
                 accounts: EmbeddingAccounts | None = None,
                 memory: MemoryBudget | None = None) -> None:
        self._stores = stores
        # The file's key pays its chunks' embeddings; none is made once its budget is spent.
        self._accounts = accounts or EmbeddingAccounts()
        self._tracing = tracing  # None: no span per ingestion (proxy/telemetry/tracing.py)
        self._files = files
        self._embedder = embedder
        self._settings = settings
        self.memory = memory or MemoryBudget(settings.ingest_memory_budget)
        # The store's remaining lifetime in seconds (services/vectors/stores.py `ttl_left`).
        self._ttl_of = ttl_of

    async def run(self, spec: bytes) -> None:
        try:
            data = orjson.loads(spec)
            tenant, vs_id, file_id = (str(data["tenant"]), str(data["vector_store_id"]),
                                      str(data["file_id"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return  # not a spec we can read: dropped (its file stays visibly in_progress)
        limit = data.get("limit")
        account = self._accounts.account_for(tenant, limit if isinstance(limit, dict) else None)
        if self._tracing is None:
            return await self._ingest(tenant, vs_id, file_id, account)
        parent = data.get("traceparent")
        # A child of the request that added the file, across the queue (as a background
        # job's); its embedding call and its writes are this span's children.
        with self._tracing.consumer_span(
                f"ingest {KIND}", parent if isinstance(parent, str) else None,
                {"proxy.vector_store.id": vs_id, "proxy.file.id": file_id}):
            return await self._ingest(tenant, vs_id, file_id, account)

    async def _ingest(self, tenant: str, vs_id: str, file_id: str,
                      account: EmbeddingAccount | None) -> None:
        file = await self._stores.get_file(tenant, vs_id, file_id)
        got = await self._stores.get(tenant, vs_id)
        if file is None or got is None or file.get("status") != "in_progress":
            return  # deleted meanwhile, or already done (a reclaim of a finished job)
        ttl = self._ttl_of(got[0])
        try:
            size = int((await self._files.retrieve(tenant, file["id"])).get("bytes") or 0)
        except NotFound:
            size = 0  # _chunks says why it fails
        async with self.memory.held(size):
            await self._ingest_held(tenant, file, ttl, account)

    async def _ingest_held(self, tenant: str, file: dict[str, Any], ttl: int,
                           account: EmbeddingAccount | None) -> None:
        started = time.monotonic()
        try:
            chunks = await self._chunks(tenant, file, account)
        except _Failed as exc:
            await self._fail(tenant, file, exc.code, exc.message, ttl)
            log.info("vector store file failed (%s) in %.0f ms", exc.code,
                     (time.monotonic() - started) * 1000)
            return
        done = {**file, "status": "completed", "last_error": None,
                "usage_bytes": len(chunks.vectors) + sum(len(t) for t in chunks.texts)}
        stored = await self._stores.finish_file(tenant, done, chunks, began=file, ttl=ttl,
                                                max_chunks=self._settings.max_chunks)
        if stored == -1:
            await self._fail(tenant, file, SERVER_ERROR,
                             f"the vector store would hold more than "
                             f"{self._settings.max_chunks} chunks (--vector-store-max-chunks)",
                             ttl)
            return
        log.info("vector store file: %d chunks in %.0f ms", len(chunks.texts),
                 (time.monotonic() - started) * 1000)

    async def _chunks(self, tenant: str, file: dict[str, Any],
                      account: EmbeddingAccount | None) -> StoredChunks:
        limit = self._files.max_bytes  # no file's text is read past the largest file's size
        try:
            text = await self._files.text_of(tenant, file["id"], "file", limit=limit)
        except InvalidRequest as exc:
            message = exc.message.removeprefix("Invalid 'file': ").rstrip(".")
            raise _Failed(exc.code or INVALID_FILE, message) from None
        except NotFound:
            raise _Failed(INVALID_FILE, "the file no longer exists") from None
        try:  # its vectors count in the key's storage budget: none embedded past it
            await self._files.check_storage(tenant)
        except QuotaExceeded as exc:
            raise _Failed(SERVER_ERROR, exc.message) from None
        if len(text) > limit:
            raise _Failed(INVALID_FILE, f"the file's text is longer than {limit} bytes "
                                        "(--max-file-bytes)")
        strategy = chunking_of(file)
        # The chunks are what is stored: held to the end anyway. Cut one at a time (never the
        # file's words as a list), and all before any is embedded, so that a file of more
        # chunks than a store holds fails before the fleet works for it.
        texts = await asyncio.to_thread(chunk_text, text, strategy.max_tokens,
                                        strategy.overlap)
        del text
        if not texts:
            raise _Failed(INVALID_FILE, "the file has no text to index")
        if len(texts) > self._settings.max_chunks:
            raise _Failed(SERVER_ERROR, f"the file makes {len(texts)} chunks; a vector store "
                                        f"holds at most {self._settings.max_chunks}")
        blob = bytearray()  # the vectors, packed a batch at a time: float32 rows
        dim = 0
        for start in range(0, len(texts), BATCH):
            try:
                vectors = unit_rows(await self._embedder.embed(texts[start:start + BATCH],
                                                               account))
            except EmbeddingFailed as exc:
                raise _Failed(SERVER_ERROR, str(exc)) from None
            except QuotaExceeded as exc:  # checked before each call: the rest is not embedded
                raise _Failed(SERVER_ERROR, f"indexing stopped: {exc.message}") from None
            dim = int(vectors.shape[1])
            blob += np.ascontiguousarray(vectors, dtype="<f4").tobytes()
        meta = await self._files.retrieve(tenant, file["id"])
        return StoredChunks({"file_id": file["id"], "filename": meta.get("filename") or "",
                             "attributes": file.get("attributes") or {}},
                            bytes(blob), dim, texts)

    async def _fail(self, tenant: str, file: dict[str, Any], code: str, message: str,
                    ttl: int) -> None:
        failed = {**file, "status": "failed", "usage_bytes": 0,
                  "last_error": {"code": code, "message": message}}
        await self._stores.finish_file(tenant, failed, None, began=file, ttl=ttl,
                                       max_chunks=self._settings.max_chunks)


class _Failed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
