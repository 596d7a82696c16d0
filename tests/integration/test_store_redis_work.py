"""Redis's own work for one stored streamed answer, its create and its final write: the commands
their scripts run inside Redis (INFO commandstats, which counts each `redis.call`). Pinned,
because a script's commands are most of what Redis spends per request (each `redis.call` costs
~2-4 µs of the server's CPU beside the command itself: 204 µs per stored short answer at 32
clients, of which ~66 in the commands), and a command added to the hot scripts should show here.
A count, not a time."""

from __future__ import annotations

import cProfile
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from redis.asyncio import Redis

from proxy.services.eventlog.writer import EventLogHub
from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import open_store
from proxy.store.redis import RedisStore
from tests.support.servers import ServerProcess

TENANT = "tenant-w"
# Measured on the tree that set them (a create with one input item and the writer's lease, a
# final write carrying three events, its terminal one and one output item): 11 and 15. Before
# the scripts took the record's size from what they wrote, read the clock once and moved a
# record's bytes within one ledger bucket by one HINCRBY, and the final write read its record's
# fields at once: 15 and 20. (A final write after a flush also skips reading the log's end: the
# flush left it in the record.)
# Then a ledger count in a bucket already holding bytes stopped reading the ledger's TTL (a
# create in its key's current bucket 11 -> 10, the final write in its create's 15 -> 14), and
# the final write whose log refers to the create-time object (store/keys.py, "the event log's
# references") reads it with the record's other fields and writes its carried events as one
# entry: 14, as the other.
MAX_COMMANDS = {"create": 10, "finish": 14, "finish, referring": 14}


@pytest.fixture
async def store(redis_server: ServerProcess) -> AsyncIterator[RedisStore]:
    store = open_store(f"redis://127.0.0.1:{redis_server.port}/0")
    try:
        yield store
    finally:
        await store.aclose()


async def commands_run(client: Redis) -> int:
    stats = await client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items()
               if k not in ("cmdstat_evalsha", "cmdstat_config|resetstat", "cmdstat_info"))


def delta(seq: int) -> StoredEvent:
    """A text delta the size the proxy makes (~188 bytes: the item's id is 52 characters)."""
    kind = "response.output_text.delta"
    return StoredEvent(seq, kind, orjson.dumps({
        "type": kind, "sequence_number": seq, "item_id": "msg_" + "0" * 48, "output_index": 0,
        "content_index": 0, "delta": " there", "logprobs": []}))


