"""`LeaseTable` (store/leases.py) on both backends: take, renew, expire, drop, claim; and the
lease a create takes in its own round trip (`RedisStore.create_response(lease_ms=...)`).

Expiry is on the server's clock; the tests wait for a lease of a few milliseconds to pass (a
bounded sleep, not a measure of speed)."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ResponseError

from proxy.store import keys
from proxy.store.base import ResponseRecord
from proxy.store.leases import LeaseState, LeaseTable
from proxy.store.redis import RedisStore
from tests.contract.conftest import RoundTrips
from tests.contract.tagged import rid


async def _expire(table: LeaseTable, response_id: str) -> None:
    for _ in range(50):
        if await table.state(response_id) is LeaseState.EXPIRED:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the lease never expired")


async def test_new_lease_is_held_and_unknown_is_absent(store: RedisStore) -> None:
    table = LeaseTable(store.client, sharded=store.sharded)
    assert await table.renew(ttl_ms=10_000, new=[rid("a")]) == []
    assert await table.state(rid("a")) is LeaseState.HELD
    assert await table.state(rid("b")) is LeaseState.ABSENT
    assert await table.expired(10) == []


async def test_expired_lease_is_listed_and_not_renewed_by_its_holder(store: RedisStore) -> None:
    table = LeaseTable(store.client, sharded=store.sharded)
    await table.renew(ttl_ms=30, new=[rid("old")])
    await table.renew(ttl_ms=10_000, new=[rid("live")])
    await _expire(table, rid("old"))
    assert await table.expired(10) == [rid("old")]
    # The holder renews both: the live one is renewed, the expired one comes back as lost and
    # stays expired (a reaper may be closing it).
    assert await table.renew(ttl_ms=10_000, held=[rid("old"), rid("live")]) == [rid("old")]
    assert await table.state(rid("old")) is LeaseState.EXPIRED
    assert await table.state(rid("live")) is LeaseState.HELD


async def test_a_dropped_lease_of_a_response_still_in_progress_is_left_to_expire(
        store: RedisStore) -> None:
    """After a failover the promoted replica may not hold the final write the writer saw
    acknowledged: its drop of the lease must not leave that response `in_progress` for ever
    with nothing to close it. The lease stays, expires, and a sweep finds it."""
    for an_id, status in ((rid("lost_end"), "in_progress"), (rid("ended"), "completed")):
        record = ResponseRecord(response={"id": an_id, "object": "response", "status": status,
                                          "output": []}, tenant="t")
        await store.create_response(record, [], ttl=60, event_ttl=60, lease_ms=30)
    table = LeaseTable(store.client, sharded=store.sharded)
    await table.renew(ttl_ms=30, dropped=[rid("lost_end"), rid("ended")])
    assert await table.state(rid("ended")) is LeaseState.ABSENT
    await _expire(table, rid("lost_end"))
    assert await table.expired(10) == [rid("lost_end")]


async def test_dropped_leases_leave_the_set(store: RedisStore) -> None:
    table = LeaseTable(store.client, sharded=store.sharded)
    await table.renew(ttl_ms=30, new=[rid("a"), rid("b")])
    await table.renew(ttl_ms=30, dropped=[rid("a")])
    await _expire(table, rid("b"))
    assert await table.expired(10) == [rid("b")]
    assert await table.state(rid("a")) is LeaseState.ABSENT
    # A held id that is gone (reaped and dropped) is lost too.
    assert await table.renew(ttl_ms=30, held=[rid("a")]) == [rid("a")]


async def test_expired_is_bounded_by_its_limit(store: RedisStore) -> None:
    table = LeaseTable(store.client, sharded=store.sharded)
    await table.renew(ttl_ms=20, new=[rid(i) for i in range(5)])
    await _expire(table, rid("4"))
    assert len(await table.expired(3)) == 3


async def test_one_claim_wins(store: RedisStore) -> None:
    table = LeaseTable(store.client, sharded=store.sharded)
    assert await table.claim(rid("a"), "one", 10_000) is True
    assert await table.claim(rid("a"), "two", 10_000) is False
    assert await table.claim(rid("b"), "two", 10_000) is True


# -- the lease a create takes (Store.create_response(lease_ms=...), scripts.CREATE_RESPONSE) --

def _record(response_id: str) -> ResponseRecord:
    return ResponseRecord({"id": response_id, "object": "response", "status": "in_progress",
                           "output": []}, "tenant", logged=True)


async def test_a_create_with_a_lease_takes_it_in_the_same_round_trip(
        store: RedisStore, round_trips: RoundTrips) -> None:
    table = LeaseTable(store.client, sharded=store.sharded)
    # The first call of a script loads it into the server (extra round trips, once).
    await store.create_response(_record(rid("warm")), [], ttl=60, event_ttl=60, lease_ms=10_000)
    items = [{"id": "msg_in", "type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "hi"}]}]
    for an_id, inputs in ((rid("plain"), []), (rid("indexed"), items)):
        round_trips.reset()
        await store.create_response(_record(an_id), inputs, ttl=60, event_ttl=60,
                                    lease_ms=10_000)
        assert round_trips.count == 1, an_id
        assert await table.state(an_id) is LeaseState.HELD
        record = await store.get_response("tenant", an_id)
        assert record is not None and record.status == "in_progress"
    # The lease is the table's like any other: renewed by its holder, then dropped once the
    # response's end is stored.
    assert await table.renew(ttl_ms=10_000, held=[rid("plain")]) == []
    await store.finish_response({"id": rid("plain"), "object": "response",
                                 "status": "completed", "output": []}, None, tenant="tenant",
                                ttl=60, event_ttl=60)
    await table.renew(ttl_ms=10_000, dropped=[rid("plain")])
    assert await table.state(rid("plain")) is LeaseState.ABSENT


async def test_the_lease_a_create_takes_expires_on_the_servers_clock(store: RedisStore) -> None:
    table = LeaseTable(store.client, sharded=store.sharded)
    await store.create_response(_record(rid("short")), [], ttl=60, event_ttl=60, lease_ms=30)
    await _expire(table, rid("short"))
    assert await table.expired(10) == [rid("short")]


async def test_a_create_without_a_lease_takes_none(store: RedisStore) -> None:
    await store.create_response(_record(rid("bg")), [], ttl=60, event_ttl=60)
    table = LeaseTable(store.client, sharded=store.sharded)
    assert await table.state(rid("bg")) is LeaseState.ABSENT


async def test_a_failed_create_leaves_no_lease(store: RedisStore) -> None:
    # The response's hash key holds a string: the script's first HSET fails (WRONGTYPE), which
    # ends the script before the lease is taken.
    await store.client.set(keys.response(rid("bad")), "not a hash")
    with pytest.raises(ResponseError):
        await store.create_response(_record(rid("bad")), [], ttl=60, event_ttl=60,
                                    lease_ms=10_000)
    table = LeaseTable(store.client, sharded=store.sharded)
    assert await table.state(rid("bad")) is LeaseState.ABSENT


async def test_a_bad_lease_length_is_refused_before_anything_is_written(
        store: RedisStore) -> None:
    with pytest.raises(ValueError):
        await store.create_response(_record(rid("zero")), [], ttl=60, event_ttl=60, lease_ms=0)
    assert await store.get_response("tenant", rid("zero")) is None
