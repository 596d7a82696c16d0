"""`Leases` (services/eventlog/ownership.py) on the embedded store: a writer that stops renewing
has its response closed from its log by whoever notices (a sweep, a GET), once; a writer that finds
its own lease gone stops its turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from proxy.core.events.sse import frames
from proxy.core.ids import counter_ids
from proxy.services.eventlog.log import EventLog
from proxy.services.eventlog.ownership import LEASE_LOST, LOST, Leases
from proxy.settings import StreamSettings
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import open_store
from proxy.store.leases import LeaseState, LeaseTable
from proxy.store.redis import RedisStore
from tests.support.assembly import CREATED_AT, assemble, golden_bytes
from tests.support.conformance import check_stream

TENANT = "tenant"


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    store = open_store(None)
    yield store
    await store.aclose()


def leases(store: RedisStore, *, ttl: float = 0.05,
           interrupted: list[tuple[str, str]] | None = None) -> Leases:
    sink = interrupted if interrupted is not None else []
    return Leases(LeaseTable(store.client), EventLog(store, ttl=60, event_ttl=60), ttl=ttl,
                  owner="test", interrupt=lambda rid, why: sink.append((rid, why)),
                  ids=counter_ids(), clock=lambda: CREATED_AT)


async def half_written(store: RedisStore, *, background: bool = False,
                       lease_ms: int | None = None) -> tuple[str, list[dict[str, Any]]]:
    """A stored foreground stream whose writer logged part of a text answer, then vanished.
    `lease_ms`: its create took its lease, as the service's creates do."""
    live = assemble(golden_bytes("text"))
    prefix = live[: len(live) // 2]
    response = dict(prefix[1]["response"])
    response["background"] = background
    record = ResponseRecord(response, TENANT, logged=True)
    events = [StoredEvent(e["sequence_number"], e["type"], orjson.dumps(e)) for e in prefix]
    await store.create_response(record, [], events=events, ttl=60, event_ttl=60,
                                lease_ms=lease_ms)
    return str(response["id"]), prefix


async def ended(store: RedisStore, response_id: str) -> None:
    """The writer stores the response's end (as its turn does before the lease is dropped)."""
    await store.finish_response({"id": response_id, "object": "response",
                                 "status": "completed", "output": []}, None, tenant=TENANT, ttl=60,
                                event_ttl=60)


async def expired(table: LeaseTable, response_id: str) -> None:
    for _ in range(100):
        if await table.state(response_id) is LeaseState.EXPIRED:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the lease never expired")


async def test_sweep_closes_a_dead_writers_response_from_its_log(store: RedisStore) -> None:
    response_id, prefix = await half_written(store)
    writer, reaper = leases(store), leases(store)
    async with writer.held(response_id):
        await expired(LeaseTable(store.client), response_id)  # the writer never renews
        assert await reaper.sweep() == 1
    record = await store.get_response(TENANT, response_id)
    assert record is not None and record.status == "failed"
    assert record.response["error"]["message"] == LOST
    logged = [orjson.loads(e.data) for e in await store.read_events(response_id)]
    assert logged[: len(prefix)] == prefix
    check_stream(logged)  # items closed, numbering dense, one terminal event, last
    assert logged[-1]["type"] == "response.failed"
    assert await LeaseTable(store.client).state(response_id) is LeaseState.ABSENT
    assert await reaper.sweep() == 0


async def test_get_closes_an_expired_response_at_once(store: RedisStore) -> None:
    response_id, _ = await half_written(store)
    writer = leases(store)
    async with writer.held(response_id):
        await expired(LeaseTable(store.client), response_id)
        record = await store.get_response(TENANT, response_id)
        assert record is not None
        checked, state = await leases(store).check(record)
    assert state is LeaseState.EXPIRED
    assert checked.status == "failed"


async def test_a_held_lease_is_left_alone(store: RedisStore) -> None:
    response_id, _ = await half_written(store)
    async with leases(store, ttl=30).held(response_id):
        record = await store.get_response(TENANT, response_id)
        assert record is not None
        checked, state = await leases(store).check(record)
        assert state is LeaseState.HELD and checked.status == "in_progress"
        assert await leases(store).sweep() == 0


async def test_background_responses_are_the_job_queues_business(store: RedisStore) -> None:
    response_id, _ = await half_written(store, background=True)
    record = await store.get_response(TENANT, response_id)
    assert record is not None
    checked, state = await leases(store).check(record)
    assert state is LeaseState.ABSENT and checked.status == "in_progress"


async def test_a_writer_that_lost_its_lease_stops_its_turn(store: RedisStore) -> None:
    response_id, _ = await half_written(store)
    stopped: list[tuple[str, str]] = []
    writer = leases(store, interrupted=stopped)
    async with writer.held(response_id):
        await expired(LeaseTable(store.client), response_id)  # e.g. its loop stalled
        await writer.renew()
    assert stopped == [(response_id, LEASE_LOST)]


async def test_an_ended_turns_lease_is_dropped_at_the_next_renewal(store: RedisStore) -> None:
    response_id, _ = await half_written(store)
    writer = leases(store, ttl=30)
    async with writer.held(response_id):
        assert await LeaseTable(store.client).state(response_id) is LeaseState.HELD
        await ended(store, response_id)
    await writer.renew()
    assert await LeaseTable(store.client).state(response_id) is LeaseState.ABSENT


async def test_an_ended_turns_lease_whose_end_the_store_lost_is_left_to_the_sweep(
        store: RedisStore) -> None:
    """The writer saw its end acknowledged, but the store does not hold it (a Redis failover
    lost it: replication is asynchronous): its lease is not dropped, so the sweep closes the
    response instead of leaving it `in_progress` for good."""
    response_id, _ = await half_written(store)
    writer = leases(store)
    async with writer.held(response_id):  # end_stored() says yes; the store says in_progress
        pass
    await writer.renew()
    await expired(LeaseTable(store.client), response_id)
    assert await leases(store).sweep() == 1
    record = await store.get_response_any(response_id)
    assert record is not None and record.status == "failed"


async def test_a_late_flush_behind_the_reapers_end_is_not_replayed(store: RedisStore) -> None:
    """A writer presumed dead (stalled past its lease) may flush one more batch after its
    reaper closed the log: the store drops events after `closed` (APPEND_EVENTS), so a replay
    still ends at the one terminal event. (A guard of what leases rely on.)"""
    from proxy.services.eventlog.follow import Followers
    from proxy.services.responses.stored import StoredResponses
    from tests.support.sse import data_payloads

    response_id, _ = await half_written(store)
    async with leases(store).held(response_id):
        await expired(LeaseTable(store.client), response_id)
        assert await leases(store).sweep() == 1
    count, last = await store.log_extent(response_id)
    assert last is not None and last.type == "response.failed"
    late = {"type": "response.output_text.delta", "sequence_number": last.seq + 1}
    await store.append_events({response_id: [StoredEvent(last.seq + 1, late["type"],
                                                         orjson.dumps(late))]}, ttl=60)
    stored = StoredResponses(store, Followers(store), StreamSettings())
    body = await _read_all(await stored.replay(TENANT, response_id, None))
    events = data_payloads(body)
    assert events[-1]["type"] == "response.failed"
    assert len(events) == count


def replaying(store: RedisStore, lease_set: Leases) -> Any:
    from proxy.services.eventlog.follow import Followers
    from proxy.services.responses.stored import StoredResponses
    from proxy.settings import StreamSettings

    # A follower re-checks the response after 0.2 s without an event.
    return StoredResponses(store, Followers(store, block_ms=50), StreamSettings(follow_idle=0.2),
                           leases=lease_set)


async def _read_all(stream: Any) -> bytes:
    """A replay's event batches as the SSE response frames them."""
    return b"".join([frames(batch) async for batch in stream])


async def test_a_replay_waits_on_a_quiet_writer_that_holds_its_lease(store: RedisStore) -> None:
    from tests.support.sse import data_payloads

    response_id, prefix = await half_written(store)
    writer = leases(store, ttl=30)
    async with writer.held(response_id):
        stored = replaying(store, leases(store, ttl=30))
        reader = asyncio.create_task(_read_all(await stored.replay(TENANT, response_id, None)))
        await asyncio.sleep(0.8)  # several idle rounds: the writer is alive, only quiet
        assert not reader.done()
        # The writer ends it (here by hand: the end a live turn would store).
        record = await store.get_response(TENANT, response_id)
        assert record is not None
        done = {**record.response, "status": "completed"}
        seq = prefix[-1]["sequence_number"] + 1
        end = {"type": "response.completed", "sequence_number": seq, "response": done}
        await store.finish_response(done, StoredEvent(seq, end["type"], orjson.dumps(end)),
                                    tenant=TENANT, ttl=60, event_ttl=60)
        events = data_payloads(await asyncio.wait_for(reader, 5))
    assert events[-1]["type"] == "response.completed"


async def test_a_replay_closes_a_response_whose_lease_expired(store: RedisStore) -> None:
    from tests.support.sse import data_payloads

    response_id, _ = await half_written(store)
    async with leases(store).held(response_id):  # never renewed: the writer is dead
        stored = replaying(store, leases(store))
        record = await store.get_response(TENANT, response_id)
        assert record is not None and record.status == "in_progress"
        stream = stored.replay_record(record, -1)  # started before the lease ran out
        events = data_payloads(await asyncio.wait_for(_read_all(stream), 10))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["message"] == LOST


async def test_a_turn_whose_end_was_not_stored_leaves_its_lease_to_the_sweep(
        store: RedisStore) -> None:
    """The final write failed past its retries: the writer must not drop the lease (that would
    leave the response `in_progress` for its TTL); it expires and a sweep closes the response."""
    response_id, _ = await half_written(store)
    writer = leases(store)
    async with writer.held(response_id, end_stored=lambda: False):
        pass
    await writer.renew()  # a drop would happen here
    table = LeaseTable(store.client)
    await expired(table, response_id)
    assert await leases(store).sweep() == 1
    closed = await store.get_response(TENANT, response_id)
    assert closed is not None and closed.status == "failed"
    assert closed.response["error"]["message"] == LOST


# -- the lease taken by the create (`held(taken=True)`: no round trip of its own) --------------

async def test_a_lease_taken_by_the_create_is_renewed_then_dropped_after_the_end(
        store: RedisStore) -> None:
    writer = leases(store, ttl=30)
    response_id, _ = await half_written(store, lease_ms=writer.ttl_ms)
    table = LeaseTable(store.client)
    assert await table.state(response_id) is LeaseState.HELD
    calls: list[dict[str, Any]] = []
    real = writer._table.renew

    async def renew(**kwargs: Any) -> list[str]:
        calls.append(kwargs)
        return await real(**kwargs)

    writer._table.renew = renew  # type: ignore[method-assign]
    async with writer.held(response_id, taken=True):
        assert calls == []  # registered, not taken again
        await writer.renew()
        assert calls[-1]["held"] == [response_id]
        assert await table.state(response_id) is LeaseState.HELD
        await ended(store, response_id)
    await writer.renew()
    assert calls[-1]["dropped"] == [response_id]
    assert await table.state(response_id) is LeaseState.ABSENT


async def test_a_writer_dead_right_after_its_create_is_closed_by_the_sweep(
        store: RedisStore) -> None:
    """Killed between the create (which took the lease) and its first renewal: nobody renews
    the lease, and the sweep closes the response as it would any dead writer's."""
    response_id, _ = await half_written(store, lease_ms=50)
    await expired(LeaseTable(store.client), response_id)
    assert await leases(store).sweep() == 1
    closed = await store.get_response(TENANT, response_id)
    assert closed is not None and closed.status == "failed"
    assert closed.response["error"]["message"] == LOST
    assert await LeaseTable(store.client).state(response_id) is LeaseState.ABSENT


async def test_sweep_closes_a_writer_that_died_holding_its_start_with_that_start(
        store: RedisStore) -> None:
    """A foreground writer holds its stream's first events (services/eventlog/writer.py
    `open(early=False)`): one that died before writing any leaves an empty log. Its end is
    logged after the start readers made from the record meanwhile (stored.py `_head`), byte for
    byte, so the log is whole and numbered as they saw it."""
    live = assemble(golden_bytes("text"))
    record = ResponseRecord(dict(live[0]["response"]), TENANT, logged=True)
    await store.create_response(record, [], ttl=60, event_ttl=60, lease_ms=50)
    writer, reaper = leases(store), leases(store)
    async with writer.held(record.id):
        await expired(LeaseTable(store.client), record.id)
        assert await reaper.sweep() == 1
    logged = await store.read_events(record.id)
    assert [e.data for e in logged[:2]] == [orjson.dumps(e) for e in live[:2]]
    events = [orjson.loads(e.data) for e in logged]
    check_stream(events)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress",
                                           "response.failed"]
    count, last = await store.log_extent(record.id)
    assert last is not None and count == last.seq + 1 == 3  # whole: replayed as it is
