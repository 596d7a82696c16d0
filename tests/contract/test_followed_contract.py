"""`Store.mark_followed` and what `append_events` reports of it, on every backend: a response
whose log someone on another instance follows live is named by the writer's next flush that
carries its events (its writer then stops holding them back: services/eventlog/writer.py); an
unknown response is not made by the mark; a flush of several calls (a cluster's tags, the
per-call bound) reports from each."""

from __future__ import annotations

from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.lua.packing import MAX_EVENTS_PER_CALL
from proxy.store.redis import RedisStore
from tests.contract.tagged import rid


def event(seq: int) -> StoredEvent:
    return StoredEvent(seq, "response.output_text.delta", b'{"sequence_number":%d}' % seq)


async def created(store: RedisStore, response_id: str) -> str:
    record = ResponseRecord({"id": response_id, "status": "in_progress"}, "tenant", logged=True)
    await store.create_response(record, [], ttl=60, event_ttl=60)
    return response_id


async def test_a_flush_names_the_followed_streams_among_those_it_writes(
        store: RedisStore) -> None:
    ids = [await created(store, rid(n)) for n in range(6)]
    assert await store.append_events({i: [event(0)] for i in ids}, ttl=60) == ()
    await store.mark_followed(ids[1])
    await store.mark_followed(ids[4])
    # big enough for several calls (each with its own reply), whatever the topology
    batch = {i: [event(s) for s in range(1, MAX_EVENTS_PER_CALL // 2)] for i in ids}
    assert set(await store.append_events(batch, ttl=60)) == {ids[1], ids[4]}
    # only the streams the flush writes
    assert await store.append_events({ids[0]: [event(200)]}, ttl=60) == ()
    assert set(await store.append_events({ids[4]: [event(200)]}, ttl=60)) == {ids[4]}
    assert [e.seq for e in await store.read_events(ids[4])] == [*range(0, 128), 200]


async def test_a_mark_writes_nothing_for_an_unknown_response(store: RedisStore) -> None:
    await store.mark_followed(rid("gone"))
    assert await store.client.exists(keys.response(rid("gone"))) == 0
