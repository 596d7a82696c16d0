"""`LeaseTable` (store/leases.py) on both backends: take, renew, expire, drop, claim.

Expiry is on the server's clock; the tests wait for a lease of a few milliseconds to pass (a
bounded sleep, not a measure of speed)."""

from __future__ import annotations

import asyncio

from proxy.store.leases import LeaseState, LeaseTable
from proxy.store.redis import RedisStore


async def _expire(table: LeaseTable, response_id: str) -> None:
    for _ in range(50):
        if await table.state(response_id) is LeaseState.EXPIRED:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the lease never expired")


async def test_new_lease_is_held_and_unknown_is_absent(store: RedisStore) -> None:
    table = LeaseTable(store.client)
    assert await table.renew(ttl_ms=10_000, new=["resp_a"]) == []
    assert await table.state("resp_a") is LeaseState.HELD
    assert await table.state("resp_b") is LeaseState.ABSENT
    assert await table.expired(10) == []


async def test_expired_lease_is_listed_and_not_renewed_by_its_holder(store: RedisStore) -> None:
    table = LeaseTable(store.client)
    await table.renew(ttl_ms=30, new=["resp_old"])
    await table.renew(ttl_ms=10_000, new=["resp_live"])
    await _expire(table, "resp_old")
    assert await table.expired(10) == ["resp_old"]
    # The holder renews both: the live one is renewed, the expired one comes back as lost and
    # stays expired (a reaper may be closing it).
    assert await table.renew(ttl_ms=10_000, held=["resp_old", "resp_live"]) == ["resp_old"]
    assert await table.state("resp_old") is LeaseState.EXPIRED
    assert await table.state("resp_live") is LeaseState.HELD


async def test_dropped_leases_leave_the_set(store: RedisStore) -> None:
    table = LeaseTable(store.client)
    await table.renew(ttl_ms=30, new=["resp_a", "resp_b"])
    await table.renew(ttl_ms=30, dropped=["resp_a"])
    await _expire(table, "resp_b")
    assert await table.expired(10) == ["resp_b"]
    assert await table.state("resp_a") is LeaseState.ABSENT
    # A held id that is gone (reaped and dropped) is lost too.
    assert await table.renew(ttl_ms=30, held=["resp_a"]) == ["resp_a"]


async def test_expired_is_bounded_by_its_limit(store: RedisStore) -> None:
    table = LeaseTable(store.client)
    await table.renew(ttl_ms=20, new=[f"resp_{i}" for i in range(5)])
    await _expire(table, "resp_4")
    assert len(await table.expired(3)) == 3


async def test_one_claim_wins(store: RedisStore) -> None:
    table = LeaseTable(store.client)
    assert await table.claim("resp_a", "one", 10_000) is True
    assert await table.claim("resp_a", "two", 10_000) is False
    assert await table.claim("resp_b", "two", 10_000) is True
