"""The limiter's scripts on both backends (a real redis-server and the embedded store): what
is counted, what a refusal leaves untouched, leases that expire and leases that are renewed,
and the choice made when Redis is down (budgets fail closed, rate limits fail open)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from proxy.core.errors import QuotaExceeded, RateLimited, StoreUnavailable
from proxy.core.policy.keysfile import Limits
from proxy.services.metering.limits import KeyLimits, Limiter
from proxy.store import keys
from proxy.store.connection.factory import open_store
from proxy.store.limits import LimitStore
from proxy.store.redis import RedisStore
from tests.support.servers import free_port

T = "ktenant"


def limiter(store: RedisStore, limits: Limits, *, lease: float = 30.0) -> Limiter:
    return Limiter(LimitStore(store.client), {T: KeyLimits("team", limits)}, lease_seconds=lease)


async def test_a_key_without_limits_costs_no_round_trip(store: RedisStore) -> None:
    assert await limiter(store, Limits(rpm=1)).admit("kother", hold=True) is None


async def test_rpm_refuses_past_the_limit_with_seconds_to_the_next_minute(
        store: RedisStore) -> None:
    if 60 - time.time() % 60 < 3:
        await asyncio.sleep(3.2)  # all three in one minute
    lim = limiter(store, Limits(rpm=2))
    for _ in range(2):
        ticket = await lim.admit(T, hold=False)
        assert ticket is not None
        await ticket.end(5)
    with pytest.raises(RateLimited) as refused:
        await lim.admit(T, hold=False)
    assert refused.value.code == "rate_limit_exceeded"
    retry = int(refused.value.headers["Retry-After"])
    assert 1 <= retry <= 60
    assert retry >= 60 - int(time.time() % 60) - 2


async def test_a_refusal_consumes_nothing(store: RedisStore) -> None:
    if 60 - time.time() % 60 < 3:
        await asyncio.sleep(3.2)
    lim = limiter(store, Limits(rpm=2, max_streams=1))
    held = await lim.admit(T, hold=True)
    with pytest.raises(RateLimited):
        await lim.admit(T, hold=True)  # no slot: refused, and not counted as a request
    assert await lim.admit(T, hold=False) is not None  # the second request of the minute
    assert held is not None
    await held.end(0)


async def test_tpm_and_budget_count_usage_at_the_end(store: RedisStore) -> None:
    if 60 - time.time() % 60 < 3:
        await asyncio.sleep(3.2)
    lim = limiter(store, Limits(tpm=100, token_budget=1000))
    first = await lim.admit(T, hold=False)
    second = await lim.admit(T, hold=False)  # in flight together: both admitted
    assert first is not None and second is not None
    await first.end(70)
    await second.end(70)  # the overshoot docs/operations.md describes
    await first.end(70)  # ending twice counts once
    assert int(await store.client.get(keys.limit_used(T))) == 140
    with pytest.raises(RateLimited) as refused:
        await lim.admit(T, hold=False)
    assert refused.value.code == "rate_limit_exceeded"


async def test_a_spent_budget_is_insufficient_quota(store: RedisStore) -> None:
    lim = limiter(store, Limits(token_budget=10))
    ticket = await lim.admit(T, hold=False)
    assert ticket is not None
    await ticket.end(11)
    with pytest.raises(QuotaExceeded) as refused:
        await lim.admit(T, hold=False)
    assert (refused.value.status, refused.value.type, refused.value.code) == (
        429, "insufficient_quota", "insufficient_quota")
    assert int(refused.value.headers["Retry-After"]) >= 1


async def test_a_lease_nobody_renews_expires(store: RedisStore) -> None:
    """A crashed instance's slots come back after a lease's life."""
    crashed = limiter(store, Limits(max_streams=1), lease=0.3)
    assert await crashed.admit(T, hold=True) is not None  # never ended, never renewed
    other = limiter(store, Limits(max_streams=1), lease=0.3)
    with pytest.raises(RateLimited):
        await other.admit(T, hold=True)
    for _ in range(40):  # bounded: about 2 s
        await asyncio.sleep(0.05)
        try:
            assert await other.admit(T, hold=True) is not None
            return
        except RateLimited:
            continue
    pytest.fail("the expired lease still counts")


async def test_a_renewed_lease_keeps_its_slot(store: RedisStore) -> None:
    holder = limiter(store, Limits(max_streams=1), lease=0.6)
    ticket = await holder.admit(T, hold=True)
    renewing = asyncio.create_task(holder.run())
    try:
        await asyncio.sleep(1.5)  # well past one lease's life
        with pytest.raises(RateLimited):
            await limiter(store, Limits(max_streams=1)).admit(T, hold=True)
        assert ticket is not None
        await ticket.end(0)
        assert await limiter(store, Limits(max_streams=1)).admit(T, hold=True) is not None
    finally:
        renewing.cancel()


@pytest.fixture
async def unreachable() -> AsyncIterator[Limiter]:
    table = {"kbudget": KeyLimits("paid", Limits(rpm=5, token_budget=100)),
             "krate": KeyLimits("rated", Limits(rpm=5, max_streams=1))}
    store = open_store(f"redis://127.0.0.1:{free_port()}/0", connect_timeout=0.5)
    try:
        yield Limiter(LimitStore(store.client), table)
    finally:
        await store.aclose()


async def test_redis_down_a_budget_fails_closed(unreachable: Limiter) -> None:
    with pytest.raises(StoreUnavailable):
        await unreachable.admit("kbudget", hold=False)


async def test_redis_down_rate_limits_fail_open(unreachable: Limiter) -> None:
    ticket = await unreachable.admit("krate", hold=True)
    assert ticket is not None
    await ticket.end(10)  # nothing to record it in: no error either


async def test_two_limiters_on_one_redis_share_the_minute(store_url: str | None,
                                                          store: RedisStore) -> None:
    if store_url is None:
        pytest.skip("instances share only a real Redis")
    if 60 - time.time() % 60 < 3:
        await asyncio.sleep(3.2)
    other_store = open_store(store_url)  # another instance's client (any topology)
    other = other_store.client
    try:
        a = limiter(store, Limits(rpm=5))
        b = Limiter(LimitStore(other), {T: KeyLimits("team", Limits(rpm=5))})
        results = await asyncio.gather(*[(a if n % 2 else b).admit(T, hold=False)
                                         for n in range(12)], return_exceptions=True)
        assert sum(1 for r in results if not isinstance(r, BaseException)) == 5
        assert all(isinstance(r, RateLimited) for r in results if isinstance(r, BaseException))
    finally:
        await other_store.aclose()
