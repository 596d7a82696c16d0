"""The store on a Redis Cluster of its own (tests/support/cluster.py) through a primary's death
and a resharding: service resumes without a restart, live streams keep their events, and new
responses follow the new slot map (store/connection/shards.py). `failover` marker: `make chaos`
only (a cluster of its own each, ~15 s). The figures under load are
reliability/clusterfailover.py's."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from proxy.core import ids as idp
from proxy.core.errors import StoreUnavailable
from proxy.core.shardtags import tag_of
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import Backend, open_backend
from proxy.store.connection.shards import REGROUP_SECONDS, ShardedIds, cluster_owners
from tests.support.cluster import RedisClusterGroup

pytestmark = [pytest.mark.failover, pytest.mark.cluster]

TENANT = "t"


@pytest.fixture
def cluster() -> Iterator[RedisClusterGroup]:
    group = RedisClusterGroup()
    yield group
    group.stop()


def record(rid: str) -> ResponseRecord:
    return ResponseRecord({"id": rid, "object": "response", "status": "in_progress"}, TENANT)


def event(seq: int) -> StoredEvent:
    return StoredEvent(seq, "response.output_text.delta", b'{"delta":"x"}')


@pytest.fixture
async def backend(cluster: RedisClusterGroup) -> AsyncIterator[Backend]:
    backend = open_backend(cluster.url())
    await backend.store.ping()
    yield backend
    await backend.store.aclose()


async def live_responses(backend: Backend, n: int = 12) -> list[str]:
    """`n` stored foreground responses, drawn as an instance draws them (every primary)."""
    made = [backend.ids(idp.RESPONSE) for _ in range(n)]
    for rid in made:
        await backend.store.create_response(record(rid), [], ttl=60, event_ttl=60,
                                            lease_ms=10_000)
    return made


async def test_a_killed_primary_is_replaced_and_the_store_resumes(
        cluster: RedisClusterGroup, backend: Backend) -> None:
    store = backend.store
    made = await live_responses(backend)
    victim = cluster.primaries()[0]
    victim.signal(signal.SIGKILL)
    cluster.wait_failed_over(victim)
    # Bounded: the first commands after the death may fail (503s); then every tag serves.
    deadline = time.monotonic() + 20
    while True:
        try:
            await store.append_events({rid: [event(1)] for rid in made}, ttl=60)
            break
        except StoreUnavailable:
            assert time.monotonic() < deadline, "the store never resumed"
            await asyncio.sleep(0.2)
    for rid in made:
        assert [e.seq for e in await store.read_events(rid)] == [1]
    assert backend.leases is not None
    assert sorted(await backend.leases.expired(100)) == []  # the sweep reads every tag
    fresh = backend.ids(idp.RESPONSE)
    await store.create_response(record(fresh), [], ttl=60, event_ttl=60)
    assert await store.get_response(TENANT, fresh) is not None


async def test_streams_keep_their_events_through_a_resharding_and_new_ids_rebalance(
        cluster: RedisClusterGroup, backend: Backend) -> None:
    store = backend.store
    source, target = cluster.primaries()[:2]
    made = await live_responses(backend)
    seq = 0
    resharding = asyncio.create_task(asyncio.to_thread(cluster.reshard, source, target,
                                                       5461))
    while not resharding.done() and seq < 5000:  # flushes all along the migration
        seq += 1
        await store.append_events({rid: [event(seq)] for rid in made}, ttl=60)
    await resharding
    seq += 1
    await store.append_events({rid: [event(seq)] for rid in made}, ttl=60)
    for rid in made:
        assert [e.seq for e in await store.read_events(rid)] == list(range(1, seq + 1))
    # New responses: drawn from the primaries that own slots now (the client learns the map
    # from MOVED replies and re-reads it; the draw regroups every REGROUP_SECONDS).
    client = store.client
    await client.nodes_manager.initialize()  # type: ignore[attr-defined]
    now = [0.0]
    ids = ShardedIds(cluster_owners(client), clock=lambda: now[0])
    owners = cluster_owners(client)()
    drawn = {owners[str(tag_of(ids(idp.RESPONSE)))] for _ in range(30)}
    assert len(drawn) == 2 and f"127.0.0.1:{source.port}" not in drawn
    now[0] += REGROUP_SECONDS
    assert tag_of(ids(idp.RESPONSE)) is not None
