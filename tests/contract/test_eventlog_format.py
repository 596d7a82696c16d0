"""The event log's stored format (proxy/store/keys.py, "the event log"; store/lua/packing.py):
runs of events share one stream entry whose id is the run's last `sequence_number`, and a log
is read back event by event from any number, the middle of an entry included. Entries an
earlier release wrote (one event each, fields `t` and `d`) read the same, alone or mixed with
new ones in one log, so a rolling upgrade replays both. Run on every backend (conftest.py)."""

from __future__ import annotations

import orjson
import pytest

from proxy.core import types as t
from proxy.store import keys
from proxy.store.base import StoredEvent
from proxy.store.lua.packing import MAX_ENTRY_BYTES, MAX_EVENTS_PER_ENTRY
from proxy.store.redis import RedisStore
from tests.contract.tagged import rid
from tests.contract.test_store_contract import EVENT_TTL, TENANT, TTL, create, event, response


async def written_by_an_earlier_release(store: RedisStore, an_id: str,
                                        events: list[StoredEvent]) -> None:
    """What the earlier release's flush script wrote: an entry per event, `1-<seq>` with fields
    t and d, and the hash's `logged` and `last`."""
    for e in events:
        await store.client.xadd(keys.response_log(an_id), {"t": e.type, "d": e.data},
                                id=keys.log_entry_id(e.seq))
    await store.client.hset(keys.response(an_id),
                            mapping={"logged": "1", "last": str(events[-1].seq)})


async def entries(store: RedisStore, an_id: str) -> int:
    return int(await store.client.xlen(keys.response_log(an_id)))


async def assert_reads_from_every_number(store: RedisStore, an_id: str,
                                         log: list[StoredEvent], *,
                                         tailed_to: int | None = None) -> None:
    """`starting_after` any number: a replay page, a page with a count, a live tail's read.
    `tailed_to`: the last position a tail is read from (a terminal event held by reference is
    on the entry of the event before it, keys.py: a follower never tails from that event's
    number, it read it from that same entry, or had both handed over by the writer here)."""
    assert await store.read_events(an_id) == log
    for k in range(-1, len(log)):
        assert await store.read_events(an_id, after=k) == log[k + 1:], k
        assert await store.read_events(an_id, after=k, limit=3) == log[k + 1:k + 4], k
        if tailed_to is not None and k > tailed_to:
            continue
        tailed = await store.tail({an_id: k}, block_ms=0)
        assert tailed.get(an_id, []) == log[k + 1:], k
    assert await store.log_extent(an_id) == (len(log), log[-1])


