"""`RedisCache` (store/objects/cache.py) on every backend of the contract suite (one primary,
Sentinel, embedded): exact entries, their expiry, semantic namespaces bounded to their newest
members and read only through the probed buckets, and tenants kept apart."""

from __future__ import annotations

import time

from proxy.store.objects.cache import RedisCache, VectorWrite
from proxy.store.redis import RedisStore
from tests.contract.test_store_contract import every_key


def vector(namespace: str, bucket: int, guard: str, value: bytes) -> VectorWrite:
    return VectorWrite(namespace=namespace, bucket=bucket, guard=guard, vector=value)


async def test_an_exact_entry_is_read_back_by_its_tenant_only(store: RedisStore) -> None:
    cache = RedisCache(store.client, sharded=store.sharded)
    await cache.put("t1", "k1", b"answer", ttl=60, now=time.time())
    assert await cache.get("t1", "k1") == b"answer"
    assert await cache.get("t2", "k1") is None
    assert await cache.get("t1", "other") is None


async def test_an_entry_expires_with_its_ttl(store: RedisStore) -> None:
    cache = RedisCache(store.client, sharded=store.sharded)
    await cache.put("t1", "k1", b"answer", ttl=60, now=time.time())
    [name] = [key for key in await every_key(store) if b"k1" in key]
    assert 0 < await store.client.ttl(name) <= 60


async def test_semantic_candidates_come_from_the_probed_buckets_newest_kept(
        store: RedisStore) -> None:
    cache = RedisCache(store.client, sharded=store.sharded)
    now = time.time()
    for n, bucket in enumerate((1, 1, 2, 3)):
        await cache.put("t1", f"k{n}", b"entry", ttl=60, now=now + n,
                        vector=vector("ns", bucket, f"g{n}", bytes([n]) * 8), limit=3)
    found = await cache.candidates("t1", "ns", [1, 2], now=now + 10)
    # k0 was the oldest of four in a namespace of three: dropped.
    assert sorted((c.exact, c.guard, c.vector) for c in found) == [
        ("k1", "g1", bytes([1]) * 8), ("k2", "g2", bytes([2]) * 8)]
    assert await cache.get("t1", "k2") == b"entry"
    assert await cache.candidates("t2", "ns", [1, 2, 3], now=now + 10) == []
    # past their expiry they are no longer candidates
    assert await cache.candidates("t1", "ns", [1, 2, 3], now=now + 100) == []
