"""The file_search hosted runner (services/tools/hosted.py `HostedRunner`): the model's query
searched in the request's vector stores (`HostedCall.options`, from the request's tool), those of
the response's own key only. A store the key does not hold (another key's, or none) is refused
before the model runs (`vet`: a 404 naming `tools[i].vector_store_ids`, so no key searches
another's); one deleted while the response runs is an unknown one then: the call fails, nothing of
it shown. `run` never raises: a failure is a `failed` result the model answers without. One log line
per search: its outcome and time, never the query.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from proxy.core.errors import NotFound, ProxyError
from proxy.core.filesearch import query_of, search_failed, searched
from proxy.core.hosted import (
    DEFAULT_FILE_RESULTS,
    FILE_SEARCH,
    HostedCall,
    HostedKind,
    HostedResult,
)
from proxy.core.request.fields import at
from proxy.services.fleet.embeddings import EmbeddingFailed
from proxy.services.vectors.search import Searcher, UnknownStore

log = logging.getLogger("proxy.vectors")


class FileSearch:
    kind: HostedKind = FILE_SEARCH

    def __init__(self, searcher: Searcher) -> None:
        self._searcher = searcher

    async def vet(self, tenant: str, options: dict[str, Any], path: str) -> dict[str, Any]:
        """Every store the tool names is one of this key's (one HGET each: at most 16). The
        key's token limits join the run's options: a background response's worker, maybe
        started without `--keys-file`, charges its queries' embeddings with them."""
        for vs_id in options.get("vector_store_ids") or ():
            if not await self._searcher.known(tenant, str(vs_id)):
                raise NotFound(f"No vector store found with id '{vs_id}'.",
                               param=at(path, "vector_store_ids"))
        limit = self._searcher.accounts.job_limit(tenant)
        return {"limit": limit} if limit else {}

    async def run(self, arguments: str, first: int, call: HostedCall | None = None
                  ) -> HostedResult:
        options = call.options if call is not None else {}
        include = bool(options.get("include_results"))
        query = query_of(arguments)
        stores = [str(s) for s in options.get("vector_store_ids") or ()]
        if not query or not stores or call is None:
            return search_failed(query, "the call named no query or no vector store",
                                 include=include)
        ranking = options.get("ranking_options") or {}
        started = time.monotonic()
        try:
            hits = await self._searcher.search(
                call.tenant, stores, query,
                limit=int(options.get("max_num_results") or DEFAULT_FILE_RESULTS),
                threshold=float(ranking.get("score_threshold") or 0.0),
                filters=options.get("filters"), job_limit=_limit_of(options))
        except UnknownStore as exc:
            return search_failed(query, f"no vector store {exc.vs_id!r}", include=include)
        except (EmbeddingFailed, ProxyError) as exc:
            log.info("file search failed in %.0f ms", (time.monotonic() - started) * 1000)
            return search_failed(query, str(exc), include=include)
        log.info("file search: %d passages in %.0f ms", len(hits),
                 (time.monotonic() - started) * 1000)
        return searched(query, hits, first, include=include)


def _limit_of(options: dict[str, Any]) -> dict[str, Any] | None:
    limit = options.get("limit")
    return limit if isinstance(limit, dict) else None
