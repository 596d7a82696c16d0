"""The event log's references (proxy/store/keys.py, "the event log's references"): a streamed
response's first two events and its terminal event, byte-identical to the create-time object
and the final object the record keeps, are kept in the log as references to them and sent to
Redis once; every read splices them back byte for byte, from any number. Events that differ stay
inline. Both directions of a rolling upgrade: this release reads what 7423023 (the previous
release) wrote with its own scripts, and 7423023's reader, run as that release shipped it,
never yields a referenced event and finds the gap that makes it rebuild from the final object.
Run on every backend (conftest.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.exceptions import ResponseError

from proxy.core import types as t
from proxy.core.events.replay import events_from_response
from proxy.core.shardtags import tag_of
from proxy.services.eventlog.follow import Followers
from proxy.services.responses.stored import StoredResponses
from proxy.settings import StreamSettings
from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.lua.packing import packed
from proxy.store.redis import RedisStore
from tests.contract.tagged import rid
from tests.contract.test_eventlog_format import assert_reads_from_every_number, entries
from tests.contract.test_store_contract import EVENT_TTL, TENANT, TTL, event, message, response

PREVIOUS = "7423023"  # the release before the references: its reader and its scripts
ROOT = Path(__file__).resolve().parents[2]


def previous(path: str) -> str:
    return subprocess.run(["git", "show", f"{PREVIOUS}:{path}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def previous_module(path: str, name: str) -> types.ModuleType:
    """One of 7423023's modules, as it shipped (its imports are today's modules)."""
    module = types.ModuleType(name)
    exec(compile(previous(path), f"{PREVIOUS}:{path}", "exec"), module.__dict__)
    return module


def lifecycle(kind: str, seq: int, obj: dict[str, Any]) -> StoredEvent:
    """A lifecycle event as the assembler encodes it (proxy/core/events/assembler/response.py)."""
    return StoredEvent(seq, kind, orjson.dumps({"type": kind, "sequence_number": seq,
                                                "response": obj}))


def answer(an_id: str, tokens: int, status: str = "completed",
           started: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[StoredEvent]]:
    """A streamed answer's create-time object and its events, terminal last."""
    start = started or response(an_id)
    final = response(an_id, status, output=[message("msg_1", "done " * 40, "assistant")])
    log = [lifecycle(t.CREATED, 0, start), lifecycle(t.IN_PROGRESS, 1, start),
           *[event(n, note=f"token {n}") for n in range(2, 2 + tokens)]]
    return start, [*log, lifecycle(f"response.{status}", len(log), final)]


async def streamed(store: RedisStore, an_id: str, start: dict[str, Any]) -> None:
    """A streamed foreground create, as services/responses/create.py makes it."""
    await store.create_response(ResponseRecord(start, TENANT, logged=True),
                                [message(f"in_{an_id}", "hi")], ttl=TTL, event_ttl=EVENT_TTL)


async def finished(store: RedisStore, an_id: str, log: list[StoredEvent], *,
                   carried_from: int = 0) -> None:
    final = orjson.loads(log[-1].data)["response"]
    done = await store.finish_response(final, log[-1], tenant=TENANT, ttl=TTL,
                                       event_ttl=EVENT_TTL, events=log[carried_from:-1])
    assert done.changed


