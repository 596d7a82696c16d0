"""The job queue contract (`JobQueue`, proxy/store/base.py), run against a real redis-server and
the embedded store alike. Idle times are real: thresholds of 100 ms and sleeps of 150 ms keep
the file fast while leaving the scheduler a margin either way."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any, TypeVar, cast

import fakeredis
import orjson
import pytest

from proxy.core.errors import StoreUnavailable
from proxy.store import keys
from proxy.store.base import Enqueued, Job, ResponseRecord
from proxy.store.connection.factory import job_queue, open_store
from proxy.store.jobqueue import RedisJobQueue
from proxy.store.redis import RedisStore
from tests.contract.conftest import RoundTrips
from tests.contract.tagged import rid
from tests.support.servers import free_port

LIMIT = 100  # one key's share
TOTAL = 1000  # the whole queue's bound
OWNER = "tenant-a"
SPEC = orjson.dumps({"model": "m1", "chat": {"messages": [{"role": "user", "content": "hi"}]}})
MIN_IDLE_MS = 400  # generous: a loaded CI machine must not make live entries look idle
IDLE = 0.5  # seconds: comfortably past MIN_IDLE_MS

T = TypeVar("T")


# -- helpers --------------------------------------------------------------------------------


async def enqueue(queue: RedisJobQueue, *response_ids: str, limit: int = LIMIT,
                  owner: str = OWNER) -> None:
    for an_id in response_ids:
        assert await add(queue, an_id, limit=limit, owner=owner) == "queued"


def add(queue: RedisJobQueue, an_id: str, spec: bytes = SPEC, *, limit: int = LIMIT,
        total: int = TOTAL, owner: str = OWNER) -> Awaitable[Enqueued]:
    """One job for one key."""
    return queue.enqueue(owner, [(an_id, spec)], limit=limit, total=total)


async def settle(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Run calls concurrently; fail on the first error only once all have ended (a failing
    test must not leave calls running into the next one)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], results)


async def take_one(queue: RedisJobQueue, consumer: str) -> Job:
    [job] = await queue.take(consumer, 1, block_ms=0)
    return job


async def pending(store: RedisStore, entry_id: str) -> dict[str, Any] | None:
    """The pending-list row of one entry: consumer, time_since_delivered, times_delivered."""
    rows: Any = await store.client.xpending_range(keys.JOB_QUEUE, keys.JOB_GROUP, entry_id,
                                                  entry_id, 1)
    return dict(rows[0]) if rows else None


async def owner(store: RedisStore, entry_id: str) -> str | None:
    row = await pending(store, entry_id)
    return None if row is None else row["consumer"].decode()


async def pending_count(store: RedisStore) -> int:
    summary: Any = await store.client.xpending(keys.JOB_QUEUE, keys.JOB_GROUP)
    return int(summary["pending"])


async def subscribers(store: RedisStore) -> int:
    # Cluster: each node counts only its own subscribers (PUBLISH reaches every node): ask
    # them all (redis-py sums the counts).
    where: Any = {"target_nodes": "all"} if store.sharded else {}
    [(_channel, count)] = await store.client.pubsub_numsub(keys.JOB_CANCEL_CHANNEL, **where)
    return int(count)


async def until_subscribed(store: RedisStore, n: int = 1) -> None:
    deadline = time.monotonic() + 2.0
    while await subscribers(store) != n:
        assert time.monotonic() < deadline, f"never {n} subscriber(s)"
        await asyncio.sleep(0.01)


async def first_cancel(queue: RedisJobQueue) -> str:
    async with contextlib.aclosing(queue.cancels()) as cancels:
        async for response_id in cancels:
            return response_id
    raise AssertionError("cancels() ended")


async def create_response(store: RedisStore, an_id: str, status: str) -> None:
    record = ResponseRecord(response={"id": an_id, "object": "response", "status": status,
                                      "background": True, "output": []}, tenant="tenant-a")
    await store.create_response(record, [], ttl=3600, event_ttl=600)


# -- enqueue and take -----------------------------------------------------------------------


async def test_a_taken_job_carries_its_spec_byte_for_byte(
        store: RedisStore, queue: RedisJobQueue) -> None:
    spec = SPEC + b"\x00\xff\xfe raw bytes"
    assert await add(queue, rid("1"), spec) == "queued"
    jobs = await queue.take("w1", 10, block_ms=0)
    assert [(job.response_id, job.spec) for job in jobs] == [(rid("1"), spec)]
    assert await owner(store, jobs[0].entry_id) == "w1"


async def test_jobs_are_taken_in_the_order_they_were_queued(queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"), rid("2"), rid("3"))
    first = await queue.take("w1", 2, block_ms=0)
    rest = await queue.take("w1", 2, block_ms=0)
    assert [job.response_id for job in first + rest] == [rid("1"), rid("2"), rid("3")]


async def test_enqueue_refuses_a_full_queue_and_done_makes_room(queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"), rid("2"), limit=2)
    assert await add(queue, rid("3"), limit=2) == "key_full"
    job = await take_one(queue, "w1")
    # A running job still counts: the bound is queued + running.
    assert await add(queue, rid("3"), limit=2) == "key_full"
    await queue.done(job.entry_id)
    assert await add(queue, rid("3"), limit=2) == "queued"
    assert await queue.length() == 2


async def test_concurrent_enqueues_never_pass_the_limit(queue: RedisJobQueue) -> None:
    accepted = await settle(add(queue, rid(n), limit=20) for n in range(50))
    assert accepted.count("queued") == 20
    assert await queue.length() == 20


async def test_take_hands_each_entry_to_one_consumer(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, *(rid(n) for n in range(30)))

    async def drain(consumer: str) -> list[Job]:
        taken: list[Job] = []
        while batch := await queue.take(consumer, 4, block_ms=0):
            taken += batch
            await asyncio.sleep(0)  # let the other consumers interleave
        return taken

    by_consumer = await settle(drain(f"w{n}") for n in range(3))
    ids = [job.entry_id for jobs in by_consumer for job in jobs]
    assert len(ids) == len(set(ids)) == 30
    for n, jobs in enumerate(by_consumer):
        for job in jobs:
            assert await owner(store, job.entry_id) == f"w{n}"


async def test_take_with_block_0_does_not_wait(queue: RedisJobQueue) -> None:
    # Redis reads BLOCK 0 as "forever": the queue must not send it.
    started = time.monotonic()
    assert await asyncio.wait_for(queue.take("w1", 1, block_ms=0), 1.0) == []
    assert time.monotonic() - started < 0.5


async def test_take_blocks_no_longer_than_max_block_ms(store: RedisStore) -> None:
    queue = RedisJobQueue(store.client, max_block_ms=200)
    started = time.monotonic()
    assert await asyncio.wait_for(queue.take("w1", 1, block_ms=60_000), 2.0) == []
    assert time.monotonic() - started < 1.0


async def test_a_blocked_take_wakes_when_a_job_arrives(
        store: RedisStore, queue: RedisJobQueue) -> None:
    if store.embedded:
        pytest.skip("fakeredis answers a blocking read at once (the worker polls instead)")
    await queue.take("w1", 1, block_ms=0)  # the group exists: the blocking read can start
    waiting = asyncio.create_task(queue.take("w1", 1, block_ms=2_000))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await enqueue(queue, rid("1"))
    jobs = await asyncio.wait_for(waiting, 2.0)
    assert [job.response_id for job in jobs] == [rid("1")]
    assert time.monotonic() - started < 0.5


async def test_take_removes_entries_without_job_fields(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"))
    await store.client.xadd(keys.JOB_QUEUE, {"unexpected": "1"})
    await enqueue(queue, rid("2"))
    jobs = await queue.take("w1", 10, block_ms=0)
    assert [job.response_id for job in jobs] == [rid("1"), rid("2")]
    assert await queue.length() == 2
    assert await pending_count(store) == 2


async def test_done_removes_the_entry(store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"), rid("2"))
    job = await take_one(queue, "w1")
    await queue.done(job.entry_id)
    assert await queue.length() == 1
    assert await pending(store, job.entry_id) is None
    assert [j.response_id for j in await queue.take("w2", 10, block_ms=0)] == [rid("2")]


# -- fairness between keys and each key's share ---------------------------------------------

W = 4  # a worker's concurrency in these tests: it takes up to W jobs at once


async def test_a_key_that_queues_behind_another_keys_backlog_starts_within_two_takes(
        queue: RedisJobQueue) -> None:
    await enqueue(queue, *(rid(f"a{n}") for n in range(50)), owner="key-a")
    await enqueue(queue, rid("b0"), owner="key-b")
    taken: list[str] = []
    for _ in range(2 * W):
        taken += [job.response_id for job in await queue.take("w1", 1, block_ms=0)]
        if rid("b0") in taken:
            break
    assert rid("b0") in taken[:2]  # FIFO across keys: only after a's 50


async def test_a_worker_taking_w_jobs_gets_every_waiting_keys_oldest_first(
        queue: RedisJobQueue) -> None:
    await enqueue(queue, *(rid(f"a{n}") for n in range(50)), owner="key-a")
    await take_one(queue, "w0")  # key-a has been served: it is an old key now
    await enqueue(queue, rid("b0"), rid("b1"), owner="key-b")
    await enqueue(queue, rid("c0"), owner="key-c")
    first = [job.response_id for job in await queue.take("w1", W, block_ms=0)]
    # New keys first, in arrival order, then round robin over every key with jobs left.
    assert first == [rid("b0"), rid("c0"), rid("a1"), rid("b1")]
    rest = [job.response_id for job in await queue.take("w1", 3, block_ms=0)]
    assert rest == [rid("a2"), rid("a3"), rid("a4")]


async def test_keys_are_served_round_robin_and_each_in_its_own_order(
        queue: RedisJobQueue) -> None:
    for n in range(3):
        await enqueue(queue, rid(f"a{n}"), owner="key-a")
        await enqueue(queue, rid(f"b{n}"), rid(f"b{n}x"), owner="key-b")
    order = [job.response_id for job in await queue.take("w1", 9, block_ms=0)]
    assert order == [rid("a0"), rid("b0"), rid("a1"), rid("b0x"), rid("a2"), rid("b1"),
                     rid("b1x"), rid("b2"), rid("b2x")]
    assert await queue.take("w1", 9, block_ms=0) == []


async def test_a_key_at_its_share_is_refused_and_another_key_is_not(
        queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("a0"), rid("a1"), rid("a2"), limit=3, owner="key-a")
    running = await take_one(queue, "w1")
    # Running jobs count in the share too: queued + running.
    assert await add(queue, rid("a3"), limit=3, owner="key-a") == "key_full"
    assert await add(queue, rid("b0"), limit=3, owner="key-b") == "queued"
    await queue.done(running.entry_id)
    assert await add(queue, rid("a3"), limit=3, owner="key-a") == "queued"
    assert await queue.room("key-a", limit=3, total=TOTAL) == (0, TOTAL - 4)
    assert await queue.room("key-b", limit=3, total=TOTAL) == (2, TOTAL - 4)


async def test_the_whole_queue_has_its_own_bound(queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("a0"), rid("a1"), owner="key-a")
    await take_one(queue, "w1")
    assert await add(queue, rid("b0"), total=3, owner="key-b") == "queued"
    assert await add(queue, rid("c0"), total=3, owner="key-c") == "queue_full"
    assert await queue.room("key-c", limit=LIMIT, total=3) == (LIMIT, 0)
    assert await queue.length() == 3


async def test_a_batch_is_queued_whole_or_not_at_all(queue: RedisJobQueue) -> None:
    batch = [(rid(f"a{n}"), SPEC) for n in range(4)]
    await enqueue(queue, rid("x"), owner="key-a")
    assert await queue.enqueue("key-a", batch, limit=4, total=TOTAL) == "key_full"
    assert await queue.length() == 1
    assert await queue.enqueue("key-a", batch, limit=5, total=TOTAL) == "queued"
    taken = [job.response_id for job in await queue.take("w1", 10, block_ms=0)]
    assert taken == [rid("x"), *(an_id for an_id, _ in batch)]


async def test_concurrent_batches_of_keys_never_pass_either_bound(queue: RedisJobQueue) -> None:
    def batch(key: str, n: int) -> list[tuple[str, bytes]]:
        return [(rid(f"{key}{n}-{i}"), SPEC) for i in range(3)]

    answers = await settle(queue.enqueue(key, batch(key, n), limit=6, total=15)
                           for n in range(4) for key in ("a", "b", "c", "d"))
    assert answers.count("queued") == 5  # 15 / 3
    assert await queue.length() == 15


async def test_a_reclaimed_job_still_counts_for_its_key_until_done(
        queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("a0"), limit=1, owner="key-a")
    dead = await take_one(queue, "w1")
    await asyncio.sleep(IDLE)
    [again] = await queue.reclaim("w2", MIN_IDLE_MS, 10)
    assert (again.entry_id, again.response_id, again.spec) == (dead.entry_id, rid("a0"), SPEC)
    assert await add(queue, rid("a1"), limit=1, owner="key-a") == "key_full"
    await queue.done(again.entry_id)
    assert await add(queue, rid("a1"), limit=1, owner="key-a") == "queued"


async def test_a_requeued_job_goes_back_to_the_front_of_its_keys_queue(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("a0"), rid("a1"), limit=2, owner="key-a")
    job = await take_one(queue, "w1")
    await enqueue(queue, rid("b0"), owner="key-b")
    await queue.requeue(job)
    assert await pending(store, job.entry_id) is None
    assert await add(queue, rid("a2"), limit=2, owner="key-a") == "key_full"  # still 2
    order = [j.response_id for j in await queue.take("w2", 10, block_ms=0)]
    assert order == [rid("b0"), rid("a0"), rid("a1")]


async def test_an_entry_queued_by_an_older_release_is_still_delivered_and_finished(
        store: RedisStore, queue: RedisJobQueue) -> None:
    # The previous release XADDed straight into the stream (fields r and s, no key).
    await store.client.xadd(keys.JOB_QUEUE, {"r": rid("old"), "s": SPEC})
    await enqueue(queue, rid("new"))
    old = await take_one(queue, "w1")
    assert (old.response_id, old.spec) == (rid("old"), SPEC)
    await queue.requeue(old)  # handed back into the stream, as that release did
    assert [j.response_id for j in await queue.take("w2", 5, block_ms=0)] == [rid("old"),
                                                                               rid("new")]
    assert await queue.take("w2", 5, block_ms=0) == []


async def test_a_key_is_not_shut_out_by_a_running_entry_removed_elsewhere(
        store: RedisStore, queue: RedisJobQueue) -> None:
    # An older release's worker reclaimed one of our entries and finished it its own way
    # (XACK + XDEL): the key's running count must not keep the place for ever.
    await enqueue(queue, rid("a0"), limit=1, owner="key-a")
    job = await take_one(queue, "w1")
    await store.client.xack(keys.JOB_QUEUE, keys.JOB_GROUP, job.entry_id)
    await store.client.xdel(keys.JOB_QUEUE, job.entry_id)
    assert await add(queue, rid("a1"), limit=1, owner="key-a") == "queued"


async def test_the_queue_keeps_no_bookkeeping_once_drained(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("a0"), rid("a1"), owner="key-a")
    await enqueue(queue, rid("b0"), owner="key-b")
    for job in await queue.take("w1", 10, block_ms=0):
        await queue.done(job.entry_id)
    for key in keys.JOB_KEYS[1:6]:
        assert not await store.client.exists(key), key
    assert await queue.length() == 0


# -- keep_alive and reclaim -----------------------------------------------------------------


async def test_keep_alive_resets_the_idle_time_of_the_owner(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"))
    job = await take_one(queue, "w1")
    await asyncio.sleep(IDLE)
    assert await queue.keep_alive("w1", [job.entry_id]) == []  # nothing lost
    assert await queue.reclaim("w2", MIN_IDLE_MS, 10) == []
    row = await pending(store, job.entry_id)
    assert row is not None and row["consumer"] == b"w1"
    assert row["time_since_delivered"] < MIN_IDLE_MS
    assert row["times_delivered"] == 1  # a heartbeat is not a redelivery


async def test_keep_alive_never_takes_back_a_reclaimed_entry(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"))
    job = await take_one(queue, "w1")
    await asyncio.sleep(IDLE)
    assert [j.entry_id for j in await queue.reclaim("w2", MIN_IDLE_MS, 10)] == [job.entry_id]
    # w1 was presumed dead: it is told the entry is lost, and does not take it back
    assert await queue.keep_alive("w1", [job.entry_id]) == [job.entry_id]
    assert await queue.keep_alive("w3", [job.entry_id]) == [job.entry_id]  # never owned it
    assert await owner(store, job.entry_id) == "w2"
    assert await queue.keep_alive("w2", [job.entry_id]) == []


async def test_reclaim_takes_only_entries_idle_long_enough(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"), rid("2"))
    stale = await take_one(queue, "w1")
    await asyncio.sleep(IDLE)
    fresh = await take_one(queue, "w1")
    reclaimed = await queue.reclaim("w2", MIN_IDLE_MS, 10)
    assert [(j.entry_id, j.response_id, j.spec) for j in reclaimed] == [
        (stale.entry_id, rid("1"), SPEC)]
    assert await owner(store, stale.entry_id) == "w2"
    assert await owner(store, fresh.entry_id) == "w1"
    assert await queue.reclaim("w3", MIN_IDLE_MS, 10) == []  # just reclaimed: fresh again


async def test_reclaim_takes_at_most_count(queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"), rid("2"), rid("3"))
    await queue.take("w1", 3, block_ms=0)
    await asyncio.sleep(IDLE)
    assert len(await queue.reclaim("w2", MIN_IDLE_MS, 2)) == 2
    assert len(await queue.reclaim("w2", MIN_IDLE_MS, 2)) == 1


async def test_reclaim_finds_an_idle_entry_behind_many_live_ones(
        store: RedisStore, queue: RedisJobQueue) -> None:
    # Redis's XAUTOCLAIM examines at most 10 x COUNT pending entries per call: successive
    # calls must walk on through the list, not restart at its (kept-alive) head.
    await enqueue(queue, *(rid(n) for n in range(26)))
    live = await queue.take("w1", 25, block_ms=0)
    dead = await take_one(queue, "w2")
    await asyncio.sleep(IDLE)
    await queue.keep_alive("w1", [job.entry_id for job in live])
    found: list[Job] = []
    for _ in range(5):
        found += await queue.reclaim("w3", MIN_IDLE_MS, 1)
    assert [job.entry_id for job in found] == [dead.entry_id]


async def test_reclaim_skips_entries_deleted_while_pending(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"), rid("2"))
    gone, kept = await queue.take("w1", 2, block_ms=0)
    await store.client.xdel(keys.JOB_QUEUE, gone.entry_id)
    await asyncio.sleep(IDLE)
    reclaimed = await queue.reclaim("w2", MIN_IDLE_MS, 10)
    assert [job.entry_id for job in reclaimed] == [kept.entry_id]
    assert await pending(store, gone.entry_id) is None


# -- requeue --------------------------------------------------------------------------------


async def test_requeue_hands_the_job_back_to_be_taken_again(
        store: RedisStore, queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"))
    job = await take_one(queue, "w1")
    await queue.requeue(job)
    assert await queue.length() == 1
    assert await pending(store, job.entry_id) is None
    again = await take_one(queue, "w2")
    assert (again.response_id, again.spec) == (rid("1"), SPEC)
    assert again.entry_id != job.entry_id


async def test_requeue_of_a_finished_job_adds_nothing(queue: RedisJobQueue) -> None:
    await enqueue(queue, rid("1"))
    job = await take_one(queue, "w1")
    await queue.done(job.entry_id)
    await queue.requeue(job)
    assert await queue.length() == 0


# -- cancels --------------------------------------------------------------------------------


async def test_publish_cancel_reaches_a_reader(store: RedisStore, queue: RedisJobQueue) -> None:
    reader = asyncio.create_task(first_cancel(queue))
    await until_subscribed(store)
    await queue.publish_cancel(rid("1"))
    assert await asyncio.wait_for(reader, 2.0) == rid("1")


async def test_every_reader_hears_a_cancel(store: RedisStore, queue: RedisJobQueue) -> None:
    other = job_queue(store)
    readers = [asyncio.create_task(first_cancel(q)) for q in (queue, other)]
    await until_subscribed(store, 2)
    await queue.publish_cancel(rid("1"))
    assert await asyncio.wait_for(asyncio.gather(*readers), 2.0) == [rid("1"), rid("1")]


async def test_a_reader_unsubscribes_when_it_stops(store: RedisStore,
                                                   queue: RedisJobQueue) -> None:
    if store.embedded:
        pytest.skip("fakeredis forgets a closed connection's subscriptions only when the "
                    "garbage collector reaches it")
    reader = asyncio.create_task(first_cancel(queue))
    await until_subscribed(store)
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    await until_subscribed(store, 0)


async def test_a_broken_subscription_raises_store_unavailable(
        store: RedisStore, queue: RedisJobQueue) -> None:
    reader = asyncio.create_task(first_cancel(queue))
    await until_subscribed(store)
    if store.embedded:
        server = store.client.connection_pool.connection_kwargs["server"]
        server.connected = False
    else:
        where: Any = {"target_nodes": "all"} if store.sharded else {}
        await store.client.client_kill_filter(_type="pubsub", **where)
    try:
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(reader, 3.0)
    finally:
        if store.embedded:
            server.connected = True


# -- statuses -------------------------------------------------------------------------------


async def test_statuses_of_known_and_unknown_responses(
        store: RedisStore, queue: RedisJobQueue, round_trips: RoundTrips) -> None:
    await create_response(store, rid("1"), "in_progress")
    await create_response(store, rid("2"), "cancelled")
    round_trips.reset()
    assert await queue.statuses([rid("1"), rid("2"), rid("x")]) == {
        rid("1"): "in_progress", rid("2"): "cancelled", rid("x"): None}
    assert round_trips.count == 1
    assert await queue.statuses([]) == {}
    assert round_trips.count == 1


# -- a lost stream or group -----------------------------------------------------------------


async def test_take_creates_the_group_on_first_use(queue: RedisJobQueue) -> None:
    assert await queue.take("w1", 1, block_ms=0) == []
    assert await queue.reclaim("w1", MIN_IDLE_MS, 1) == []
    await enqueue(queue, rid("1"))
    assert (await take_one(queue, "w1")).response_id == rid("1")


async def test_the_queue_works_on_after_its_stream_is_lost(
        store: RedisStore, queue: RedisJobQueue) -> None:
    # A Redis restart without persistence: the stream and its group are gone.
    await enqueue(queue, rid("1"))
    running = await take_one(queue, "w1")
    await store.client.delete(keys.JOB_QUEUE)
    await queue.keep_alive("w1", [running.entry_id])
    assert await queue.reclaim("w2", 0, 10) == []
    await queue.done(running.entry_id)
    assert await queue.take("w1", 1, block_ms=0) == []
    await enqueue(queue, rid("2"))
    assert (await take_one(queue, "w1")).response_id == rid("2")
    await store.client.delete(keys.JOB_QUEUE)
    await enqueue(queue, rid("3"))
    assert (await take_one(queue, "w1")).response_id == rid("3")


async def test_a_lost_group_is_recreated_from_the_start_of_the_stream(
        store: RedisStore, queue: RedisJobQueue) -> None:
    # The stream exists (a job ran) and holds an undelivered entry (an older release's).
    await enqueue(queue, rid("1"), rid("2"))
    await queue.done((await take_one(queue, "w1")).entry_id)
    await store.client.xadd(keys.JOB_QUEUE, {"r": rid("old"), "s": SPEC})
    await store.client.xgroup_destroy(keys.JOB_QUEUE, keys.JOB_GROUP)
    assert [j.response_id for j in await queue.take("w1", 2, block_ms=0)] == [rid("old"),
                                                                               rid("2")]


async def test_concurrent_takers_all_survive_a_missing_group(queue: RedisJobQueue) -> None:
    results = await settle(queue.take(f"w{n}", 1, block_ms=0) for n in range(5))
    assert results == [[]] * 5


async def test_a_take_racing_another_workers_group_creation_still_delivers(
        store: RedisStore, queue: RedisJobQueue) -> None:
    # Once a race (our read found no group, another worker created it before us: BUSYGROUP);
    # now the take script finds the group missing and creates it in one atomic step.
    await enqueue(queue, rid("1"))
    await settle(queue.take(f"w{n}", 0, block_ms=0) for n in range(3))
    results = await settle(queue.take(f"w{n}", 1, block_ms=0) for n in range(3))
    assert sorted(job.response_id for jobs in results for job in jobs) == [rid("1")]


# -- round trips ----------------------------------------------------------------------------


async def test_one_round_trip_per_call(queue: RedisJobQueue, round_trips: RoundTrips) -> None:
    # Warm up: the group exists and every script is loaded (first uses pay SCRIPT LOAD).
    await enqueue(queue, rid("0"), rid("1"))
    warm = await take_one(queue, "w0")
    await queue.keep_alive("w0", [warm.entry_id])
    await queue.requeue(warm)
    await queue.done((await take_one(queue, "w0")).entry_id)
    await take_one(queue, "w0")

    await enqueue(queue, rid("2"))
    job = await take_one(queue, "w1")
    calls = [
        add(queue, rid("3")),
        queue.take("w1", 10, block_ms=0),
        queue.keep_alive("w1", [job.entry_id]),
        queue.reclaim("w1", 60_000, 10),
        queue.requeue(job),
        queue.length(),
        queue.publish_cancel(rid("2")),
        queue.statuses([rid("2"), rid("3")]),
    ]
    for call in calls:
        round_trips.reset()
        await call
        assert round_trips.count == 1
    round_trips.reset()
    await queue.keep_alive("w1", [])
    await queue.statuses([])
    assert round_trips.count == 0
    [last] = await queue.take("w1", 10, block_ms=0)
    round_trips.reset()
    await queue.done(last.entry_id)
    assert round_trips.count == 1


# -- a dead server --------------------------------------------------------------------------


@pytest.fixture(params=["redis", "embedded"])
async def dead_queue(request: pytest.FixtureRequest) -> AsyncIterator[RedisJobQueue]:
    """A queue whose server is gone: a port nobody listens on, or an in-process server set to
    refuse connections."""
    if request.param == "redis":
        store = open_store(f"redis://127.0.0.1:{free_port()}/0")
    else:
        server = fakeredis.FakeServer(version=(7, 0))
        server.connected = False
        store = RedisStore(fakeredis.FakeAsyncRedis(server=server), embedded=True)
    try:
        yield job_queue(store)
    finally:
        await store.aclose()


async def test_every_call_on_a_dead_server_raises_store_unavailable(
        dead_queue: RedisJobQueue) -> None:
    job = Job(entry_id="1-1", response_id=rid("1"), spec=SPEC)
    calls = [
        add(dead_queue, rid("1")),
        dead_queue.room(OWNER, limit=LIMIT, total=TOTAL),
        dead_queue.take("w1", 1, block_ms=0),
        dead_queue.keep_alive("w1", ["1-1"]),
        dead_queue.reclaim("w1", MIN_IDLE_MS, 1),
        dead_queue.done("1-1"),
        dead_queue.requeue(job),
        dead_queue.length(),
        dead_queue.publish_cancel(rid("1")),
        dead_queue.statuses([rid("1")]),
        first_cancel(dead_queue),
    ]
    for call in calls:
        with pytest.raises(StoreUnavailable):
            await call