async def test_a_stored_answer_runs_few_commands_inside_redis(store: RedisStore) -> None:
    rid = "resp_work1"
    response = {"id": rid, "object": "response", "status": "in_progress", "output": []}
    item = {"id": "msg_in1", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hi"}]}
    record = ResponseRecord(response, TENANT, logged=True)
    # Warm: the scripts loaded (a NOSCRIPT and its load are not the request's work).
    await store.create_response(ResponseRecord({**response, "id": "resp_warm"}, TENANT), [item],
                                ttl=3600, event_ttl=600, lease_ms=10_000)
    await store.finish_response({**response, "id": "resp_warm", "status": "completed"}, None,
                                tenant=TENANT, ttl=3600, event_ttl=600)
    client = store.client
    counted = {}
    await client.config_resetstat()
    await store.create_response(record, [item], ttl=3600, event_ttl=600, lease_ms=10_000)
    counted["create"] = await commands_run(client)
    await client.config_resetstat()
    final = {**response, "status": "completed",
             "output": [{"id": "msg_out1", "type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "x"}]}]}
    terminal = StoredEvent(4, "response.completed", orjson.dumps(
        {"type": "response.completed", "sequence_number": 4, "response": final}))
    done = await store.finish_response(final, terminal, tenant=TENANT, ttl=3600, event_ttl=600,
                                       events=[delta(1), delta(2), delta(3)])
    counted["finish"] = await commands_run(client)
    assert done.changed
    # A short streamed answer's whole log in its final write: created and in_progress of the
    # create-time object, its deltas, its terminal event.
    started = {**response, "id": "resp_work2"}
    await store.create_response(ResponseRecord(started, TENANT, logged=True), [item], ttl=3600,
                                event_ttl=600, lease_ms=10_000)
    head = [StoredEvent(seq, kind, orjson.dumps({"type": kind, "sequence_number": seq,
                                                 "response": started}))
            for seq, kind in ((0, "response.created"), (1, "response.in_progress"))]
    ended = {**final, "id": "resp_work2"}
    await client.config_resetstat()
    referring = await store.finish_response(
        ended, StoredEvent(5, "response.completed", orjson.dumps(
            {"type": "response.completed", "sequence_number": 5, "response": ended})),
        tenant=TENANT, ttl=3600, event_ttl=600, events=[*head, delta(2), delta(3), delta(4)])
    counted["finish, referring"] = await commands_run(client)
    assert referring.changed
    ((_id, fields),) = await client.xrange(keys.response_log("resp_work2"))
    assert keys.E_HEAD in fields and keys.E_FINAL in fields
    assert all(counted[k] <= MAX_COMMANDS[k] for k in MAX_COMMANDS), counted
    # What they wrote is still counted right: the ledger holds the record's bytes.
    stored = await store.get_response(TENANT, rid)
    assert stored is not None and stored.response == final


# Commands run inside Redis per 1,000 stored tokens by the window flushes of 32 streams that
# nobody on another instance follows, at 20 ms per token (five tokens per 100 ms window), the
# flush calls (EVALSHA) and the Python calls of the adds and flushes per token, the last
# flush (what the final windows still held) counted. Each token goes in as the turn hands it on
# (services/generation/run.py: `LogHandle.record` with the batch's event and its encoding) to a
# hub built as the event log builds it (a live view of the responses followed here, nobody).
# Measured on the tree that set them: 107, 5.0 and 4.5: per token `record` and its `len` (a
# builtin, which cProfile counts as a call: the buffer's bound, read where a countdown took ten
# opcodes; the writer's instructions a stored token, `python -m bench.eventwriter` under
# callgrind, fell from 9.9k to ~6k with it), the rest the flushes' calls an entry. Before
# that, 107, 5.0 and 4.0 (`--event-log-format compact`, the
# default: ~25 calls of C an entry cut and check its run; with `full`, 3.4). Before that, in
# full: 107, 5.0 and 3.4 (the writer holds a token as a plain tuple: no `tuple.__new__` call a
# token). Before the plain tuples, 107, 5.0 and 4.7 (per token `record`, the event's
# `tuple.__new__` and one append; the events of the write in flight kept by it, not every event
# appended to a second list that each flush trimmed; 9.5 before, counted the same way through
# `Recorder.add` and `LogHandle.add`, and 7.6 as this test counted then: `add` alone, with every
# event handed to a `local` of its own). Before that, with
# text deltas of the proxy's size (~188 bytes): 107, 5.0 and 7.6 (each stream's events held for
# eight windows, one log entry of ~43 tokens: its HMGET, XADD, HSET and EXPIRE once per ~43
# tokens); 127, 4.8 and 7.8 when the 45 tokens a hold gathered passed the entry's byte bound
# and went as two entries. Earlier, with 20-byte deltas: 267, 4.2 and 7.0 with entries of 15
# tokens (held three windows); 800, 6.25 and 14.8 when every window wrote every stream's five
# tokens as an entry.
MAX_COMMANDS_PER_1K_TOKENS = 115
MAX_SCRIPT_CALLS_PER_1K_TOKENS = 5.2
MAX_PYTHON_CALLS_PER_TOKEN = 4.7


async def test_window_flushes_of_streams_nobody_else_follows_run_few_commands_per_token(
        store: RedisStore) -> None:
    streams, windows, per_window = 32, 30, 5
    rids = [f"resp_tok{uuid.uuid4().hex}" for _ in range(streams)]
    for rid in rids:
        await store.create_response(ResponseRecord({"id": rid, "object": "response",
                                                    "status": "in_progress", "output": []},
                                                   TENANT, logged=True),
                                    [], ttl=3600, event_ttl=600)
    hub = EventLogHub(store, ttl=3600, event_ttl=600, window=30.0,  # flushed by hand
                      locally_followed=frozenset())
    handles = [hub.open(rid) for rid in rids]
    for handle in handles:
        handle.add(delta(0))
    assert await hub.flush_window()  # the first events, written at once (not counted)
    client = store.client
    await client.config_resetstat()
    profile = cProfile.Profile()
    seq = 1
    for _ in range(windows):
        profile.enable()
        for _ in range(per_window):
            made = delta(seq)
            events, encoded = [{"type": made.type, "sequence_number": seq}], [made[1:]]
            for handle in handles:
                handle.record(events, encoded)
            seq += 1
        flushed = await hub.flush_window()
        profile.disable()
        assert flushed
    profile.enable()
    assert await hub.flush_now()  # what the last windows still held
    profile.disable()
    commands = await commands_run(client)
    stats = await client.info("commandstats")
    scripts = int(stats["cmdstat_evalsha"]["calls"])
    tokens = streams * windows * per_window
    python_calls = sum(entry.callcount for entry in profile.getstats())
    figures = (commands * 1000 / tokens, scripts * 1000 / tokens, python_calls / tokens)
    for rid in rids:
        assert [e.seq for e in await store.read_events(rid)] == list(range(seq))
    assert figures[0] <= MAX_COMMANDS_PER_1K_TOKENS, figures
    assert figures[1] <= MAX_SCRIPT_CALLS_PER_1K_TOKENS, figures
    assert figures[2] <= MAX_PYTHON_CALLS_PER_TOKEN, figures
    await hub.aclose()
