"""The follower hub: stored events, live events from Redis, and this process's own events handed
over at once — never reordered, never skipped, never twice (embedded store)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from proxy.core.errors import StoreUnavailable
from proxy.services.eventlog import follow as follow_module
from proxy.services.eventlog import pages as logread
from proxy.services.eventlog.follow import Followers
from proxy.services.eventlog.log import EventLog
from proxy.services.eventlog.writer import EventLogHub
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import open_store
from proxy.store.redis import RedisStore
from tests.support.spies import first_args


def event(seq: int, kind: str = "response.output_text.delta") -> StoredEvent:
    return StoredEvent(seq, kind, b'{"sequence_number":%d}' % seq)


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    store = open_store(None)
    # the store keeps logs of known responses only
    record = ResponseRecord({"id": "resp_1", "status": "in_progress"}, "tenant", logged=True)
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
    followers = Followers(store, block_ms=20)
    followers.publish_local("resp_1", event(0))  # no follower: kept nowhere, no reader started
    assert followers._followers == {} and followers._task is None
    # A follower joining later gets each event once, from the store, not a stale local copy.
    await store.append_events({"resp_1": [event(0), event(1, "response.completed")]}, ttl=60)
    seen: list[int] = []
    await asyncio.wait_for(collect(followers, -1, seen), 2)
    assert seen == [0, 1]
    await followers.aclose()


async def test_a_batch_nobody_here_follows_is_looked_up_once_and_a_followed_one_arrives_whole(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    followers = Followers(store, block_ms=1000)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0,  # no flush during the test
                      local=followers.publish_local, local_all=followers.publish_local_all)
    followers.recent = hub.recent
    offered: list[int] = []
    publish = followers.publish_local

    def counted(response_id: str, event: StoredEvent) -> None:
        offered.append(event.seq)
        publish(response_id, event)

    monkeypatch.setattr(followers, "publish_local", counted)
    handle = hub.open("resp_1")
    handle.add_all([event(seq) for seq in range(12)])  # nobody follows: no event offered
    assert offered == []
    seen: list[int] = []
    reader = asyncio.create_task(collect(followers, -1, seen))
    await wait_for(seen, 12)
    handle.add_all([event(seq) for seq in range(12, 15)])
    await wait_for(seen, 15)
    assert seen == list(range(15)) and offered == [12, 13, 14]
    reader.cancel()
    await hub.aclose()
    await followers.aclose()


async def test_an_event_nobody_here_follows_is_not_offered_and_a_followed_one_arrives(
        store: RedisStore) -> None:
    # `add`, once a token of every stored stream: the writer hands events to `local` only for
    # a log a follower here joined (it asked for the `recent` ones first), not for every event.
    followers = Followers(store, block_ms=1000)
    offered: list[int] = []

    def counted(response_id: str, event: StoredEvent) -> None:
        offered.append(event.seq)
        followers.publish_local(response_id, event)

    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, local=counted,
                      locally_followed=followers.followed_here)
    followers.recent = hub.recent
    handle = hub.open("resp_1")
    for seq in range(3):
        handle.add(event(seq))
    assert offered == []
    seen: list[int] = []
    reader = asyncio.create_task(collect(followers, -1, seen))
    await wait_for(seen, 3)
    for seq in range(3, 5):
        handle.add(event(seq))
    await wait_for(seen, 5)
    assert seen == list(range(5)) and offered == [3, 4]
    reader.cancel()
    await hub.aclose()
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


async def test_recent_holds_only_what_is_not_yet_in_the_store(store: RedisStore) -> None:
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open("resp_1")
    for seq in range(5):
        handle.add(event(seq))
    assert [e.seq for e in hub.recent("resp_1")] == [0, 1, 2, 3, 4]
    assert await hub.flush_now()
    assert hub.recent("resp_1") == []  # a late follower finds them in the store
    handle.add(event(5))
    assert [e.seq for e in hub.recent("resp_1")] == [5]
    await hub.aclose()


async def test_recent_keeps_the_events_of_a_flush_in_flight_before_the_later_ones(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # The write in flight keeps what it carries (the writer keeps no second list of every
    # event): a follower joining meanwhile still catches up from all of them, in order.
    real = store.append_events
    entered, gate = asyncio.Event(), asyncio.Event()

    async def slow(*args: object, **kwargs: object) -> object:
        entered.set()
        await gate.wait()
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append_events", slow)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open("resp_1")
    for seq in range(3):
        handle.add(event(seq))
    flushing = asyncio.create_task(hub.flush_now())
    await asyncio.wait_for(entered.wait(), 2)
    handle.add(event(3))
    handle.record([{"sequence_number": 4}], [("response.output_text.delta", b"{}")])
    assert handle.pending == [event(3), (4, "response.output_text.delta", b"{}")]
    assert [e.seq for e in hub.recent("resp_1")] == [0, 1, 2, 3, 4]
    gate.set()
    assert await asyncio.wait_for(flushing, 2)
    assert [e.seq for e in hub.recent("resp_1")] == [3, 4]
    assert await hub.flush_now() and hub.recent("resp_1") == []
    assert [e.seq for e in await store.read_events("resp_1")] == [0, 1, 2, 3, 4]
    await hub.aclose()


async def test_a_full_buffer_is_flushed_without_waiting_for_the_window(
        store: RedisStore) -> None:
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, max_pending=4)
    handle = hub.open("resp_1")
    for seq in range(4):
        handle.add(event(seq))
    for _ in range(200):  # bounded: 2 s, far below the 30 s window
        if len(await store.read_events("resp_1")) == 4:
            break
        await asyncio.sleep(0.01)
    assert [e.seq for e in await store.read_events("resp_1")] == [0, 1, 2, 3]
    await hub.aclose()


async def test_a_failed_flush_keeps_its_events_and_writes_them_later(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real = store.append_events
    failures = [StoreUnavailable("down")]

    async def flaky(*args: object, **kwargs: object) -> None:
        if failures:
            raise failures.pop()
        await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append_events", flaky)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=0.001)
    handle = hub.open("resp_1")
    handle.add(event(0))
    handle.add(event(1))
    for _ in range(300):  # bounded: 3 s
        if len(await store.read_events("resp_1")) == 2:
            break
        await asyncio.sleep(0.01)
    handle.add(event(2))
    await hub.flush_now()
    assert [e.seq for e in await store.read_events("resp_1")] == [0, 1, 2]
    assert not failures and not handle.broken
    await hub.aclose()


async def test_a_slow_follower_is_dropped_then_catches_up_from_the_store(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow_module, "MAX_BACKLOG", 4)
    reads: list[int | None] = []
    real_read = store.read_events

    async def counting(*args: object, **kwargs: object) -> list[StoredEvent]:
        reads.append(kwargs.get("limit"))  # type: ignore[arg-type]
        return await real_read(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "read_events", counting)
    monkeypatch.setattr(logread, "READ_PAGE", 3)
    await store.append_events({"resp_1": [event(0)]}, ttl=60)
    followers = Followers(store, block_ms=20)
    reader = followers.follow("resp_1", after=-1, idle=5)
    assert (await reader.__anext__()).seq == 0
    following = asyncio.ensure_future(reader.__anext__())
    for _ in range(100):  # bounded: until the reader has joined the live fan-out
        if followers._followers:
            break
        await asyncio.sleep(0.01)
    (joined,) = followers._followers["resp_1"]
    events = [event(seq) for seq in range(1, 20)] + [event(20, "response.completed")]
    await store.append_events({"resp_1": events}, ttl=60)
    for item in events:
        followers.publish_local("resp_1", item)  # the reader does not read meanwhile
    assert len(joined.items) <= 4 and joined.dropped
    assert joined not in followers._followers.get("resp_1", set())
    seen = [(await following).seq] + [item.seq async for item in reader]
    assert seen == list(range(1, 21))
    assert reads and all(limit == 3 for limit in reads)  # paged, never a whole log
    await followers.aclose()


async def test_a_crashed_reader_loop_is_restarted_and_its_followers_go_on(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.services.process.loops import LoopSupervisor

    real_tail = store.tail
    crashes = [RuntimeError("a bug in the reader")]

    async def tail(*args: object, **kwargs: object) -> dict[str, list[StoredEvent]]:
        if crashes:
            raise crashes.pop()
        return await real_tail(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "tail", tail)
    supervisor = LoopSupervisor(first_delay=0.01)
    followers = Followers(store, block_ms=20, supervisor=supervisor)
    seen: list[int] = []
    reader = asyncio.create_task(collect(followers, -1, seen))
    for _ in range(100):  # bounded: until the reader has joined (and the tail has crashed)
        if followers._followers and not crashes:
            break
        await asyncio.sleep(0.01)
    await store.append_events({"resp_1": [event(0), event(1, "response.completed")]}, ttl=60)
    await asyncio.wait_for(reader, 5)
    assert seen == [0, 1]
    assert supervisor.restarts == 1 and not crashes
    await followers.aclose()


async def test_streams_ending_together_share_their_flushes(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty streams finishing in the same instant while ten others go on streaming: each
    finisher's events are in the store when its flush returns, yet the flushes are shared (a
    group commit): a finisher already covered does not flush the live streams' new events."""
    ids = [f"resp_g{n}" for n in range(40)]
    live_ids = [f"resp_live{n}" for n in range(10)]
    for rid in ids + live_ids:
        record = ResponseRecord({"id": rid, "status": "in_progress"}, "tenant", logged=True)
        await store.create_response(record, [], ttl=60, event_ttl=60)
    real = store.append_events
    calls: list[int] = []

    async def counted(batches: dict[str, list[StoredEvent]], **kwargs: int) -> None:
        calls.append(len(batches))
        await asyncio.sleep(0.01)  # a round trip's time, so that finishers pile up
        await real(batches, **kwargs)

    monkeypatch.setattr(store, "append_events", counted)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)  # no timed flush
    handles = [hub.open(rid) for rid in ids]
    live = [hub.open(rid) for rid in live_ids]
    for handle in handles:
        for seq in range(3):
            handle.add(event(seq))

    async def stream_on() -> None:
        for seq in range(10_000):
            for handle in live:
                handle.add(event(seq))
            await asyncio.sleep(0.001)

    streaming = asyncio.create_task(stream_on())
    await asyncio.gather(*(hub.flush_through(handle) for handle in handles))
    streaming.cancel()
    for rid in ids:
        assert [e.seq for e in await store.read_events(rid)] == [0, 1, 2]
    assert len(calls) <= 3, calls  # one per stream would be 40
    await hub.aclose()


