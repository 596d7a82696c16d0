"""Vector stores (`client.vector_stores`, `.files`, `.file_batches`, `.search`), per client key.

A store lives `--response-ttl` seconds from its last activity, or less when it asks so
(`expires_after: {anchor: last_active_at, days}`); adding files or updating it renews every key
it has. A file added to a store (directly, with the store's create, or in a batch) must be the
key's own (`/v1/files`: another key's id is unknown, 404); it starts `in_progress` and one
ingestion job per file goes on the background queue (ingest.py), under the key's share of it
(services/jobs/shares.py).

Nothing is queued that will not run: a file listed twice is added once (its batch counts it
once); a file already `in_progress` (its ingestion is queued or running) or `completed` in the
store with the same attributes and chunking is left as it is (a `failed` one, or one given new
attributes or chunking, is ingested again). A request whose new files do not fit in
what is left of the key's share (or of the queue) is refused whole with 429 and Retry-After
before anything is stored; more new files than a key's whole share is a 400. Should a
concurrent enqueue of the same key take the room between that check and the enqueue, the
request's files fail (`server_error`, "add the file again later") rather than stay
in_progress for ever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.core.errors import NotFound, ProxyError
from proxy.core.request.fields import (
    bad,
    expect_str,
)
from proxy.core.request.paging import PageRequest, list_body, paginate
from proxy.core.vectors import stores as v
from proxy.core.vectors.search import result
from proxy.services.files.files import Files
from proxy.services.fleet.embeddings import EmbeddingFailed
from proxy.services.jobs.shares import QueueShare, refused
from proxy.services.vectors.ingest import job_of
from proxy.services.vectors.search import Searcher, UnknownStore
from proxy.settings.groups import VectorSettings
from proxy.store.base import JobQueue
from proxy.store.objects.vectors import RedisVectorStores
from proxy.telemetry.tracing import current_traceparent


def store_missing(vs_id: str, param: str = "vector_store_id") -> NotFound:
    return NotFound(f"No vector store found with id '{vs_id}'.", param=param)


@dataclass(frozen=True)
class VectorStores:
    stores: RedisVectorStores
    files: Files
    queue: JobQueue
    searcher: Searcher
    settings: VectorSettings
    ttl: int  # --response-ttl: no store outlives it
    share: QueueShare  # a key's share of the job queue, and the queue's bound
    clock: Callable[[], float] = time.time

    def ttl_left(self, record: dict[str, Any]) -> int:
        """Seconds the store has to live (at least 1: a key's TTL must be positive)."""
        return max(1, int(record.get("expires_at") or 0) - int(self.clock()))

    # -- stores --------------------------------------------------------------------------------
    async def create(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        name = v.parse_name(body)
        days = v.parse_expires_after(body.get("expires_after"))
        metadata = v.parse_metadata(body)
        chunking = v.parse_chunking(body.get("chunking_strategy"))
        file_ids = (v.parse_file_ids(body["file_ids"], "file_ids", self.settings.max_files)
                    if body.get("file_ids") is not None else [])
        await self._own_files(tenant, file_ids, "file_ids")
        now = int(self.clock())
        ttl = v.lifetime(days, self.ttl)
        record = v.store_record(v.store_id(), now, name, days, metadata, now + ttl)
        await self.stores.create(tenant, record, ttl)
        if file_ids:
            await self._add(tenant, record, [], [(f, None, chunking) for f in file_ids], None,
                            "file_ids")
        return await self.retrieve(tenant, record["id"])

    async def retrieve(self, tenant: str, vs_id: str) -> dict[str, Any]:
        got = await self.stores.get(tenant, vs_id)
        if got is None:
            raise store_missing(vs_id)
        return v.store_object(*got)

    async def update(self, tenant: str, vs_id: str, body: dict[str, Any]) -> dict[str, Any]:
        record, _ = await self._get(tenant, vs_id)
        if "name" in body:
            record["name"] = v.parse_name(body) or ""
        if body.get("metadata") is not None:
            record["metadata"] = v.parse_metadata(body)
        if "expires_after" in body:
            days = v.parse_expires_after(body["expires_after"])
            record["expires_after"] = None if days is None else {"anchor": "last_active_at",
                                                                 "days": days}
        await self._touch(tenant, record)
        return await self.retrieve(tenant, vs_id)

    async def delete(self, tenant: str, vs_id: str) -> dict[str, Any]:
        if not await self.stores.delete(tenant, vs_id):
            raise store_missing(vs_id)
        return {"id": vs_id, "object": "vector_store.deleted", "deleted": True}

    async def list_stores(self, tenant: str, page: PageRequest) -> dict[str, Any]:
        found, more = await self.stores.page(tenant, page)
        return list_body([v.store_object(r, f) for r, f in found], more)

    # -- files ---------------------------------------------------------------------------------
    async def create_file(self, tenant: str, vs_id: str, body: dict[str, Any]
                          ) -> dict[str, Any]:
        file_id = expect_str(body.get("file_id"), "file_id")
        attributes = v.parse_attributes(body.get("attributes"))
        chunking = v.parse_chunking(body.get("chunking_strategy"))
        record, files = await self._get(tenant, vs_id)
        await self._own_files(tenant, [file_id], "file_id")
        await self._add(tenant, record, files, [(file_id, attributes, chunking)], None,
                        "file_id")
        return await self.retrieve_file(tenant, vs_id, file_id)

    async def retrieve_file(self, tenant: str, vs_id: str, file_id: str) -> dict[str, Any]:
        file = await self.stores.get_file(tenant, vs_id, file_id)
        if file is None:
            await self._get(tenant, vs_id)  # an unknown store says so first
            raise NotFound(f"No file found with id '{file_id}' in vector store '{vs_id}'.",
                           param="file_id")
        return file

    async def list_files(self, tenant: str, vs_id: str, page: PageRequest,
                         status: str | None, batch_id: str | None = None) -> dict[str, Any]:
        _, files = await self._get(tenant, vs_id)
        if status is not None:
            v_status = status if status in v.FILE_STATUSES else None
            if v_status is None:
                raise bad("filter", f"Invalid 'filter': {status!r}; expected one of "
                                    f"{', '.join(v.FILE_STATUSES)}.")
            files = [f for f in files if f["status"] == v_status]
        if batch_id is not None:
            batch = await self._batch(tenant, vs_id, batch_id)
            mine = set(batch["file_ids"])
            files = [f for f in files if f["id"] in mine]
        files.sort(key=lambda f: (f["created_at"], f["id"]))
        data, more = paginate(files, page)
        return list_body(data, more)

    async def delete_file(self, tenant: str, vs_id: str, file_id: str) -> dict[str, Any]:
        if not await self.stores.delete_file(tenant, vs_id, file_id):
            await self._get(tenant, vs_id)
            raise NotFound(f"No file found with id '{file_id}' in vector store '{vs_id}'.",
                           param="file_id")
        return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}

    # -- batches -------------------------------------------------------------------------------
    async def create_batch(self, tenant: str, vs_id: str, body: dict[str, Any]
                           ) -> dict[str, Any]:
        entries = v.parse_batch(body, self.settings.max_files)  # each file once
        param = "file_ids" if body.get("files") is None else "files"
        record, files = await self._get(tenant, vs_id)
        await self._own_files(tenant, [e[0] for e in entries], param)
        batch: dict[str, Any] = {"id": v.batch_id(), "created_at": int(self.clock()),
                                 "vector_store_id": vs_id, "file_ids": [e[0] for e in entries]}
        await self._add(tenant, record, files, entries, batch, param)
        return await self.retrieve_batch(tenant, vs_id, batch["id"])

    async def retrieve_batch(self, tenant: str, vs_id: str, batch_id: str) -> dict[str, Any]:
        batch = await self._batch(tenant, vs_id, batch_id)
        _, files = await self._get(tenant, vs_id)
        return v.batch_object(batch, files)

    async def _batch(self, tenant: str, vs_id: str, batch_id: str) -> dict[str, Any]:
        batch = await self.stores.get_batch(tenant, vs_id, batch_id)
        if batch is None:
            await self._get(tenant, vs_id)
            raise NotFound(f"No file batch found with id '{batch_id}'.", param="batch_id")
        return batch

    # -- search --------------------------------------------------------------------------------
    async def search(self, tenant: str, vs_id: str, body: dict[str, Any]) -> dict[str, Any]:
        asked = v.parse_search(body)
        try:
            hits = await self.searcher.search(tenant, [vs_id], asked.query, limit=asked.limit,
                                               threshold=asked.threshold, filters=asked.filters)
        except UnknownStore:
            raise store_missing(vs_id) from None
        except EmbeddingFailed as exc:
            raise ProxyError(f"The search could not be made: {exc}.", status=503,
                             param="query") from None
        return {"object": "vector_store.search_results.page", "search_query": asked.queries,
                "data": [result(h) for h in hits], "has_more": False, "next_page": None}

    # -- plumbing ------------------------------------------------------------------------------
    async def _get(self, tenant: str, vs_id: str
                   ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        got = await self.stores.get(tenant, vs_id)
        if got is None:
            raise store_missing(vs_id)
        return got

    async def _own_files(self, tenant: str, file_ids: list[str], param: str) -> None:
        for file_id in file_ids:
            try:
                await self.files.retrieve(tenant, file_id)
            except NotFound:  # another key's file too: an unknown id
                raise self.files.missing(file_id, param) from None

    async def _touch(self, tenant: str, record: dict[str, Any]) -> None:
        now = int(self.clock())
        days = (record.get("expires_after") or {}).get("days")
        ttl = v.lifetime(days, self.ttl)
        record.update(last_active_at=now, expires_at=now + ttl)
        if not await self.stores.renew(tenant, record, ttl):
            raise store_missing(record["id"])

    async def _add(self, tenant: str, record: dict[str, Any], present: list[dict[str, Any]],
                   entries: list[v.Entry], batch: dict[str, Any] | None, param: str) -> None:
        """Add `entries` (each file once) to a store whose files are `present`: the new ones,
        those that failed, and those given other attributes or chunking start in_progress with
        their ingestion queued; the others (queued, running or done as asked) stay."""
        vs_id = record["id"]
        by_id = {f["id"]: f for f in present}
        fresh = [e for e in entries if not _unchanged(by_id.get(e[0]), e[1], e[2])]
        if len(fresh) > self.share.per_key:
            raise bad(param, f"Invalid '{param}': {len(fresh)} new files to ingest; one key may "
                             f"have at most {self.share.per_key} queued (--max-queued-jobs).")
        if fresh:
            room = await self.queue.room(tenant, limit=self.share.per_key,
                                         total=self.share.total)
            if room.key < len(fresh) or room.queue < len(fresh):
                raise refused("key_full" if room.key < len(fresh) else "queue_full",
                              self.share, "ingestion of these files")
        now = int(self.clock())
        files = [v.file_record(file_id, vs_id, now, attributes, chunking)
                 for file_id, attributes, chunking in fresh]
        await self._touch(tenant, record)
        added = await self.stores.add_files(tenant, vs_id, files, ttl=self.ttl_left(record),
                                             max_files=self.settings.max_files, batch=batch)
        if added == 0:
            raise store_missing(vs_id)
        if added == -1:
            raise bad(param, f"A vector store holds at most {self.settings.max_files} "
                             "files (--vector-store-max-files).")
        if not files:
            return
        traceparent = current_traceparent()
        # The key's token limits ride in the job: a worker without --keys-file charges it.
        limit = self.searcher.accounts.job_limit(tenant)
        jobs = [job_of(tenant, vs_id, file["id"], traceparent, limit=limit) for file in files]
        answer = await self.queue.enqueue(tenant, jobs, limit=self.share.per_key,
                                          total=self.share.total)
        if answer == "queued":
            return
        for file in files:  # the room measured above was taken meanwhile: fail, never hang
            failed = {**file, "status": "failed", "last_error": {
                "code": v.SERVER_ERROR, "message": "the ingestion queue is full; add the "
                                                   "file again later"}}
            await self.stores.finish_file(tenant, failed, None, began=file,
                                          ttl=self.ttl_left(record),
                                          max_chunks=self.settings.max_chunks)


def _unchanged(file: dict[str, Any] | None, attributes: dict[str, Any] | None,
               chunking: v.Chunking) -> bool:
    """The file (its entry in the store, if any) is ingested or being ingested as this add
    asks: a new job would only do the same work again."""
    return (file is not None and file.get("status") in ("in_progress", "completed")
            and (file.get("attributes") or {}) == (attributes or {})
            and file.get("chunking_strategy") == chunking.strategy())
