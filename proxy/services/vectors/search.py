"""Searching vector stores: the query embedded by the fleet, each store's chunks scored by exact
cosine (core/vectors/search.py), the hits merged.

A store's vectors are kept in this process between searches (an LRU of `Corpus`es bounded by
`cache_bytes` in all), keyed by the store's `ver` (store/objects/vectors.py), which every completed
or deleted file bumps: a search reads that one field and reloads the store only when it moved, so
a search of an unchanged store costs one HGET plus the product, and a store changed by any
instance is never searched stale. A store bigger than the whole cache is loaded per search and
not kept. Scoring runs in a worker thread for big stores (numpy releases the GIL), inline for
small ones (a thread hop costs more than the product).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    from proxy.core.vectors import lazynumpy as np

from proxy.core.vectors.search import Corpus, FileMeta, Hit, merged, search
from proxy.services.fleet.embeddings import Embedder
from proxy.services.metering.embedding import EmbeddingAccounts
from proxy.store.objects.vectors import RedisVectorStores

# Rows past which the product runs in a thread.
THREAD_ROWS = 4096


class UnknownStore(Exception):
    def __init__(self, vs_id: str) -> None:
        super().__init__(vs_id)
        self.vs_id = vs_id


class Searcher:
    def __init__(self, stores: RedisVectorStores, embedder: Embedder, *,
                 cache_bytes: int, accounts: EmbeddingAccounts | None = None) -> None:
        self._stores = stores
        self.embedder = embedder
        # The key a query's embedding is charged to (its tpm and token_budget).
        self.accounts = accounts or EmbeddingAccounts()
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[tuple[str, str], tuple[int, Corpus]] = OrderedDict()
        self._held = 0

    async def search(self, tenant: str, vs_ids: list[str], query: str, *, limit: int,
                     threshold: float = 0.0, filters: dict[str, Any] | None = None,
                     job_limit: dict[str, Any] | None = None) -> list[Hit]:
        """Raises UnknownStore (no such store for this key), EmbeddingFailed, or QuotaExceeded
        (the key's token budget is spent: no embedding is made). `job_limit`: the key's token
        limits as a job carried them (services/metering/embedding.py), else this process's."""
        corpora = [await self.corpus(tenant, vs_id) for vs_id in vs_ids]
        if not any(c.texts for c in corpora):
            return []
        account = self.accounts.account_for(tenant, job_limit)
        vector = (await self.embedder.embed([query], account))[0]
        results = []
        for corpus in corpora:
            if len(corpus.texts) > THREAD_ROWS:
                hits = await asyncio.to_thread(search, corpus, vector, limit=limit,
                                               threshold=threshold, filters=filters)
            else:
                hits = search(corpus, vector, limit=limit, threshold=threshold, filters=filters)
            results.append(hits)
        return merged(results, limit)

    async def known(self, tenant: str, vs_id: str) -> bool:
        """The key holds this store (another key's is as unknown as none)."""
        return await self._stores.version(tenant, vs_id) is not None

    async def corpus(self, tenant: str, vs_id: str) -> Corpus:
        version = await self._stores.version(tenant, vs_id)
        if version is None:
            raise UnknownStore(vs_id)
        key = (tenant, vs_id)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == version:
            self._cache.move_to_end(key)
            return cached[1]
        corpus = await self._load(tenant, vs_id)
        self._keep(key, version, corpus)
        return corpus

    async def _load(self, tenant: str, vs_id: str) -> Corpus:
        got = await self._stores.get(tenant, vs_id)
        if got is None:
            raise UnknownStore(vs_id)
        done = [f["id"] for f in got[1] if f.get("status") == "completed"]
        stored = await self._stores.load(tenant, vs_id, done)

        def build() -> Corpus:
            return Corpus.build([
                (FileMeta(str(s.meta.get("file_id")), str(s.meta.get("filename") or ""),
                          dict(s.meta.get("attributes") or {})),
                 np.frombuffer(s.vectors, np.float32).reshape(-1, s.dim), s.texts)
                for s in stored if s.dim > 0])

        rows = sum(len(chunks.texts) for chunks in stored)
        return await asyncio.to_thread(build) if rows > THREAD_ROWS else build()

    def _keep(self, key: tuple[str, str], version: int, corpus: Corpus) -> None:
        old = self._cache.pop(key, None)
        if old is not None:
            self._held -= old[1].nbytes
        if corpus.nbytes > self._cache_bytes:
            return  # bigger than the whole cache: used for this search only
        self._cache[key] = (version, corpus)
        self._held += corpus.nbytes
        while self._held > self._cache_bytes and self._cache:
            _, (_, evicted) = self._cache.popitem(last=False)
            self._held -= evicted.nbytes
