"""The response cache: look an answer up, keep a finished one, serve a hit as JSON or events.

    request ─▶ key (core/cache/key.py) ─▶ GET the exact entry ──hit──▶ served
                                            │ miss, semantic mode
                                            ▼
                 embed the last user message (fleet /v1/embeddings, bounded in time)
                 ─▶ candidates of the probed buckets in its namespace (one script)
                 ─▶ exact cosine (numpy) ≥ threshold and an equal guard ─▶ GET that entry

Rules:
- A cache never fails a request: a Redis failure, an embedding call that errs or is slower than
  `--cache-embedding-timeout`, a corrupt entry, are misses (counted, never raised).
- One round trip on an exact miss (the GET). Writes run as tasks after the client has its
  answer; they never delay it.
- Kept only: a `completed` answer whose output is messages and reasoning (no tool calls of any
  kind), within `--cache-max-entry-bytes`; never incomplete, failed, cancelled, background, or
  a stream the client left. The same test runs again before a hit is served.
- Scoped per API key: the tenant is in every key and in the digests.
- Metrics per request, never per token: `proxy_cache_requests_total{route,result}` (hit, miss,
  bypass), `proxy_cache_hits_total{route,kind}` (exact, semantic), the lookup time as
  `proxy_cache_lookup_seconds_sum` / `_count`, `proxy_cache_writes_total{route}` and
  `proxy_cache_embedding_errors_total`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from proxy.core import ids as idp
from proxy.core import types as t
from proxy.core.cache.completion import storable as chat_storable
from proxy.core.cache.key import (
    ROUTE_RESPONSES,
    CacheKey,
    Directives,
    cache_key,
    responses_material,
)
from proxy.core.cache.vectors import Hyperplanes, best, from_bytes, to_bytes, unit
from proxy.core.errors import ProxyError, StoreUnavailable, failure_cause
from proxy.core.events.replay import events_from_response
from proxy.core.ids import IdFactory, new_id
from proxy.core.request.create import ResponsesRequest
from proxy.core.types import EventBatch, Item, ResponseObject
from proxy.services.fleet.embeddings import Embedder, EmbeddingFailed
from proxy.services.fleet.fleet import Fleet
from proxy.services.metering.embedding import EmbeddingAccounts
from proxy.services.process import offload
from proxy.services.process.loops import TaskSet
from proxy.settings import CacheSettings, StoreSettings
from proxy.store.base import ResponseRecord, Store
from proxy.store.objects.cache import RedisCache, VectorWrite
from proxy.telemetry.metrics import CacheResult, Metrics

if TYPE_CHECKING:
    from proxy.core.cache.vectors import Vector

log = logging.getLogger("proxy.cache")

HIT: Final = "hit"
MISS: Final = "miss"
BYPASS: Final = "bypass"
HEADER = "x-proxy-cache"
# Output items a cached Responses answer may hold: anything else (function, custom, MCP calls,
# approval requests, ...) asks the client or a tool to act, and is never replayed.
_SERVABLE_ITEMS = frozenset({t.MESSAGE, t.REASONING})
_NEW_ITEM_ID = {t.MESSAGE: idp.MESSAGE, t.REASONING: idp.REASONING}


@dataclass
class Lookup:
    """One request's dealings with the cache. `state` is None when the cache is off."""

    state: CacheResult | None = None
    route: str = ""
    key: CacheKey | None = None
    directives: Directives = field(default_factory=Directives)
    body: dict[str, Any] | None = None  # the cached answer, on a hit
    vector: Vector | None = None  # the query's embedding, reused by the write

    @property
    def hit(self) -> bool:
        return self.state == HIT

    def headers(self) -> dict[str, str]:
        return {HEADER: self.state} if self.state else {}


OFF = Lookup()


