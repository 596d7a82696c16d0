"""The follower hub: stored events, live events from Redis, and this process's own events handed
over at once — never reordered, never skipped, never twice (embedded store)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from proxy.services.eventlog import EventLogHub
from proxy.services.follow import Followers
from proxy.store.base import StoredEvent, StoredResponse
from proxy.store.factory import open_store
from proxy.store.redis import RedisStore


def event(seq: int, kind: str = "response.output_text.delta") -> StoredEvent:
    return StoredEvent(seq, kind, b'{"sequence_number":%d}' % seq)


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    store = open_store(None)
    # the store keeps logs of known responses only
    record = StoredResponse({"id": "resp_1", "status": "in_progress"}, "tenant", logged=True)
    await store.create_response(record, [], ttl=60, event_ttl=60)
    yield store
    await store.aclose()


async def collect(followers: Followers, after: int, out: list[int]) -> None:
    async for item in followers.follow("resp_1", after=after, idle=5):
        out.append(item.seq)


async def wait_for(out: list[int], n: int) -> None:
    for _ in range(200):
        if len(out) >= n:
            return
        await asyncio.sleep(0.01)


async def test_local_events_arrive_before_they_reach_the_store(store: RedisStore) -> None:
    await store.append_events({"resp_1": [event(0), event(1)]}, ttl=60)
    followers = Followers(store, block_ms=1000)
    seen: list[int] = []
    reader = asyncio.create_task(collect(followers, -1, seen))
    await wait_for(seen, 2)
    for seq in range(2, 6):
        followers.publish_local("resp_1", event(seq))
    await wait_for(seen, 6)
    assert seen == [0, 1, 2, 3, 4, 5]  # none of 2..5 is in the store yet
    followers.publish_local("resp_1", event(6, "response.completed"))
    await asyncio.wait_for(reader, 2)
    assert seen == [0, 1, 2, 3, 4, 5, 6]
    await followers.aclose()


async def test_a_gap_is_filled_from_the_store_in_order_without_duplicates(
        store: RedisStore) -> None:
    await store.append_events({"resp_1": [event(0)]}, ttl=60)
    followers = Followers(store, block_ms=20)
    seen: list[int] = []
    reader = asyncio.create_task(collect(followers, -1, seen))
    await wait_for(seen, 1)
    followers.publish_local("resp_1", event(3))  # 1 and 2 not seen yet: must not jump ahead
    await asyncio.sleep(0.05)
    assert seen == [0]
    await store.append_events({"resp_1": [event(1), event(2), event(3)]}, ttl=60)
    await wait_for(seen, 4)
    followers.publish_local("resp_1", event(4))
    await store.append_events({"resp_1": [event(4), event(5, "response.completed")]}, ttl=60)
    await asyncio.wait_for(reader, 2)
    assert seen == [0, 1, 2, 3, 4, 5]
    await followers.aclose()


async def test_nobody_following_costs_nothing(store: RedisStore) -> None:
    followers = Followers(store)
    followers.publish_local("resp_x", event(0))  # no follower: dropped, no error
    await followers.aclose()


async def test_a_late_follower_catches_up_from_the_writer_memory(store: RedisStore) -> None:
    """Events this process made but has not flushed yet: a follower joining now gets them at
    once, in order, then the live ones."""
    await store.append_events({"resp_1": [event(0), event(1)]}, ttl=60)
    followers = Followers(store, block_ms=1000)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0,  # no flush during the test
                      local=followers.publish_local)
    followers.recent = hub.recent
    handle = hub.open("resp_1")
    for seq in (2, 3, 4):
        handle.add(event(seq))  # nobody follows yet; nothing reaches the store
    seen: list[int] = []
    reader = asyncio.create_task(collect(followers, -1, seen))
    await wait_for(seen, 5)
    assert seen == [0, 1, 2, 3, 4]
    handle.add(event(5))
    await wait_for(seen, 6)
    assert seen == [0, 1, 2, 3, 4, 5]
    reader.cancel()
    await hub.aclose()
    await followers.aclose()
