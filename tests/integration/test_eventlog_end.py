"""A stream's end carries its own pending events (services/eventlog/writer.py, `LogHandle.finish`):
the session's real redis-server; the in-process app and the simulator where a whole turn is needed.

A short stored stream's events and its end are one store call; an end never overtakes a flush
already carrying earlier events of its stream; a backlog goes through the flusher first; a final
write retried after a lost reply duplicates nothing; a refused final write still logs the events
as a flush would have; followers here and on another instance see every event once, in order."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
import pytest

from proxy.core.errors import StoreUnavailable
from proxy.services.eventlog import durable
from proxy.services.eventlog import writer as eventlog
from proxy.services.eventlog.writer import EventLogHub
from proxy.settings import Settings
from proxy.store import keys
from proxy.store.base import EventRow, ResponseRecord, StoredEvent
from proxy.store.connection.factory import open_store
from proxy.store.redis import RedisStore
from tests.support.inprocess import app_for, until
from tests.support.servers import ServerProcess

ACTIVE = frozenset({"queued", "in_progress"})


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durable, "RETRY_DELAYS", (0.01, 0.01, 0.01, 0.01, 0.01))


def event(seq: int, kind: str = "response.output_text.delta") -> StoredEvent:
    return StoredEvent(seq, kind, b'{"sequence_number":%d}' % seq)


def sse_events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: ")]


def redis_url(server: ServerProcess) -> str:
    return f"redis://127.0.0.1:{server.port}/0"


class Calls:
    """The store's `append_events` and `finish_response`, recorded in the order they start and
    end: which events of which response each carried. `hold` keeps every flush from reaching
    the store until it is set (a flush in flight for as long as a test wants)."""

    def __init__(self, store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, str, list[int]]] = []
        self.hold = asyncio.Event()
        self.hold.set()
        append: Callable[..., Awaitable[None]] = store.append_events
        finish: Callable[..., Awaitable[Any]] = store.finish_response

        async def appended(batches: Mapping[str, Sequence[EventRow]], **kw: Any) -> None:
            for rid, events in batches.items():  # (the writer's plain tuples: seq first)
                self.log.append(("append", rid, [e[0] for e in events]))
            await self.hold.wait()
            await append(batches, **kw)
            for rid in batches:
                self.log.append(("appended", rid, []))

        async def finished(final: Any, terminal: StoredEvent | None, **kw: Any) -> Any:
            seqs = [e[0] for e in kw.get("events", ())]
            if terminal is not None:
                seqs.append(terminal.seq)
            self.log.append(("finish", str(final["id"]), seqs))
            return await finish(final, terminal, **kw)

        monkeypatch.setattr(store, "append_events", appended)
        monkeypatch.setattr(store, "finish_response", finished)

    def of(self, rid: str) -> list[tuple[str, list[int]]]:
        return [(kind, seqs) for kind, r, seqs in self.log if r == rid]


@pytest.fixture
async def store(redis_server: ServerProcess) -> AsyncIterator[RedisStore]:
    store = open_store(redis_url(redis_server))
    yield store
    await store.aclose()


async def open_response(store: RedisStore) -> str:
    """A fresh in-progress response (unique id: the session's server is shared)."""
    rid = f"resp_{uuid.uuid4().hex}"
    record = ResponseRecord({"id": rid, "status": "in_progress"}, "tenant", logged=True)
    await store.create_response(record, [], ttl=60, event_ttl=60)
    return rid


def final(rid: str, status: str = "completed") -> dict[str, Any]:
    return {"id": rid, "object": "response", "status": status, "output": []}


# -- the hub on its own ---------------------------------------------------------------------


async def test_the_events_of_an_ends_batch_go_with_it_without_waking_the_flusher(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # A short answer's last batch (its deltas, then the terminal event) is the final write's
    # to carry: its events are handed to the followers here at once, in order, before the
    # terminal, and the flusher is not woken (nor asked for a first window) for them.
    rid = await open_response(store)
    calls = Calls(store, monkeypatch)
    seen: list[int] = []
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, first_window=10.0,
                      local=lambda _rid, e: seen.append(e.seq),
                      local_all=lambda _rid, events: seen.extend(e.seq for e in events))
    handle = hub.open(rid)
    handle.record([{"sequence_number": 0}, {"sequence_number": 1}],
                  [("response.created", b"{}"), ("response.in_progress", b"{}")])
    assert await hub.flush_now()  # the start events written, the stream started
    hub._wakeup.clear()
    batch = [{"sequence_number": seq} for seq in (2, 3, 4)]
    encoded = [("response.output_text.delta", b'{"sequence_number":%d}' % seq)
               for seq in (2, 3, 4)]
    done = await handle.finish(final(rid), event(5, "response.completed"), tenant="tenant",
                               events=batch, encoded=encoded)
    assert done.changed and not hub._wakeup.is_set() and not hub._fresh
    assert seen == [0, 1, 2, 3, 4, 5]
    assert calls.of(rid)[-1] == ("finish", [2, 3, 4, 5])
    assert [e.seq for e in await store.read_events(rid)] == [0, 1, 2, 3, 4, 5]
    await hub.aclose()


async def test_an_end_with_no_flush_in_flight_carries_its_events(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rid = await open_response(store)
    calls = Calls(store, monkeypatch)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)  # no timed flush
    handle = hub.open(rid)
    for seq in range(5):
        handle.add(event(seq))
    done = await handle.finish(final(rid), event(5, "response.completed"), tenant="tenant")
    assert done.changed
    assert calls.of(rid) == [("finish", [0, 1, 2, 3, 4, 5])]
    assert [e.seq for e in await store.read_events(rid)] == [0, 1, 2, 3, 4, 5]
    await hub.aclose()


async def test_an_end_waits_for_the_flush_carrying_its_earlier_events(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush holding events 0-2 is in flight (held) when the stream ends with 3-5 pending:
    the final write goes only once that flush has landed, and carries 3-5 itself."""
    rid = await open_response(store)
    calls = Calls(store, monkeypatch)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open(rid)
    for seq in range(3):
        handle.add(event(seq))
    calls.hold.clear()
    flush = asyncio.create_task(hub.flush_now())
    await until(lambda: asyncio.sleep(0, result=bool(calls.of(rid))), interval=0.01)
    for seq in range(3, 6):
        handle.add(event(seq))
    ending = asyncio.create_task(handle.finish(final(rid), event(6, "response.completed"),
                                               tenant="tenant"))
    for _ in range(20):  # the end gets every chance to overtake the held flush
        await asyncio.sleep(0.005)
    assert calls.of(rid) == [("append", [0, 1, 2])]
    assert not ending.done()
    calls.hold.set()
    assert (await asyncio.wait_for(ending, 10)).changed
    assert await flush
    assert calls.of(rid) == [("append", [0, 1, 2]), ("appended", []),
                             ("finish", [3, 4, 5, 6])]
    assert [e.seq for e in await store.read_events(rid)] == list(range(7))
    await hub.aclose()


async def test_an_end_after_a_failed_flush_carries_the_events_it_kept(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rid = await open_response(store)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    real = store.append_events
    failing = [True]

    async def flaky(*args: Any, **kwargs: Any) -> None:
        if failing.pop() if failing else False:
            raise StoreUnavailable("injected")
        await real(*args, **kwargs)

    monkeypatch.setattr(store, "append_events", flaky)
    handle = hub.open(rid)
    for seq in range(3):
        handle.add(event(seq))
    assert not await hub.flush_now()  # kept in `pending`, in order
    calls = Calls(store, monkeypatch)
    handle.add(event(3))
    assert (await handle.finish(final(rid), event(4, "response.completed"),
                                tenant="tenant")).changed
    assert calls.of(rid) == [("finish", [0, 1, 2, 3, 4])]
    assert [e.seq for e in await store.read_events(rid)] == [0, 1, 2, 3, 4]
    await hub.aclose()


async def test_a_backlog_too_big_for_one_call_is_flushed_before_the_end(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rid = await open_response(store)
    calls = Calls(store, monkeypatch)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0, max_pending=100_000)
    handle = hub.open(rid)
    count = eventlog.MAX_CARRIED + 10
    for seq in range(count):
        handle.add(event(seq))
    assert (await handle.finish(final(rid), event(count, "response.completed"),
                                tenant="tenant")).changed
    assert calls.of(rid) == [("append", list(range(count))), ("appended", []),
                             ("finish", [count])]
    assert [e.seq for e in await store.read_events(rid)] == list(range(count + 1))
    await hub.aclose()


async def test_a_retried_end_whose_first_attempt_landed_adds_nothing_twice(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rid = await open_response(store)
    calls = Calls(store, monkeypatch)
    landed = store.finish_response
    lost = [True]

    async def reply_lost(*args: Any, **kwargs: Any) -> Any:
        result = await landed(*args, **kwargs)
        if lost.pop() if lost else False:
            raise StoreUnavailable("injected: applied, reply lost")
        return result

    monkeypatch.setattr(store, "finish_response", reply_lost)
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open(rid)
    for seq in range(4):
        handle.add(event(seq))
    done = await handle.finish(final(rid), event(4, "response.completed"), tenant="tenant")
    assert done.changed  # reconciled: our own write
    assert calls.of(rid) == [("finish", [0, 1, 2, 3, 4])] * 2
    assert [e.seq for e in await store.read_events(rid)] == [0, 1, 2, 3, 4]
    await hub.aclose()


async def test_a_refused_end_still_logs_its_events_as_a_flush_would(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A late completion after a cancel (the status flipped, the log still open) is refused;
    before ends carried their events, a flush had logged them: so it still does."""
    rid = await open_response(store)
    assert (await store.transition(rid, tenant="tenant", allowed_from=ACTIVE, to="cancelled",
                                   ttl=60)).changed
    hub = EventLogHub(store, ttl=60, event_ttl=60, window=30.0)
    handle = hub.open(rid)
    for seq in range(3):
        handle.add(event(seq))
    done = await handle.finish(final(rid), event(3, "response.completed"), tenant="tenant")
    assert not done.changed
    assert [e.seq for e in await store.read_events(rid)] == [0, 1, 2]
    await hub.aclose()


# -- whole turns ----------------------------------------------------------------------------


@pytest.fixture
def shared(simulator: ServerProcess, redis_server: ServerProcess) -> Settings:
    return Settings.of(upstreams=(simulator.url,), redis_url=redis_url(redis_server))


async def test_a_short_stored_stream_ends_in_one_store_call_and_replays_equal(
        shared: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(shared) as (client, runtime):
        # no timed flush: only the end writes the stream's events
        runtime.events.writer.window = 30.0
        runtime.events.writer.first_window = None
        calls = Calls(runtime.store, monkeypatch)
        live = await client.post("/v1/responses", json={
            "model": "sim-model", "input": "hi [[sim tokens=8]]", "stream": True})
        sent = sse_events(live.content)
        rid = sent[0]["response"]["id"]
        assert sent[-1]["type"] == "response.completed"
        # the events after the create's own, and the end: one call
        ((kind, seqs),) = calls.of(rid)
        assert kind == "finish" and seqs[-1] == sent[-1]["sequence_number"]
        assert seqs == [e["sequence_number"] for e in sent][-len(seqs):]
        replay = await client.get(f"/v1/responses/{rid}", params={"stream": "true"})
        assert sse_events(replay.content) == sent


async def test_a_stream_whose_end_reply_was_lost_replays_each_event_once(
        shared: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(shared) as (client, runtime):
        store = runtime.store
        landed = store.finish_response
        lost = [True]

        async def reply_lost(*args: Any, **kwargs: Any) -> Any:
            result = await landed(*args, **kwargs)
            if lost.pop() if lost else False:
                raise StoreUnavailable("injected: applied, reply lost")
            return result

        monkeypatch.setattr(store, "finish_response", reply_lost)
        live = await client.post("/v1/responses", json={
            "model": "sim-model", "input": "hi [[sim tokens=12]]", "stream": True})
        sent = sse_events(live.content)
        rid = sent[0]["response"]["id"]
        assert not lost
        assert [e.seq for e in await store.read_events(rid)] == \
            [e["sequence_number"] for e in sent]
        replay = await client.get(f"/v1/responses/{rid}", params={"stream": "true"})
        assert sse_events(replay.content) == sent


async def streaming(http: Any, writer: Any, monkeypatch: pytest.MonkeyPatch,
                    prompt: str) -> tuple[asyncio.Task[Any], str]:
    """A stored stream of `prompt` started on `http` (whose runtime is `writer`), and its
    response id once its create has landed."""
    created: list[str] = []
    real_create = writer.store.create_response

    async def create(record: Any, *args: Any, **kwargs: Any) -> None:
        await real_create(record, *args, **kwargs)
        created.append(record.id)

    monkeypatch.setattr(writer.store, "create_response", create)
    live = asyncio.create_task(http.post("/v1/responses", json={
        "model": "sim-model", "input": prompt, "stream": True}, timeout=60))
    await until(lambda: asyncio.sleep(0, result=bool(created)), interval=0.01)
    return live, created[0]


async def test_followers_here_and_on_another_instance_get_every_event_once(
        shared: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_for(shared) as (here, writer), app_for(shared) as (there, _):
        live, rid = await streaming(here, writer, monkeypatch, "hi [[sim tokens=30 delay_ms=20]]")
        follows = [asyncio.create_task(http.get(f"/v1/responses/{rid}",
                                                params={"stream": "true"}, timeout=60))
                   for http in (here, there)]
        sent = sse_events((await live).content)
        assert sent[-1]["type"] == "response.completed"
        for follow in follows:
            got = sse_events((await follow).content)
            assert got == sent


async def test_a_held_start_is_made_from_the_record_for_followers_byte_for_byte(
        shared: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A foreground stream's writer holds its first events (writer.py `open(early=False)`):
    nothing is written before the end here (no timed flush), yet followers elsewhere and here,
    from the start and after event 0, get the stream as its client did, the start made from
    the record (stored.py `_head`); the end writes that start by reference to the record's
    object (a short answer's log holds it once)."""
    async with app_for(shared) as (here, writer), app_for(shared) as (there, _):
        writer.events.writer.window = 30.0  # no timed flush: the start stays held
        live, rid = await streaming(here, writer, monkeypatch, "hi [[sim tokens=6 ttft_ms=1500]]")
        log_key = keys.response_log(rid)
        assert await writer.store.client.xlen(log_key) == 0  # the start is held
        follows = [asyncio.create_task(http.get(f"/v1/responses/{rid}", params=params,
                                                timeout=60))
                   for http in (here, there)
                   for params in ({"stream": "true"}, {"stream": "true", "starting_after": "0"})]
        sent = (await live).content
        events = sse_events(sent)
        assert events[-1]["type"] == "response.completed"
        lines = [line for line in sent.splitlines() if line.startswith(b"data: ")]
        for index, follow in enumerate(follows):
            got = [line for line in (await follow).content.splitlines()
                   if line.startswith(b"data: ")]
            assert got == lines[index % 2:], index  # the same bytes, from 0 or after it
        entries = await writer.store.client.xrange(log_key)
        assert any(keys.E_HEAD in fields for _id, fields in entries)  # by reference


async def rewritten_by_releases(store: RedisStore, rid: str, old: int) -> None:
    """The log of a finished response as a rolling upgrade leaves it: its first `old` events in
    the earlier release's format (an entry per event, fields t and d), the rest as this one
    writes them (runs of events per entry, through its own flush script)."""
    log = await store.read_events(rid)
    log_key, hash_key = keys.response_log(rid), keys.response(rid)
    await store.client.delete(log_key)
    await store.client.hdel(hash_key, keys.F_EXTRA, keys.F_HEAD, "last")
    for e in log[:old]:
        await store.client.xadd(log_key, {"t": e.type, "d": e.data}, id=keys.log_entry_id(e.seq))
    if old < len(log):
        await store.client.hset(hash_key, keys.F_CLOSED, "0")  # the flush skips closed logs
        await store.append_events({rid: log[old:]}, ttl=60)
        await store.client.hset(hash_key, keys.F_CLOSED, "1")
    assert await store.read_events(rid) == log
    # An earlier release's entries hold one event each, this one's runs of them (cut at 4 KiB).
    entries = await store.client.xlen(log_key)
    assert entries == old if old == len(log) else old < entries <= old + 2


@pytest.mark.parametrize("old", ["all", "half"])
async def test_a_log_written_across_a_rolling_upgrade_replays_from_any_number(
        shared: Settings, old: str) -> None:
    async with app_for(shared) as (client, runtime):
        live = await client.post("/v1/responses", json={
            "model": "sim-model", "input": "hi [[sim tokens=8]]", "stream": True})
        sent = sse_events(live.content)
        rid = sent[0]["response"]["id"]
        await rewritten_by_releases(runtime.store, rid, len(sent) if old == "all"
                                    else len(sent) // 2)
        for k in range(-1, len(sent)):
            params = {"stream": "true"} | ({"starting_after": str(k)} if k >= 0 else {})
            replay = await client.get(f"/v1/responses/{rid}", params=params)
            assert sse_events(replay.content) == sent[k + 1:], k
