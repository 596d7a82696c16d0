"""How often the event-log writer writes, and what (services/eventlog/writer.py): a stream's
events gathered over the window go as one log entry; a stream's first events are written
ahead of the window, so that a follower on another instance sees a response start as soon as
with a short window, but a foreground stream's (its start is made from the record meanwhile);
a stream nobody on another instance follows keeps its events for a few windows (one longer
entry), one that is followed there is written every window again once the writer's flush learns
it (embedded store)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from proxy.services.eventlog import writer
from proxy.services.eventlog.log import EventLog
from proxy.services.eventlog.writer import FIRST_WINDOW, HOLD_WINDOWS, WINDOW, EventLogHub
from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import open_store
from proxy.store.lua.packing import MAX_ENTRY_BYTES, MAX_EVENTS_PER_ENTRY
from proxy.store.redis import RedisStore


def event(seq: int) -> StoredEvent:
    return StoredEvent(seq, "response.output_text.delta", b'{"sequence_number":%d}' % seq)


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    store = open_store(None)
    for rid in ("resp_1", "resp_2", "resp_3"):  # the store keeps logs of known responses only
        record = ResponseRecord({"id": rid, "status": "in_progress"}, "tenant", logged=True)
        await store.create_response(record, [], ttl=60, event_ttl=60)
    yield store
    await store.aclose()


async def entries(store: RedisStore, rid: str) -> int:
    return int(await store.client.xlen(keys.response_log(rid)))


async def stored(store: RedisStore, rid: str) -> list[int]:
    return [e.seq for e in await store.read_events(rid)]


async def until_stored(store: RedisStore, rid: str, n: int) -> None:
    for _ in range(200):  # bounded: 2 s, far below the 30 s window of these hubs
        if len(await stored(store, rid)) >= n:
            return
        await asyncio.sleep(0.01)


async def test_the_events_of_a_stream_between_two_flushes_are_one_entry(
        store: RedisStore) -> None:
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)  # flushed by hand
    handles = [hub.open(rid) for rid in ("resp_1", "resp_2", "resp_3")]
    for seq in range(12):  # one token at a time, as a 20 ms/token stream hands them over
        for handle in handles:
            handle.add(event(seq))
        if seq % 4 == 3:
            assert await hub.flush_now()
    for rid in ("resp_1", "resp_2", "resp_3"):
        assert await entries(store, rid) == 3  # one per flush, not one per token
        assert await stored(store, rid) == list(range(12))
    await hub.aclose()


async def test_a_stream_first_events_go_ahead_and_the_rest_wait_for_the_window(
        store: RedisStore) -> None:
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, first_window=0.02)
    first = hub.open("resp_1")
    first.add(event(0))
    await until_stored(store, "resp_1", 1)
    assert await stored(store, "resp_1") == [0]  # written long before the 30 s window
    first.add(event(1))  # its stream has started: this one waits for the window
    second = hub.open("resp_2")
    second.add(event(0))
    second.add(event(1))
    await until_stored(store, "resp_2", 2)
    assert await stored(store, "resp_2") == [0, 1]
    assert await stored(store, "resp_1") == [0]
    assert await hub.flush_now()  # what the window's end writes
    assert await stored(store, "resp_1") == [0, 1]
    await hub.aclose()


async def test_a_stream_opened_without_an_early_start_waits_and_is_held_as_a_started_one(
        store: RedisStore) -> None:
    # a foreground stream's start: readers elsewhere make it from the record (stored.py `_head`)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, first_window=0.02)
    handle = hub.open("resp_1", early=False)
    handle.add(event(0))
    handle.add(event(1))
    await asyncio.sleep(0.1)  # five first windows: none of them writes it
    assert await stored(store, "resp_1") == []
    for _ in range(HOLD_WINDOWS + 1):  # alone, the start waits past any hold for a token
        assert await hub.flush_window()
    assert await stored(store, "resp_1") == []
    handle.add(event(2))
    assert await hub.flush_window()  # with it, held as a started stream's events
    assert await stored(store, "resp_1") == []
    assert await hub.flush_now()
    assert await stored(store, "resp_1") == [0, 1, 2]
    await hub.aclose()


async def test_without_a_first_window_first_events_wait_like_the_others(
        store: RedisStore) -> None:
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open("resp_1")
    handle.add(event(0))
    await asyncio.sleep(0.1)  # five of the first windows the server uses
    assert await stored(store, "resp_1") == []
    await hub.aclose()
    assert await stored(store, "resp_1") == [0]  # the last flush, on closing


async def test_the_server_gathers_a_window_of_tokens_and_writes_first_events_ahead(
        store: RedisStore) -> None:
    events = EventLog(store, ttl=60, event_ttl=60)
    assert (events.writer.window, events.writer.first_window) == (WINDOW, FIRST_WINDOW)
    assert FIRST_WINDOW < WINDOW and WINDOW >= 4 * 0.02  # several 20 ms tokens per entry
    await events.aclose()


@pytest.mark.parametrize("one_by_one", [True, False])
async def test_a_stream_past_the_unflushed_bound_is_given_up_either_way_it_adds(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch, one_by_one: bool) -> None:
    monkeypatch.setattr(writer, "MAX_UNFLUSHED", 3)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)  # the store never written
    handle = hub.open("resp_1")
    if one_by_one:  # one event per upstream read (a 20 ms/token stream)
        for seq in range(4):
            handle.add(event(seq))
    else:
        handle.add_all([event(seq) for seq in range(4)])
    assert handle.broken and handle.pending == [] and hub.recent("resp_1") == []
    handle.add(event(4))  # a given-up log takes nothing more
    assert handle.pending == []
    await hub.aclose()
    assert await stored(store, "resp_1") == []


# Tokens per window that never fill an entry before the hold ends: a stream is held its whole
# `HOLD_WINDOWS` (a 20 ms/token stream brings five to a 100 ms window).
SLOW = MAX_EVENTS_PER_ENTRY // (HOLD_WINDOWS + 1)


async def started(store: RedisStore) -> tuple[EventLogHub, writer.LogHandle]:
    """A hub flushed by hand (its window never ends) and one stream whose first event a timed
    flush has written: a stream's first events are never held."""
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open("resp_1")
    handle.add(event(0))
    assert await hub.flush_window()
    return hub, handle