async def raw(store: RedisStore, an_id: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return list(await store.client.xrange(keys.response_log(an_id)))


def final_bytes(log: list[StoredEvent]) -> bytes:
    return orjson.dumps(orjson.loads(log[-1].data)["response"])


def stored_bytes(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> bytes:
    return b"".join(b"".join(fields.values()) for _id, fields in entries)


async def test_a_short_answer_keeps_its_objects_once_and_reads_back_byte_identical(
        store: RedisStore) -> None:
    start, log = answer(rid("1"), 5)
    await streamed(store, rid("1"), start)
    await finished(store, rid("1"), log)
    got = await raw(store, rid("1"))
    # created and in_progress refer to `first`, the terminal to `obj`: no object in the log
    assert got[0][1][keys.E_HEAD] == b"response.created\x01response.in_progress"
    assert got[-1][1][keys.E_FINAL] == b"response.completed"
    assert b'"response":' not in stored_bytes(got)
    record = await store.client.hmget(keys.response(rid("1")), keys.F_FIRST, keys.F_OBJECT,
                                      keys.F_HEAD)
    assert record == [orjson.dumps(start), final_bytes(log), b"2"]
    await assert_reads_from_every_number(store, rid("1"), log, tailed_to=len(log) - 3)


async def test_the_create_time_object_is_sent_once_and_the_final_write_sends_no_copy(
        store: RedisStore, script_args: list[list[Any]]) -> None:
    start, log = answer(rid("1"), 3)
    sent = script_args
    await streamed(store, rid("1"), start)
    await finished(store, rid("1"), log)
    first, final = orjson.dumps(start), final_bytes(log)
    blobs = [bytes(a) for args in sent for a in args if isinstance(a, bytes | memoryview)]
    assert sum(blob.count(first) for blob in blobs) == 1  # the create's record, only
    assert sum(blob.count(final) for blob in blobs) == 1  # the final write's object, only


async def test_a_head_flushed_before_the_end_stays_inline_and_no_first_is_kept(
        store: RedisStore) -> None:
    start, log = answer(rid("1"), 6)
    await streamed(store, rid("1"), start)
    await store.append_events({rid("1"): log[:4]}, ttl=EVENT_TTL)  # the first window's flush
    await finished(store, rid("1"), log, carried_from=4)
    got = await raw(store, rid("1"))
    assert all(keys.E_HEAD not in fields for _id, fields in got)
    assert got[-1][1][keys.E_FINAL] == b"response.completed"
    assert await store.client.hget(keys.response(rid("1")), keys.F_FIRST) is None
    await assert_reads_from_every_number(store, rid("1"), log, tailed_to=len(log) - 3)


async def test_a_head_whose_flush_landed_with_its_reply_lost_is_carried_inline(
        store: RedisStore) -> None:
    # A flush carried `response.created` alone and landed, but its reply was lost: the writer
    # keeps the event and the final write carries it again with the rest. The log has begun, so
    # the script writes no head: had the final write sent 0 and 1 as references, event 1 would
    # be in neither the log nor the head.
    start, log = answer(rid("1"), 4)
    await streamed(store, rid("1"), start)
    await store.append_events({rid("1"): log[:1]}, ttl=EVENT_TTL)  # landed; reply "lost"
    await finished(store, rid("1"), log)  # carries 0 again, and 1 onwards
    got = await raw(store, rid("1"))
    assert all(keys.E_HEAD not in fields for _id, fields in got)
    assert await store.read_events(rid("1")) == log
    await assert_reads_from_every_number(store, rid("1"), log, tailed_to=len(log) - 3)


async def test_events_that_differ_from_the_objects_stay_inline(store: RedisStore) -> None:
    # created and in_progress of another object than the create's (a background job's queued
    # one, a worker's in_progress), and no event beside the terminal to carry a reference
    start, log = answer(rid("1"), 2, started=response(rid("1"), "queued"))
    await streamed(store, rid("1"), response(rid("1")))
    await finished(store, rid("1"), log)
    got = await raw(store, rid("1"))
    assert all(keys.E_HEAD not in fields for _id, fields in got)
    await assert_reads_from_every_number(store, rid("1"), log, tailed_to=len(log) - 3)
    start, log = answer(rid("2"), 0)
    await streamed(store, rid("2"), start)
    await finished(store, rid("2"), log, carried_from=2)  # nothing carried but the terminal
    assert all(keys.E_FINAL not in fields for _id, fields in await raw(store, rid("2")))
    assert await store.read_events(rid("2")) == log[2:]


async def test_a_head_is_never_kept_for_a_record_rewritten_since_its_create(
        store: RedisStore) -> None:
    # No foreground path rewrites a streaming record; were one to, the head would refer to
    # another object than the one compared: the final write refuses it whole.
    start, log = answer(rid("1"), 3)
    await streamed(store, rid("1"), start)
    await store.client.hset(keys.response(rid("1")), keys.F_OBJECT, orjson.dumps(
        {**start, "metadata": {"rewritten": "yes"}}))
    with pytest.raises(ResponseError, match="create-time object was rewritten"):
        await finished(store, rid("1"), log)
    assert await store.read_events(rid("1")) == []
    assert (await store.get_response(TENANT, rid("1"))).status == "in_progress"  # type: ignore[union-attr]


async def test_an_end_whose_events_a_lost_flush_reply_already_stored_ends_inline(
        store: RedisStore) -> None:
    # The flush landed but its reply was lost: the final write carries the same events again;
    # the entry its reference would go on is already there, so the terminal is made inline.
    start, log = answer(rid("1"), 4)
    await streamed(store, rid("1"), start)
    await store.append_events({rid("1"): log[:-1]}, ttl=EVENT_TTL)
    await finished(store, rid("1"), log)
    got = await raw(store, rid("1"))
    assert got[-1][1] == {b"t": log[-1].type.encode(), b"d": log[-1].data}
    await assert_reads_from_every_number(store, rid("1"), log)


async def test_this_release_reads_what_the_previous_release_scripts_wrote(
        store: RedisStore) -> None:
    """7423023's own CREATE_RESPONSE / APPEND_EVENTS_MANY / FINISH_RESPONSE write the log (all
    inline); this release's reader replays it from any number."""
    old = previous_module("proxy/store/lua/scripts.py", "previous_scripts")
    start, log = answer(rid("1"), 6)
    client = store.client
    hash_key, log_key = keys.response(rid("1")), keys.response_log(rid("1"))
    tag = tag_of(rid("1"))
    location, leases = keys.stored_bytes(TENANT, tag), keys.leases(tag)
    await client.eval(old.CREATE_RESPONSE, 5, hash_key, keys.response_input(rid("1")), log_key,
                      leases, location, TTL, EVENT_TTL, "in_progress", TENANT,
                      orjson.dumps(start), b"[]", "1", "0", b"[]", "", "0", rid("1"), "i:x", "0")
    await client.eval(old.APPEND_EVENTS_MANY, 2 if store.sharded else 0,
                      *([hash_key, log_key] if store.sharded else []), EVENT_TTL,
                      hash_key.encode() + b"\x03" + packed(log[:3]))
    head = b'{"type":"%s","sequence_number":%d,"response":' % (log[-1].type.encode(),
                                                                log[-1].seq)
    await client.eval(old.FINISH_RESPONSE, 4, hash_key, keys.response_input(rid("1")), log_key,
                      location, "completed", b"", TTL, EVENT_TTL, "o:x", packed(log[3:]),
                      TENANT, len(log[-1].data) - len(head) - 1)
    got = await raw(store, rid("1"))
    assert all(keys.E_FINAL not in fields and keys.E_HEAD not in fields for _i, fields in got)
    assert await store.client.hget(hash_key, keys.F_OBJECT) == final_bytes(log)
    await assert_reads_from_every_number(store, rid("1"), log)


async def test_the_previous_release_reader_sees_a_gap_never_a_referenced_event(
        store: RedisStore) -> None:
    """7423023's decoding (its `events_of`, `entries_events`) and its extent rule (XLEN +
    extra, whole exactly when that is the last event's seq + 1) over logs this release
    wrote: every event it yields is byte-identical to the one the client was sent, and every
    log holding a reference reads as one with a gap (so it rebuilds a finished response from
    its final object, services/responses/stored.py)."""
    decoding = previous_module("proxy/store/lua/decoding.py", "previous_decoding")
    cases = {"both": (0, True), "final only": (4, False)}
    for name, (carried_from, headed) in cases.items():
        an_id = rid(name.replace(" ", "_"))
        start, log = answer(an_id, 6)
        await streamed(store, an_id, start)
        if carried_from:
            await store.append_events({an_id: log[:carried_from]}, ttl=EVENT_TTL)
        await finished(store, an_id, log, carried_from=carried_from)
        got = await raw(store, an_id)
        assert (keys.E_HEAD in got[0][1]) == headed, name
        sent = {event.seq: event for event in log}
        for after in range(-1, len(log)):
            seen = decoding.entries_events(got, after)
            assert all(sent[e.seq] == e for e in seen), (name, after)
            assert t.COMPLETED not in [e.type for e in seen]  # the terminal is a reference
        extra = await store.client.hget(keys.response(an_id), keys.F_EXTRA)
        count = await entries(store, an_id) + int(extra or 0)
        last = decoding.events_of(*got[-1])[-1]
        assert count != last.seq + 1, name  # a gap: rebuilt from the final object
        # this release counts it whole
        assert await store.log_extent(an_id) == (len(log), log[-1])


def previous_store(store: RedisStore) -> Any:
    """7423023's `RedisStore` (its redis.py with its decoding.py, packing.py and scripts.py:
    the modules of its own that changed since), on `store`'s client."""
    names = ("decoding", "packing", "scripts")
    current = {name: sys.modules[f"proxy.store.lua.{name}"] for name in names}
    try:
        for name in names:
            sys.modules[f"proxy.store.lua.{name}"] = previous_module(
                f"proxy/store/lua/{name}.py", f"previous_{name}")
        redis_module = previous_module("proxy/store/redis.py", "previous_redis")
    finally:
        sys.modules.update({f"proxy.store.lua.{name}": module
                            for name, module in current.items()})
    previous_store = redis_module.RedisStore(store.client, sharded=store.sharded)

    async def mark_followed(response_id: str) -> None:
        """7423023 had no such call: its followers never marked a log (today's follower code,
        which these tests run over that store, asks for it)."""

    previous_store.mark_followed = mark_followed
    return previous_store


@pytest.mark.parametrize("carried_from", [0, 4], ids=["both", "final only"])
async def test_the_previous_release_replays_a_finished_log_rebuilt_from_its_final_object(
        store: RedisStore, carried_from: int) -> None:
    """The replay service over 7423023's store: a log with references is a log with a gap, so
    its replay is the one rebuilt from the final object (core/events/replay.py), valid events
    from `response.created` to the terminal one, whatever `starting_after`."""
    old = previous_store(store)
    start, log = answer(rid("1"), 6)
    await streamed(store, rid("1"), start)
    if carried_from:
        await store.append_events({rid("1"): log[:carried_from]}, ttl=EVENT_TTL)
    await finished(store, rid("1"), log, carried_from=carried_from)
    record = await old.get_response(TENANT, rid("1"))
    replays = StoredResponses(old, Followers(old), StreamSettings())
    final = orjson.loads(log[-1].data)["response"]
    rebuilt = [orjson.dumps(event) for event in events_from_response(final)]
    for after in (-1, 0, 1, 2, len(log) - 1):
        sent = [data for batch in [b async for b in replays.replay_record(record, after)]
                for _kind, data in batch]
        assert sent == [e for e in rebuilt if orjson.loads(e)["sequence_number"] > after]
    await old.aclose()


async def test_a_previous_release_follower_gets_each_inline_event_and_the_terminal_rebuilt(
        store: RedisStore) -> None:
    """A live follower on a 7423023 instance of a response this release ends: the events it
    reads are the ones sent; the terminal, a reference it cannot read, comes after its idle
    wait, rebuilt from the final object, numbered to follow what it had."""
    old = previous_store(store)
    start, log = answer(rid("1"), 6)
    await streamed(store, rid("1"), start)
    await store.append_events({rid("1"): log[:4]}, ttl=EVENT_TTL)
    record = await old.get_response(TENANT, rid("1"))
    replays = StoredResponses(old, Followers(old, block_ms=20), StreamSettings(follow_idle=0.3))
    sent: list[bytes] = []

    async def follow() -> None:
        async for batch in replays.replay_record(record, -1):
            sent.extend(data for _kind, data in batch)

    following = asyncio.create_task(follow())
    for _ in range(100):  # bounded: until it has read what was flushed
        if len(sent) >= 4:
            break
        await asyncio.sleep(0.02)
    await finished(store, rid("1"), log, carried_from=4)
    await asyncio.wait_for(following, timeout=10)
    assert sent[:-1] == [e.data for e in log[:-1]]
    assert orjson.loads(sent[-1]) == orjson.loads(log[-1].data)
    await old.aclose()


async def test_a_follower_gets_a_held_start_from_the_record_at_once_then_the_rest(
        store: RedisStore) -> None:
    """A foreground writer holds its stream's first events (services/eventlog/writer.py
    `open(early=False)`): a follower meanwhile gets them made from the record at once (stored.py
    `_head`), byte for byte what the log holds once written, then the rest from the log."""
    start, log = answer(rid("1"), 6)
    await streamed(store, rid("1"), start)  # the create: nothing logged yet
    record = await store.get_response(TENANT, rid("1"))
    assert record is not None and await raw(store, rid("1")) == []
    replays = StoredResponses(store, Followers(store, block_ms=20),
                              StreamSettings(follow_idle=30.0))
    follows = {after: replays.replay_record(record, after) for after in (-1, 0)}
    firsts = {after: await asyncio.wait_for(anext(follow), timeout=5)
              for after, follow in follows.items()}  # bounded: a missing start would hang
    await finished(store, rid("1"), log)  # the whole answer, its start by reference
    assert any(keys.E_HEAD in fields for _id, fields in await raw(store, rid("1")))
    for after, follow in follows.items():
        sent = [data for batch in [firsts[after], *[b async for b in follow]]
                for _kind, data in batch]
        assert sent == [e.data for e in log][after + 1:]
        assert [data for _kind, data in firsts[after]] == [e.data for e in log[after + 1:2]]


async def test_a_short_answer_final_write_is_one_entry(store: RedisStore) -> None:
    # One stream node in Redis instead of one per 16 events (references.py, MAX_FINAL_EVENTS)
    start, log = answer(rid("1"), 20)
    await streamed(store, rid("1"), start)
    await finished(store, rid("1"), log)
    assert await entries(store, rid("1")) == 1
    await assert_reads_from_every_number(store, rid("1"), log, tailed_to=len(log) - 3)


async def test_a_response_cancelled_before_its_writer_ends_its_log_replays_with_that_end(
        store: RedisStore) -> None:
    # A background job's cancel moves the record to `cancelled` at once; the worker running it
    # writes the end it reaches (the call it interrupted, as incomplete) a moment later. A
    # replay in between is sent that end, not a log with no terminal event.
    start, log = answer(rid("1"), 4, "cancelled")
    await streamed(store, rid("1"), start)
    await store.append_events({rid("1"): log[:-1]}, ttl=EVENT_TTL)
    cancelled = {**start, "status": "cancelled"}
    assert (await store.transition(rid("1"), tenant=TENANT, allowed_from=frozenset(
        {"in_progress"}), to="cancelled", response=cancelled, ttl=TTL)).changed
    record = await store.get_response(TENANT, rid("1"))
    assert record is not None and record.status == "cancelled"
    replays = StoredResponses(store, Followers(store, block_ms=20),
                              StreamSettings(follow_idle=5.0))
    sent: list[bytes] = []

    async def replay() -> None:
        async for batch in replays.replay_record(record, -1):
            sent.extend(data for _kind, data in batch)

    replaying = asyncio.create_task(replay())
    for _ in range(250):  # bounded: until it has read what the log holds
        if len(sent) >= len(log) - 1 or replaying.done():
            break
        await asyncio.sleep(0.02)
    await finished(store, rid("1"), log, carried_from=len(log) - 1)  # the worker's end
    await asyncio.wait_for(replaying, timeout=10)
    assert sent == [e.data for e in log]


async def test_the_previous_release_reader_sees_a_compact_run_as_a_gap_never_a_broken_event(
        store: RedisStore) -> None:
    """A run of deltas kept compact (field c, packing.py `records`) is unknown to 7423023's
    reader: it yields only events byte-identical to the ones sent, and counts the log short
    (its extent rule, XLEN + extra), so it rebuilds the finished response from its final
    object; this release reads it whole."""
    decoding = previous_module("proxy/store/lua/decoding.py", "previous_decoding")
    start, log = answer(rid("1"), 2)
    tokens = [StoredEvent(n, t.TEXT_DELTA, orjson.dumps(
        {"type": t.TEXT_DELTA, "sequence_number": n, "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "delta": f" tok{n}", "logprobs": []})) for n in range(2, 42)]
    log = [*log[:2], *tokens, log[-1]._replace(seq=42, data=log[-1].data.replace(
        b'"sequence_number":4', b'"sequence_number":42'))]
    await streamed(store, rid("1"), start)
    await store.append_events({rid("1"): log[:2]}, ttl=EVENT_TTL)
    await store.append_events({rid("1"): log[2:22]}, ttl=EVENT_TTL)
    await finished(store, rid("1"), log, carried_from=22)
    got = await raw(store, rid("1"))
    assert sum(b"c" in fields for _id, fields in got) == 2  # the flush's run, the final's
    sent = {event.seq: event for event in log}
    for after in range(-1, len(log)):
        assert all(sent[e.seq] == e for e in decoding.entries_events(got, after)), after
    extra = await store.client.hget(keys.response(rid("1")), keys.F_EXTRA)
    last = decoding.events_of(*got[-1])[-1]
    assert await entries(store, rid("1")) + int(extra or 0) != last.seq + 1
    assert await store.log_extent(rid("1")) == (len(log), log[-1])
    await assert_reads_from_every_number(store, rid("1"), log, tailed_to=len(log) - 3)


async def test_a_follower_that_made_the_start_gets_an_end_logged_alone_renumbered_after_it(
        store: RedisStore) -> None:
    """An earlier release's lease sweep ends a response whose writer died holding its start by
    logging the end alone (numbered 0). A follower here that had made the start from the record
    (stored.py `_head`) is past that number: it gets the end rebuilt from the final object,
    numbered after what it was sent, never a stream with no end."""
    start, log = answer(rid("1"), 2, status="failed")
    await streamed(store, rid("1"), start)
    record = await store.get_response(TENANT, rid("1"))
    assert record is not None
    replays = StoredResponses(store, Followers(store, block_ms=20),
                              StreamSettings(follow_idle=0.3))
    follow = replays.replay_record(record, -1)
    first = await asyncio.wait_for(anext(follow), timeout=5)  # the start, made here
    final = orjson.loads(log[-1].data)["response"]
    alone = lifecycle("response.failed", 0, final)
    done = await store.finish_response(final, alone, tenant=TENANT, ttl=TTL, event_ttl=EVENT_TTL)
    assert done.changed
    rest = [b async for b in follow]  # bounded: the follow re-reads after its idle 0.3 s
    sent = [orjson.loads(data) for batch in [first, *rest] for _kind, data in batch]
    assert [(e["type"], e["sequence_number"]) for e in sent] == [
        ("response.created", 0), ("response.in_progress", 1), ("response.failed", 2)]
    assert sent[-1]["response"] == final