async def test_a_follower_elsewhere_marks_the_log_followed_and_one_here_does_not(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two instances on one store: the writer's own follower gets its events locally and
    leaves the mark alone; one on the other instance marks the response (once per follow),
    which the writer's next flush reports (services/eventlog/writer.py holds an unfollowed
    stream's events back for longer entries)."""
    here, there = EventLog(store, ttl=60, event_ttl=60), EventLog(store, ttl=60, event_ttl=60)
    marks = first_args(monkeypatch, store, "mark_followed")
    handle = here.open("resp_1")
    handle.add(event(0))
    assert await here.writer.flush_now()
    seen_here: list[int] = []
    seen_there: list[int] = []

    async def follow(log: EventLog, out: list[int]) -> None:
        async for item in log.follow("resp_1", after=-1, idle=5):
            out.append(item.seq)

    readers = [asyncio.create_task(follow(here, seen_here))]
    await wait_for(seen_here, 1)
    await asyncio.sleep(0.05)
    assert marks == []  # the writer's own instance
    readers.append(asyncio.create_task(follow(there, seen_there)))
    await wait_for(seen_there, 1)
    for _ in range(100):  # bounded: 1 s
        if marks:
            break
        await asyncio.sleep(0.01)
    assert marks == ["resp_1"]
    handle.add(event(1))
    assert await here.writer.flush_now()  # the next flush of its events reports the mark
    assert handle.followed
    handle.add(event(2, "response.completed"))
    assert await here.writer.flush_now()
    await asyncio.wait_for(asyncio.gather(*readers), 5)
    assert seen_here == seen_there == [0, 1, 2]
    assert marks == ["resp_1"]
    for log in (here, there):
        await log.aclose()


async def test_a_follower_here_before_the_log_is_opened_gets_its_events_as_made(
        store: RedisStore) -> None:
    # A background stream's client follows as soon as the job is queued; the worker here opens
    # the log later, and hands that follower each event as it makes it, not through the store.
    followers = Followers(store, block_ms=1000)
    offered: list[int] = []
    publish = followers.publish_local

    def counted(response_id: str, event: StoredEvent) -> None:
        offered.append(event.seq)
        publish(response_id, event)

    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, local=counted,
                      locally_followed=followers.followed_here)
    followers.recent = hub.recent
    seen: list[int] = []
    reader = asyncio.create_task(collect(followers, -1, seen))
    for _ in range(200):  # bounded: until the follower has joined (the log is empty)
        if "resp_1" in followers.followed_here:
            break
        await asyncio.sleep(0.01)
    handle = hub.open("resp_1")
    for seq in range(3):
        handle.record([{"sequence_number": seq}], [("response.output_text.delta", b"{}")])
    await wait_for(seen, 3)
    assert seen == offered == [0, 1, 2]
    assert await store.read_events("resp_1") == []  # none of them written yet
    reader.cancel()
    await hub.aclose()
    await followers.aclose()