async def test_a_run_of_events_is_one_entry_read_back_from_any_number(store: RedisStore) -> None:
    await create(store, rid("1"))
    log = [event(n, note=f"token {n}") for n in range(40)]
    await store.append_events({rid("1"): log}, ttl=EVENT_TTL)
    # one XADD per run of at most MAX_EVENTS_PER_ENTRY events, not one per event
    assert await entries(store, rid("1")) == -(-40 // MAX_EVENTS_PER_ENTRY)
    await assert_reads_from_every_number(store, rid("1"), log)


async def test_each_flush_adds_one_entry_per_stream(store: RedisStore) -> None:
    for n in range(3):
        await create(store, rid(n), events=(event(0, "response.created"),))
    for first in (1, 6, 11):  # three flushes of five events of each of three streams
        await store.append_events({rid(n): [event(s) for s in range(first, first + 5)]
                                   for n in range(3)}, ttl=EVENT_TTL)
    for n in range(3):
        assert await entries(store, rid(n)) == 4  # the create's, then one per flush
        await assert_reads_from_every_number(
            store, rid(n), [event(0, "response.created"), *[event(s) for s in range(1, 16)]])


async def test_entries_are_bounded_in_bytes_and_a_bigger_event_stands_alone(
        store: RedisStore) -> None:
    await create(store, rid("1"))
    note = "x" * (MAX_ENTRY_BYTES // 4)  # four of them pass the bound with their JSON
    log = [event(n, note=note) for n in range(9)] + [event(9, note="y" * 3 * MAX_ENTRY_BYTES)]
    await store.append_events({rid("1"): log}, ttl=EVENT_TTL)
    got = await store.client.xrange(keys.response_log(rid("1")))
    sizes = [sum(map(len, fields.values())) for _id, fields in got]
    assert len(got) == 4 and max(sizes[:-1]) <= MAX_ENTRY_BYTES + 3 * 64  # + separators, types
    assert sizes[-1] > 3 * MAX_ENTRY_BYTES and got[-1][0] == b"1-9" and b"e" not in got[-1][1]
    await assert_reads_from_every_number(store, rid("1"), log)


async def test_an_earlier_release_log_replays_from_any_number(store: RedisStore) -> None:
    await create(store, rid("1"))
    log = [event(0, "response.created"), *[event(n) for n in range(1, 6)],
           event(6, "response.completed")]
    await written_by_an_earlier_release(store, rid("1"), log)
    await assert_reads_from_every_number(store, rid("1"), log)


async def test_a_log_begun_by_an_earlier_release_is_continued_and_ended_in_the_new_format(
        store: RedisStore) -> None:
    # A rolling upgrade: an instance of the earlier release streamed the start, one of this
    # release flushes the rest and ends it (the final write carrying its last events).
    await create(store, rid("1"))
    old = [event(0, "response.created"), *[event(n) for n in range(1, 5)]]
    await written_by_an_earlier_release(store, rid("1"), old)
    flushed = [event(n) for n in range(5, 10)]
    await store.append_events({rid("1"): flushed}, ttl=EVENT_TTL)
    carried, terminal = [event(10), event(11)], event(12, "response.completed")
    done = await store.finish_response(response(rid("1"), "completed"), terminal,
                                       tenant=TENANT, ttl=TTL, event_ttl=EVENT_TTL,
                                       events=carried)
    assert done.changed
    assert await entries(store, rid("1")) == len(old) + 2
    await assert_reads_from_every_number(store, rid("1"), [*old, *flushed, *carried, terminal])


async def test_a_retried_flush_that_partly_landed_adds_only_the_rest(store: RedisStore) -> None:
    await create(store, rid("1"))
    await store.append_events({rid("1"): [event(n) for n in range(4)]}, ttl=EVENT_TTL)
    # 2 and 3 are in the log already (a first attempt): only 4 and 5 are added, in one entry
    await store.append_events({rid("1"): [event(n, note="again") for n in range(2, 6)]},
                              ttl=EVENT_TTL)
    log = [event(n) for n in range(4)] + [event(4, note="again"), event(5, note="again")]
    assert await entries(store, rid("1")) == 2
    await assert_reads_from_every_number(store, rid("1"), log)


async def test_a_gap_between_runs_shows_in_the_extent(store: RedisStore) -> None:
    # A flush given up (its events lost): a replay must see the gap to rebuild instead.
    await create(store, rid("1"), events=(event(0), event(1), event(2)))
    await store.append_events({rid("1"): [event(5), event(6)]}, ttl=EVENT_TTL)
    count, last = await store.log_extent(rid("1"))
    assert last is not None and (count, last.seq) == (5, 6) and count != last.seq + 1


async def test_an_entry_is_its_last_event_as_the_earlier_release_wrote_it_and_the_run_before(
        store: RedisStore) -> None:
    # One event: the earlier release's entry exactly (its readers read it). A run: the same
    # for its last event, and field e, the events before it (`<type> 0 <JSON>` joined by 1),
    # as the release before wrote it (a run of deltas is kept compact in field c: below).
    await create(store, rid("1"))
    log = [event(0, "response.created"), event(1, note="a"), event(2, note="b")]
    await store.append_events({rid("1"): log[:1]}, ttl=EVENT_TTL)
    await store.append_events({rid("1"): log[1:]}, ttl=EVENT_TTL)
    (one_id, one), (run_id, run) = await store.client.xrange(keys.response_log(rid("1")))
    assert (one_id, one) == (b"1-0", {b"t": b"response.created", b"d": log[0].data})
    assert run_id == b"1-2"
    assert run == {b"t": log[2].type.encode(), b"d": log[2].data,
                   b"e": log[1].type.encode() + b"\x00" + log[1].data}
    assert orjson.loads(run[b"d"])["sequence_number"] == 2


def delta(seq: int, text: str = " tok") -> StoredEvent:
    """A text delta shaped as the assembler makes it: a run of them is stored compact."""
    return StoredEvent(seq, t.TEXT_DELTA, orjson.dumps(
        {"type": t.TEXT_DELTA, "sequence_number": seq, "item_id": "msg_" + "7f" * 24,
         "output_index": 0, "content_index": 0, "delta": text, "logprobs": []}))


async def finished_carrying(store: RedisStore, an_id: str, *, first: int,
                            deltas: int) -> tuple[list[StoredEvent], StoredEvent]:
    """A final write carrying `deltas` text deltas numbered from `first`, then the text's and
    its part's done events; its carried events and its terminal one."""
    end = first + deltas
    carried = [*[delta(n) for n in range(first, end)], event(end, "response.output_text.done"),
               event(end + 1, "response.content_part.done")]
    terminal = event(end + 2, "response.completed")
    done = await store.finish_response(response(an_id, "completed"), terminal, tenant=TENANT,
                                       ttl=TTL, event_ttl=EVENT_TTL, events=carried)
    assert done.changed
    return carried, terminal


async def test_a_run_of_deltas_is_kept_compact_and_read_back_from_any_number(
        store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0, "response.created"),))
    log = [event(0, "response.created"),
           *[delta(n, f" w\u00e9{n} \"%d\"") for n in range(1, 40)]]
    await store.append_events({rid("1"): log[1:10]}, ttl=EVENT_TTL)
    await store.append_events({rid("1"): log[10:]}, ttl=EVENT_TTL)  # one entry's bytes
    *_, (_run_id, run) = await store.client.xrange(keys.response_log(rid("1")))
    assert run[b"c"].count(b"\x05") == 29
    # Redis keeps ~30 bytes an earlier delta, not its ~190 bytes of JSON and its type
    assert len(run[b"c"]) * 5 < sum(len(e.data) for e in log[10:-1])
    await assert_reads_from_every_number(store, rid("1"), log)


