"""One `RedisStore` on `redis+sentinel://` across a failover of real servers (a primary, its
replica, three sentinels: tests/support/sentinel.py, a group per test since each breaks its
primary): what was in flight fails cleanly (StoreUnavailable, bounded), nothing hangs, and the
very same store serves the promoted replica without being rebuilt.

The primary killed -9 runs in `make test`; frozen (SIGSTOP) with writes in flight is heavier
(`failover` marker: `make chaos`). And `--redis-wait-replicas` on a real replica."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from proxy.core.errors import StoreUnavailable
from proxy.services.eventlog.durable import store_final
from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import open_store
from proxy.store.connection.replication import WAIT_TIMEOUT_MS
from tests.support.sentinel import SentinelGroup
from tests.support.servers import ServerProcess

TENANT = "tenant-a"
SOCKET_TIMEOUT = 2.0


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    group = SentinelGroup()
    try:
        yield group
    finally:
        group.stop()


def record(rid: str) -> ResponseRecord:
    return ResponseRecord(response={"id": rid, "object": "response", "status": "in_progress",
                                    "output": []}, tenant=TENANT)


def final(rid: str) -> dict[str, Any]:
    return {"id": rid, "object": "response", "status": "completed", "output": []}


def done(seq: int) -> StoredEvent:
    return StoredEvent(seq, "response.completed", b"{}")


async def until_written(call: Any, within: float) -> float:
    """Retry `call` (a write) on StoreUnavailable until it lands; the seconds it took."""
    started = time.monotonic()
    while True:
        try:
            await call()
            return time.monotonic() - started
        except StoreUnavailable:
            if time.monotonic() - started > within:
                raise
            await asyncio.sleep(0.2)


async def test_the_store_follows_the_primary_killed_9_to_the_promoted_replica(
        group: SentinelGroup) -> None:
    store = open_store(group.url(), socket_timeout=SOCKET_TIMEOUT)
    try:
        await store.create_response(record("resp_before"), [], ttl=60, event_ttl=60)
        # acknowledged by the replica before the kill: a failover must keep it
        assert await store.client.wait(1, 1000) >= 1
        old = group.master_port()
        assert old is not None
        group.fail_primary(signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):  # connection refused: at once, not a hang
            await store.create_response(record("resp_during"), [], ttl=60, event_ttl=60)
        assert time.monotonic() - started < 1.0
        new = group.wait_promoted(old)
        # The same store object, not rebuilt: its next connections ask the sentinels.
        took = await until_written(
            lambda: store.create_response(record("resp_after"), [], ttl=60, event_ttl=60),
            within=10.0)
        assert took < 10.0
        assert await store.get_response(TENANT, "resp_before") is not None
        result = await store_final(store, final("resp_before"), done(1), tenant=TENANT, ttl=60,
                                   event_ttl=60)
        assert result.changed
        with redis.Redis(port=new) as direct:  # written on the promoted replica
            assert direct.exists(keys.response("resp_after"))
    finally:
        await store.aclose()


@pytest.mark.failover
async def test_final_writes_in_flight_when_the_primary_freezes_end_or_fail_then_land(
        group: SentinelGroup) -> None:
    """16 final writes issued as the primary is frozen (SIGSTOP: it accepts connections and
    answers nothing): each returns or fails within one socket timeout plus its retries, none
    hangs; after the promotion the ones that failed are written through the same store (what
    the lease sweep does for a response whose end was lost)."""
    store = open_store(group.url(), socket_timeout=SOCKET_TIMEOUT)
    rids = [f"resp_{n}" for n in range(16)]
    victim: ServerProcess | None = None
    try:
        for rid in rids:
            await store.create_response(record(rid), [], ttl=60, event_ttl=60)
        old = group.master_port()
        assert old is not None
        victim = group.fail_primary(signal.SIGSTOP)
        started = time.monotonic()
        results = await asyncio.gather(*[
            store_final(store, final(rid), done(1), tenant=TENANT, ttl=60,
                        event_ttl=60) for rid in rids],
            return_exceptions=True)
        elapsed = time.monotonic() - started
        assert all(not isinstance(r, BaseException) or isinstance(r, StoreUnavailable)
                   for r in results), results
        # one socket timeout, then retries of a 1 s probe each at most, 3.75 s of delays
        assert elapsed < SOCKET_TIMEOUT + 5 * 1.0 + 3.75 + 2.0, elapsed
        group.wait_promoted(old)
        for rid, result in zip(rids, results, strict=True):
            if isinstance(result, BaseException):
                await until_written(lambda rid=rid: store_final(
                    store, final(rid), done(1), tenant=TENANT, ttl=60, event_ttl=60), within=10.0)
            got = await store.get_response(TENANT, rid)
            assert got is not None and got.status == "completed", rid
    finally:
        if victim is not None:
            victim.signal(signal.SIGCONT)
        await store.aclose()


async def test_wait_replicas_holds_the_final_write_until_the_replica_has_it(
        sentinel_group: SentinelGroup) -> None:
    store = open_store(sentinel_group.url(), wait_replicas=1)
    try:
        await store.create_response(record("resp_w"), [], ttl=60, event_ttl=60)
        await store.client.script_flush()  # as on a new primary: loaded again, sent again
        result = await store.finish_response(final("resp_w"), done(1), tenant=TENANT, ttl=60,
                                             event_ttl=60)
        assert result.changed and store.replication.shortfalls == 0
        replica = next(s for s in sentinel_group.data
                       if s.port != sentinel_group.master_port())
        with redis.Redis(port=replica.port) as direct:
            assert direct.hget(keys.response("resp_w"), keys.F_STATUS) == b"completed"
    finally:
        await store.aclose()


async def test_wait_replicas_without_enough_replicas_is_counted_not_an_error(
        redis_server: ServerProcess) -> None:
    store = open_store(f"redis://127.0.0.1:{redis_server.port}/0", wait_replicas=1)
    try:
        await store.create_response(record("resp_lone"), [], ttl=60, event_ttl=60)
        started = time.monotonic()
        result = await store.finish_response(final("resp_lone"), done(1), tenant=TENANT, ttl=60,
                                             event_ttl=60)
        waited = time.monotonic() - started
        assert result.changed  # written on the primary: the client gets its answer
        assert store.replication.shortfalls == 2  # the create's wait, the final write's
        # one bounded wait (two if the server had lost our scripts: sent again after loading)
        assert WAIT_TIMEOUT_MS / 1000 - 0.1 < waited < 2 * WAIT_TIMEOUT_MS / 1000 + 1.0
    finally:
        await store.aclose()