async def windows(hub: EventLogHub, handle: writer.LogHandle, seq: int, count: int,
                  per_window: int) -> int:
    """`count` timed flushes, each after `per_window` more events; returns the next sequence
    number."""
    for _ in range(count):
        for _ in range(per_window):
            handle.add(event(seq))
            seq += 1
        assert await hub.flush_window()
    return seq


async def test_an_unfollowed_stream_keeps_its_events_for_a_few_windows_as_one_entry(
        store: RedisStore) -> None:
    hub, handle = await started(store)
    assert await stored(store, "resp_1") == [0]
    seq = await windows(hub, handle, 1, HOLD_WINDOWS - 1, SLOW)
    assert await stored(store, "resp_1") == [0]  # held: nobody elsewhere waits for them
    seq = await windows(hub, handle, seq, 1, SLOW)
    assert await stored(store, "resp_1") == list(range(seq))
    assert await entries(store, "resp_1") == 2  # the first event, then one entry of them all
    await hub.aclose()


async def test_a_stream_is_held_no_longer_than_one_entry_holds(store: RedisStore) -> None:
    hub, handle = await started(store)
    # Over half an entry a window: two windows would overflow it, so each writes its own
    seq = await windows(hub, handle, 1, 1, MAX_EVENTS_PER_ENTRY // 2 + 2)
    assert await stored(store, "resp_1") == list(range(seq))
    # Over a third: a second window's fits, a third's would not
    third = MAX_EVENTS_PER_ENTRY // 3 + 2
    written = seq
    seq = await windows(hub, handle, seq, 1, third)
    assert len(await stored(store, "resp_1")) == written
    seq = await windows(hub, handle, seq, 1, third)
    assert await stored(store, "resp_1") == list(range(seq))
    assert await entries(store, "resp_1") == 3
    await hub.aclose()


def big_event(seq: int) -> StoredEvent:
    """An event of ~1/40 of an entry's byte bound: a held run passes that bound before its
    count bound (text deltas with long ids and a few characters, ~188 bytes, do the same)."""
    text = b"x" * (MAX_ENTRY_BYTES // 40)
    return StoredEvent(seq, "response.output_text.delta",
                       b'{"sequence_number":%d,"delta":"%s"}' % (seq, text))


async def test_a_held_run_past_an_entrys_bytes_goes_as_one_entry_its_overflow_held(
        store: RedisStore) -> None:
    hub, handle = await started(store)
    seq = 1
    for _ in range(HOLD_WINDOWS):  # held its whole hold, then written
        for _ in range(SLOW):
            handle.add(big_event(seq))
            seq += 1
        assert await hub.flush_window()
    written = await stored(store, "resp_1")
    assert 1 < len(written) < seq and written == list(range(len(written)))
    assert await entries(store, "resp_1") == 2  # the first event, then one entry
    assert [e.seq for e in handle.pending] == list(range(len(written), seq))  # the overflow
    assert handle.held == 1  # waits as if one window old
    await hub.aclose()
    assert await stored(store, "resp_1") == list(range(seq))


async def test_a_stream_never_held_sends_its_overflow_at_once(store: RedisStore) -> None:
    hub, handle = await started(store)
    for seq in range(1, MAX_EVENTS_PER_ENTRY):  # one window over half an entry: not held
        handle.add(big_event(seq))
    assert await hub.flush_window()
    assert handle.pending == [] and await entries(store, "resp_1") == 3
    await hub.aclose()


async def test_a_full_buffer_an_end_and_closing_hold_nothing(store: RedisStore) -> None:
    hub, handle = await started(store)
    handle.add(event(1))
    assert await hub.flush_now()  # what a full buffer or an end waiting on the flusher runs
    assert await stored(store, "resp_1") == [0, 1]
    handle.add(event(2))
    await hub.aclose()
    assert await stored(store, "resp_1") == [0, 1, 2]


async def test_a_stream_followed_from_another_instance_is_written_every_window(
        store: RedisStore) -> None:
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open("resp_1")
    held = hub.open("resp_2")  # nobody follows this one
    for h in (handle, held):
        h.add(event(0))
    assert await hub.flush_window()
    await store.mark_followed("resp_1")  # a follower on another instance joined
    seq = await windows(hub, handle, 1, 1, SLOW)
    assert not handle.followed and await stored(store, "resp_1") == [0]  # not known yet
    # the flush that writes the events it held tells the writer (once: the hold's length)
    seq = await windows(hub, handle, seq, HOLD_WINDOWS - 1, SLOW)
    assert handle.followed and not held.followed
    assert await stored(store, "resp_1") == list(range(seq))
    for _ in range(2):  # from then on every window, as before
        seq = await windows(hub, handle, seq, 1, SLOW)
        assert await stored(store, "resp_1") == list(range(seq))
    assert await entries(store, "resp_1") == 4
    await hub.aclose()


async def test_a_mark_on_an_unknown_response_writes_nothing(store: RedisStore) -> None:
    await store.mark_followed("resp_gone")
    assert await store.client.exists(keys.response("resp_gone")) == 0


async def test_held_events_are_written_by_a_later_window_without_new_events(
        store: RedisStore) -> None:
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=0.01)  # the flusher's own loop
    handle = hub.open("resp_1")
    handle.add(event(0))
    await until_stored(store, "resp_1", 1)
    handle.add(event(1))  # then the stream goes quiet (a tool runs, the model thinks)
    await until_stored(store, "resp_1", 2)
    assert await stored(store, "resp_1") == [0, 1]
    await hub.aclose()


class _CountedEvent(asyncio.Event):
    """An event whose waits are counted: each is one wake-up of the task waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    async def wait(self) -> bool:
        self.waits += 1
        return await super().wait()


async def test_new_streams_wake_the_flusher_once_per_first_window(store: RedisStore) -> None:
    # Only the first stream of a first window needs the flusher to look: it then naps for that
    # window and writes every stream waiting by then. A wake-up per new stream was one flusher
    # step per stored request.
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, first_window=10.0)
    nudge = hub._nudge = _CountedEvent()
    hub.open("resp_1").add(event(0))  # the flusher starts, naps for the first window
    for _ in range(5):
        await asyncio.sleep(0)
    before = nudge.waits
    for rid in ("resp_2", "resp_3"):
        hub.open(rid).add(event(0))
        for _ in range(5):  # the flusher may run between two new streams
            await asyncio.sleep(0)
    assert nudge.waits == before  # not woken: it writes them with the first
    assert await hub.flush_now()
    for rid in ("resp_1", "resp_2", "resp_3"):
        assert await stored(store, rid) == [0]
    await hub.aclose()


async def test_a_stream_after_one_that_ended_does_not_wake_a_flusher_napping_its_first_window(
        store: RedisStore) -> None:
    # A short answer ends within its first window (its final write carries its events): the
    # next stream finds no stream waiting, and the flusher, napping for that window already,
    # writes the new one at its end. It was woken once per such request, to nap again.
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, first_window=10.0)
    nudge = hub._nudge = _CountedEvent()
    before = None
    for rid in ("resp_0", "resp_1", "resp_2"):
        handle = hub.open(rid)
        handle.add(event(0))  # resp_0: the flusher starts, naps for the first window
        for _ in range(5):
            await asyncio.sleep(0)
        if before is None:
            before = nudge.waits
        if rid != "resp_2":  # ended, its events carried by its final write: none waits now
            handle.rows = []
            hub.release(handle)
    assert nudge.waits == before  # not woken
    assert await hub.flush_now()
    assert await stored(store, "resp_2") == [0]
    await hub.aclose()


async def test_the_flusher_sleeps_while_nothing_is_pending_and_the_next_event_wakes_it(
        store: RedisStore) -> None:
    # It runs a window at a time while events wait (no token wakes it), and stops when a flush
    # finds none: a long prefill, or a stream never finished, costs nothing meanwhile.
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=0.01, locally_followed=frozenset())
    handle = hub.open("resp_1", early=False)
    for seq in range(3):
        handle.add(event(seq))
    await until_stored(store, "resp_1", 3)
    for _ in range(200):  # bounded: a window or two after the flush that found none
        if not hub._wakeup.is_set():
            break
        await asyncio.sleep(0.01)
    assert not hub._wakeup.is_set() and handle.attend
    handle.record([{"sequence_number": 3}], [("response.output_text.delta", b"{}")])
    assert hub._wakeup.is_set() and not handle.attend  # woken; the next tokens append only
    await until_stored(store, "resp_1", 4)
    assert await stored(store, "resp_1") == [0, 1, 2, 3]
    await hub.aclose()


def test_a_window_of_no_time_is_refused(store: RedisStore) -> None:
    with pytest.raises(ValueError, match="window"):
        EventLogHub(store, ttl=60, event_ttl=60, window=0)