class ResponseCache:
    def __init__(self, store: RedisCache, fleet: Fleet, settings: CacheSettings,
                 store_settings: StoreSettings, metrics: Metrics, tasks: TaskSet,
                 objects: Store, *, clock: Callable[[], float] = time.time,
                 ids: IdFactory = new_id, accounts: EmbeddingAccounts | None = None) -> None:
        self._store = store
        # The key a query's embedding is charged to (its tpm and token_budget: embeddings are
        # the fleet's work too).
        self._accounts = accounts or EmbeddingAccounts()
        self._objects = objects  # where a stored hit goes, like any stored response
        self._ids = ids
        self._fleet = fleet
        self._settings = settings
        self._ttls = store_settings  # a hit is stored for as long as a generated answer
        self._metrics = metrics
        self._tasks = tasks
        self._clock = clock
        self._semantic = settings.mode == "semantic"
        self._embedder = Embedder(fleet, settings.embedding_model,
                                  timeout=settings.embedding_timeout, max_chars=None)
        self._planes: dict[int, Hyperplanes] = {}  # by vector length

    @property
    def enabled(self) -> bool:
        return self._settings.mode != "off"

    # -- /v1/responses -----------------------------------------------------------------------
    async def lookup_response(self, tenant: str, request: ResponsesRequest,
                              chat: dict[str, Any], directives: Directives, *,
                              size: int = 0) -> Lookup:
        """Keyed on the upstream chat request (the expanded history included) and the fields
        that shape the Response beyond it. Background requests bypass the cache, and so do
        those asking for logprobs: they measure one sampling, as the chat pass-through cache
        also holds (core/cache/completion.py)."""
        if not self.enabled:
            return OFF
        material = responses_material(chat, include=request.include,
                                      reasoning=request.reasoning, text=request.text)
        return await self.lookup(tenant, ROUTE_RESPONSES, material, directives,
                                 eligible=not (request.background or request.logprobs),
                                 size=size)

    async def serve_response(self, tenant: str, request: ResponsesRequest,
                             parents: tuple[str, ...], base: ResponseObject,
                             found: Lookup) -> tuple[ResponseObject, EventBatch | None]:
        """A hit as this request's answer: the final object, and for a stream its complete
        event sequence (one batch). Stored (and added to the conversation) like a generated
        answer, before the client sees it, so it can be retrieved and chained at once."""
        assert found.body is not None
        final = revive(found.body, base, now=self._clock(), ids=self._ids)
        settings = self._ttls
        if request.store:
            record = ResponseRecord(final, tenant, parents=parents, closed=True)
            await self._objects.create_response(record, request.input,
                                                ttl=settings.response_ttl,
                                                event_ttl=settings.event_ttl)
        if request.conversation:
            await self._objects.add_conversation_items(
                tenant, request.conversation, [*request.input, *final["output"]],
                ttl=settings.response_ttl, bounded=False)
        if not request.stream:
            return final, None
        dumps = orjson.dumps
        return final, [(e["type"], dumps(e)) for e in events_from_response(final)]

    # -- lookup ------------------------------------------------------------------------------
    async def lookup(self, tenant: str, route: str, material: dict[str, Any],
                     directives: Directives, *, eligible: bool = True,
                     usable: Callable[[dict[str, Any]], bool] | None = None,
                     size: int = 0) -> Lookup:
        """`eligible` False (a background request, a shape we cannot replay): bypass, and the
        answer is not kept either. `usable`: an entry it refuses is a miss (e.g. a stream
        that wants usage, from an entry kept without it). `size`: the request body's bytes;
        a large one is keyed (its canonical dump and hash) off the loop."""
        if not self.enabled:
            return OFF
        if not eligible:
            return self._count(Lookup(BYPASS, route, directives=directives))
        key = await offload.run(size, cache_key, tenant, route, material)
        found = Lookup(MISS, route, key, directives)
        if not directives.lookup:
            found.state = BYPASS
            return self._count(found)
        started = time.perf_counter()
        await self._find(tenant, found, usable)
        return self._count(found, time.perf_counter() - started)

    async def _find(self, tenant: str, found: Lookup,
                    usable: Callable[[dict[str, Any]], bool] | None) -> None:
        key = found.key
        assert key is not None
        body = await self._entry(tenant, key.exact, found.route)
        if body is not None and (usable is None or usable(body)):
            found.state, found.body = HIT, body
            self._metrics.cache_hit(found.route, "exact")
            return
        if not self._semantic or key.namespace is None:
            return
        found.vector = await self.embed(key.query, tenant)
        if found.vector is None:
            return
        exact = await self._nearest(tenant, key, found.vector)
        if exact is None:
            return
        body = await self._entry(tenant, exact, found.route)
        if body is not None and (usable is None or usable(body)):
            found.state, found.body = HIT, body
            self._metrics.cache_hit(found.route, "semantic")

    async def _entry(self, tenant: str, exact: str, route: str) -> dict[str, Any] | None:
        try:
            raw = await self._store.get(tenant, exact)
        except StoreUnavailable:
            return None
        if raw is None:
            return None
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        body = entry.get("body") if isinstance(entry, dict) else None
        if not isinstance(body, dict) or entry.get("route") != route or not servable(route, body):
            return None
        return body

    async def _nearest(self, tenant: str, key: CacheKey, vector: Vector) -> str | None:
        assert key.namespace is not None
        try:
            found = await self._store.candidates(tenant, key.namespace,
                                                 self._hyperplanes(vector).probes(vector),
                                                 now=self._clock())
        except StoreUnavailable:
            return None
        match = best(vector, [from_bytes(c.vector) for c in found],
                     self._settings.similarity, [c.guard == key.guard for c in found])
        return found[match[0]].exact if match else None

    def _hyperplanes(self, vector: Vector) -> Hyperplanes:
        planes = self._planes.get(vector.size)
        if planes is None:
            planes = self._planes[vector.size] = Hyperplanes(vector.size)
        return planes

    async def embed(self, text: str, tenant: str | None = None) -> Vector | None:
        """The text's unit vector from the fleet, or None: an error, a refusal or a call slower
        than `--cache-embedding-timeout` is a miss, never a failed request. Charged to
        `tenant`'s tokens; a key whose budget is spent (or whose count cannot be read) gets no
        embedding: a miss too (its request was admitted, its next one is refused)."""
        try:
            rows = await self._embedder.embed(
                [text], self._accounts.account_for(tenant) if tenant is not None else None)
        except ProxyError:
            return None
        except EmbeddingFailed:
            if self._embedder.model is not None:
                self._metrics.cache_embedding_error()
            return None
        return unit(rows[0])

    def _count(self, found: Lookup, seconds: float | None = None) -> Lookup:
        """`seconds`: how long the lookup took (a bypass looked nothing up)."""
        assert found.state is not None
        self._metrics.cache_result(found.route, found.state, seconds)
        return found

    # -- write -------------------------------------------------------------------------------
    def keep(self, tenant: str, found: Lookup, body: dict[str, Any]) -> None:
        """Keep a finished answer, in a task of its own (the client never waits for it)."""
        if found.key is None or found.hit or not found.directives.write:
            return
        if not servable(found.route, body):
            return
        entry = orjson.dumps({"route": found.route, "body": body})
        if len(entry) > self._settings.max_entry_bytes:
            return
        self._tasks.spawn(self._write(tenant, found, entry), name="cache-write")

    async def _write(self, tenant: str, found: Lookup, entry: bytes) -> None:
        key = found.key
        assert key is not None
        vector: VectorWrite | None = None
        if self._semantic and key.namespace is not None:
            embedded = (found.vector if found.vector is not None
                        else await self.embed(key.query, tenant))
            if embedded is not None:
                vector = VectorWrite(key.namespace, self._hyperplanes(embedded).bucket(embedded),
                                     key.guard, to_bytes(embedded))
        try:
            await self._store.put(tenant, key.exact, entry, ttl=self._settings.ttl,
                                  now=self._clock(), vector=vector,
                                  limit=self._settings.max_per_namespace)
        except StoreUnavailable as exc:
            log.warning("could not keep a cache entry: %s", failure_cause(exc))
            return
        self._metrics.cache_write(found.route)


def servable(route: str, body: dict[str, Any]) -> bool:
    """May this answer be kept and served again? Completed, and nothing but text for the
    client to read: a tool call asks someone to act and is never replayed."""
    if route != ROUTE_RESPONSES:
        return chat_storable(body)
    if body.get("status") != t.S_COMPLETED or body.get("background"):
        return False
    output = body.get("output")
    return isinstance(output, list) and bool(output) and all(
        isinstance(item, dict) and item.get("type") in _SERVABLE_ITEMS for item in output)


def revive(cached: ResponseObject, base: ResponseObject, *, now: float,
           ids: IdFactory = new_id) -> ResponseObject:
    """A cached Response as this request's own answer: this request's id, echo and time,
    the cached output with fresh item ids (a stored hit and its original never share one)."""
    output: list[Item] = [{**item, "id": ids(_NEW_ITEM_ID[item["type"]])}
                          for item in cached["output"]]
    return {**base, "status": t.S_COMPLETED, "error": None, "incomplete_details": None,
            "output": output, "usage": cached.get("usage"), "completed_at": int(now)}