async def test_a_final_write_keeps_its_deltas_compact_and_its_other_events_in_full(
        store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0, "response.created"),))
    carried, terminal = await finished_carrying(store, rid("1"), first=1, deltas=20)
    (_first_id, _first), (_run_id, run) = await store.client.xrange(keys.response_log(rid("1")))
    assert run[b"c"].count(b"\x05") == 20
    await assert_reads_from_every_number(store, rid("1"),
                                         [event(0, "response.created"), *carried, terminal])


async def test_a_retried_flush_of_deltas_that_partly_landed_adds_only_the_rest(
        store: RedisStore) -> None:
    await create(store, rid("1"))
    await store.append_events({rid("1"): [delta(n) for n in range(20)]}, ttl=EVENT_TTL)
    # 15 to 19 are in the log already (a first attempt): 20 to 34 are added, cut from the run
    # by their separators, its template kept
    again = [delta(n, " again") for n in range(15, 35)]
    await store.append_events({rid("1"): again}, ttl=EVENT_TTL)
    got = await store.client.xrange(keys.response_log(rid("1")))
    assert len(got) == 2 and got[1][1][b"c"].count(b"\x05") == 14
    await assert_reads_from_every_number(store, rid("1"),
                                         [*[delta(n) for n in range(20)], *again[5:]])


async def test_a_run_the_release_before_wrote_in_field_e_reads_back(store: RedisStore) -> None:
    # Its entries kept the events before the last in full in field e, counted in `extra`.
    await create(store, rid("1"))
    log = [event(0, "response.created"), *[delta(n) for n in range(1, 6)]]
    await store.client.xadd(keys.response_log(rid("1")), {
        "t": log[-1].type, "d": log[-1].data,
        "e": b"\x01".join(e.type.encode() + b"\x00" + e.data for e in log[:-1])}, id="1-5")
    await store.client.hset(keys.response(rid("1")),
                            mapping={"logged": "1", "last": "5", "extra": "5"})
    await store.append_events({rid("1"): [delta(n) for n in range(6, 10)]}, ttl=EVENT_TTL)
    await assert_reads_from_every_number(store, rid("1"),
                                         [*log, *[delta(n) for n in range(6, 10)]])


async def test_the_release_before_finds_a_compact_log_short_and_rebuilds_instead(
        store: RedisStore) -> None:
    # That release reads fields t, d and e, and counts XLEN + extra: the events in field c are
    # counted apart (`more`), so its count falls short and it rebuilds a finished response's
    # replay from its final object rather than sending one with the deltas missing.
    await create(store, rid("1"), events=(event(0, "response.created"),))
    await store.append_events({rid("1"): [delta(n) for n in range(1, 21)]}, ttl=EVENT_TTL)
    xlen = await entries(store, rid("1"))
    extra = await store.client.hget(keys.response(rid("1")), "extra")
    assert xlen + int(extra or 0) < 21
    assert (await store.log_extent(rid("1")))[0] == 21


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "full"])
async def test_either_format_writes_a_create_flushes_and_a_final_write_read_back_whole(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch, compact: bool) -> None:
    # A stored stream's three writes, each with a run of 16 or more deltas (a held window, the
    # final write's carried run) and other events among them: in field c (compact) or e
    # (`--event-log-format full`), read back byte for byte from any number either way.
    monkeypatch.setattr(store, "compact_log", compact)
    start = [event(0, "response.created"), event(1, "response.in_progress")]
    await create(store, rid("1"), events=start)
    held = [event(2, "response.output_item.added"), *[delta(n) for n in range(3, 40)]]
    await store.append_events({rid("1"): held[:20]}, ttl=EVENT_TTL)  # a first window
    await store.append_events({rid("1"): held[20:]}, ttl=EVENT_TTL)  # a held one: deltas
    carried, terminal = await finished_carrying(store, rid("1"), first=40, deltas=20)
    fields = {name for _id, entry in await store.client.xrange(keys.response_log(rid("1")))
              for name in entry}
    # (an entry whose run starts with another event, the item's, stays in full either way)
    assert b"e" in fields and (b"c" in fields) is compact
    await assert_reads_from_every_number(store, rid("1"), [*start, *held, *carried, terminal])


async def test_with_format_full_a_run_of_deltas_is_kept_as_earlier_releases_read_it(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # `--event-log-format full` (beside a release before 2963486): field e, counted in
    # `extra`, as before
    monkeypatch.setattr(store, "compact_log", False)
    await create(store, rid("1"), events=(event(0, "response.created"),))
    log = [event(0, "response.created"), *[delta(n) for n in range(1, 21)]]
    await store.append_events({rid("1"): log[1:]}, ttl=EVENT_TTL)
    *_, (_run_id, run) = await store.client.xrange(keys.response_log(rid("1")))
    assert b"c" not in run and run[b"e"].count(b"\x01") == 18
    assert await store.client.hget(keys.response(rid("1")), "extra") == b"19"
    await assert_reads_from_every_number(store, rid("1"), log)
