"""`RedisCache`: the response cache's entries and semantic namespaces on the store's client.

Layout in keys.py ("the response cache"), atomic steps in scripts.py. Invariants:
- Round trips: `get` one command; `put` one pipeline (the entry, and in semantic mode the
  namespace script with it); `candidates` one script. Never a scan: a namespace is read only
  through the buckets a lookup probes, and a namespace holds at most `limit` members.
- Everything expires after the cache TTL; a namespace's members expire with their entries (the
  scripts skip and drop them by the expiry in the order set).
- Failures of the server become `StoreUnavailable` where they happen; the cache service turns
  them into misses (a cache must never fail a request).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from proxy.store import keys
from proxy.store.lua import scripts
from proxy.store.redis import read_retrying, store_errors


@dataclass(frozen=True, slots=True)
class Candidate:
    exact: str  # the entry's exact key
    guard: str
    vector: bytes  # float32, little-endian


@dataclass(frozen=True, slots=True)
class VectorWrite:
    """A semantic entry's place in its namespace."""

    namespace: str
    bucket: int
    guard: str
    vector: bytes


class RedisCache:
    def __init__(self, client: Redis, *, sharded: bool = False) -> None:
        self._client = client
        # A Redis Cluster: the entry and its namespace sit in different slots, and redis-py's
        # cluster pipeline refuses scripts, so a semantic write sends both side by side.
        self._sharded = sharded
        self._add = client.register_script(scripts.CACHE_ADD_VECTOR)
        self._candidates = client.register_script(scripts.CACHE_CANDIDATES)

    async def get(self, tenant: str, exact: str) -> bytes | None:
        value = await read_retrying(lambda: self._client.get(keys.cache_entry(tenant, exact)))
        return value if isinstance(value, bytes) or value is None else value.encode()

    async def put(self, tenant: str, exact: str, entry: bytes, *, ttl: int, now: float,
                  vector: VectorWrite | None = None, limit: int = 0) -> None:
        """Write the entry and, for a semantic one, its vector into the namespace (which keeps
        its newest `limit` members). One pipeline; never retried (a write)."""
        with store_errors():
            if vector is None:  # exact mode: one plain SET, cheaper than a pipeline
                await self._client.set(keys.cache_entry(tenant, exact), entry, ex=ttl)
                return
            ns = vector.namespace
            add_keys = [keys.cache_vectors(tenant, ns), keys.cache_order(tenant, ns)]
            add_args: list[Any] = [
                f"{vector.bucket}:{exact}", vector.guard.encode() + b"\0" + vector.vector,
                now + ttl, now, limit, ttl, keys.cache_bucket_prefix(tenant, ns), vector.bucket]
            if self._sharded:
                await asyncio.gather(
                    self._client.set(keys.cache_entry(tenant, exact), entry, ex=ttl),
                    self._add(keys=add_keys, args=add_args))
                return
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.set(keys.cache_entry(tenant, exact), entry, ex=ttl)
                await self._add(keys=add_keys, args=add_args, client=pipe)
                await pipe.execute()

    async def candidates(self, tenant: str, namespace: str, buckets: Sequence[int], *,
                         now: float) -> list[Candidate]:
        """The live members of `buckets` in the namespace, with their guards and vectors."""
        flat = await read_retrying(lambda: self._candidates(
            keys=[keys.cache_vectors(tenant, namespace), keys.cache_order(tenant, namespace)],
            args=[now, keys.cache_bucket_prefix(tenant, namespace), *buckets]))
        out: list[Candidate] = []
        for member, value in zip(flat[::2], flat[1::2], strict=True):
            exact = bytes(member).decode().partition(":")[2]
            guard, _, vector = bytes(value).partition(b"\0")
            out.append(Candidate(exact, guard.decode(), vector))
        return out
