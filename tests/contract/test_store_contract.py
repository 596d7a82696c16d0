"""The store contract (proxy/store/base.py), run against a real redis-server and the embedded
store alike. A behaviour only one backend shows is a bug in this suite or in the store."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from redis.exceptions import ResponseError

from proxy.core.errors import InvalidRequest
from proxy.core.shardtags import tag_of
from proxy.store import keys
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.redis import RedisStore
from tests.contract.conftest import RoundTrips
from tests.contract.tagged import cid, rid

TENANT = "tenant-a"
OTHER = "tenant-b"
TTL = 3600
EVENT_TTL = 600
ACTIVE = frozenset({"queued", "in_progress"})


# -- builders -------------------------------------------------------------------------------


def message(item_id: str, text: str, role: str = "user") -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {"id": item_id, "type": "message", "role": role, "status": "completed",
            "content": [{"type": kind, "text": text}]}


def response(an_id: str, status: str = "in_progress", *, output: list[dict[str, Any]] | None = None,
             model: str = "m1") -> dict[str, Any]:
    return {"id": an_id, "object": "response", "created_at": 1700000000, "status": status,
            "model": model, "output": output or [], "background": False}


def record(an_id: str, status: str = "in_progress", *, tenant: str = TENANT,
           parents: tuple[str, ...] = (), output: list[dict[str, Any]] | None = None,
           logged: bool = False) -> ResponseRecord:
    return ResponseRecord(response=response(an_id, status, output=output), tenant=tenant,
                          parents=parents, logged=logged)


def event(seq: int, kind: str = "response.output_text.delta", note: str = "") -> StoredEvent:
    return StoredEvent(seq=seq, type=kind,
                       data=orjson.dumps({"type": kind, "sequence_number": seq, "note": note}))


def seqs(events: list[StoredEvent]) -> list[int]:
    return [e.seq for e in events]


async def create(store: RedisStore, an_id: str, status: str = "in_progress", *,
                 tenant: str = TENANT, parents: tuple[str, ...] = (),
                 inputs: list[dict[str, Any]] | None = None,
                 output: list[dict[str, Any]] | None = None,
                 events: tuple[StoredEvent, ...] = (), ttl: int = TTL) -> None:
    await store.create_response(
        record(an_id, status, tenant=tenant, parents=parents, output=output,
               logged=bool(events)),
        inputs if inputs is not None else [message(f"in_{an_id}", f"hello {an_id}")],
        events=events, ttl=ttl, event_ttl=EVENT_TTL,
    )


async def ttl_ms(store: RedisStore, key: str) -> int:
    return int(await store.client.pttl(key))


async def assert_expiring(store: RedisStore, *names: str, above_ms: int = 0) -> None:
    for name in names:
        left = await ttl_ms(store, name)
        assert left > above_ms, f"{name}: PTTL {left}"


def response_keys(an_id: str) -> list[str]:
    return [keys.response(an_id), keys.response_input(an_id), keys.response_log(an_id)]


def conversation_keys(cid: str) -> list[str]:
    return [keys.conversation(cid), keys.conversation_order(cid), keys.conversation_items(cid)]


# -- responses: create, read, tenancy, delete -----------------------------------------------


async def test_create_then_get_returns_the_record(store: RedisStore) -> None:
    await store.create_response(
        ResponseRecord(response=response(rid("1"), "queued"), tenant=TENANT,
                       parents=(rid("0"),), logged=True),
        [message("in_1", "hi")], ttl=TTL, event_ttl=EVENT_TTL,
    )
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None
    assert got.response == response(rid("1"), "queued")
    assert (got.id, got.tenant, got.parents, got.logged, got.closed) == (
        rid("1"), TENANT, (rid("0"),), True, False)
    assert got == await store.get_response_any(rid("1"))


async def test_get_overlays_the_stored_status(store: RedisStore) -> None:
    await create(store, rid("1"), "queued")
    await store.transition(rid("1"), tenant=TENANT, allowed_from=ACTIVE, to="in_progress", ttl=TTL)
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None
    assert got.status == "in_progress"
    assert got.response["status"] == "in_progress"


async def test_unknown_response_is_absent_everywhere(store: RedisStore) -> None:
    assert await store.get_response(TENANT, rid("x")) is None
    assert await store.get_response_any(rid("x")) is None
    assert await store.input_items(TENANT, rid("x")) is None
    assert await store.load_chain(TENANT, rid("x")) is None
    assert await store.delete_response(TENANT, rid("x")) is False
    assert await store.read_events(rid("x")) == []
    moved = await store.transition(rid("x"), tenant=TENANT, allowed_from=ACTIVE, to="cancelled",
                                   ttl=TTL)
    assert (moved.changed, moved.response) == (False, None)
    done = await store.finish_response(response(rid("x"), "completed"), event(5), tenant=TENANT,
                                       ttl=TTL,
                                       event_ttl=EVENT_TTL)
    assert (done.changed, done.response) == (False, None)
    assert await store.client.exists(*response_keys(rid("x"))) == 0


async def test_another_tenant_sees_nothing_and_changes_nothing(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0), event(1)))
    before = await store.get_response(TENANT, rid("1"))
    assert await store.get_response(OTHER, rid("1")) is None
    assert await store.input_items(OTHER, rid("1")) is None
    assert await store.load_chain(OTHER, rid("1")) is None
    assert await store.delete_response(OTHER, rid("1")) is False
    assert await store.get_response(TENANT, rid("1")) == before
    assert await store.input_items(TENANT, rid("1")) == [
        message(f"in_{rid('1')}", f"hello {rid('1')}")]
    assert seqs(await store.read_events(rid("1"))) == [0, 1]
    # workers act for whoever queued: no tenant there
    assert await store.get_response_any(rid("1")) == before


async def test_delete_removes_record_inputs_and_log(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0), event(1)))
    assert await store.client.exists(*response_keys(rid("1"))) == 3
    assert await store.delete_response(TENANT, rid("1")) is True
    assert await store.client.exists(*response_keys(rid("1"))) == 0
    assert await store.get_response(TENANT, rid("1")) is None
    assert await store.read_events(rid("1")) == []
    assert await store.delete_response(TENANT, rid("1")) is False


async def test_input_items_keep_request_order(store: RedisStore) -> None:
    inputs = [message(f"in_{i}", f"text {i}") for i in range(7)]
    await create(store, rid("1"), inputs=inputs)
    assert await store.input_items(TENANT, rid("1")) == inputs
    await create(store, rid("2"), inputs=[])
    assert await store.input_items(TENANT, rid("2")) == []


async def test_create_stores_first_events_with_the_record(store: RedisStore) -> None:
    await create(store, rid("1"), "queued",
                 events=(event(0, "response.created"), event(1, "response.queued")))
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.logged and not got.closed
    assert [(e.seq, e.type) for e in await store.read_events(rid("1"))] == [
        (0, "response.created"), (1, "response.queued")]


# -- load_chain -----------------------------------------------------------------------------


async def make_chain(store: RedisStore, depth: int) -> list[str]:
    """resp_0 <- resp_1 <- ... : each with one input and one output item."""
    ids: list[str] = []
    for n in range(depth):
        an_id = rid(n)
        await create(store, an_id, "completed", parents=tuple(ids),
                     inputs=[message(f"in_{n}", f"q{n}")],
                     output=[message(f"out_{n}", f"a{n}", role="assistant")])
        ids.append(an_id)
    return ids


def item_ids(items: list[dict[str, Any]]) -> list[str]:
    return [str(i["id"]) for i in items]


async def test_load_chain_gives_inputs_then_outputs_oldest_first(store: RedisStore) -> None:
    ids = await make_chain(store, 3)
    chain = await store.load_chain(TENANT, ids[-1])
    assert chain is not None
    assert item_ids(chain.items) == ["in_0", "out_0", "in_1", "out_1", "in_2", "out_2"]
    assert chain.parents == (rid("0"), rid("1"), rid("2"))
    assert chain.model == "m1"


async def test_load_chain_gives_the_replica_that_ran_the_target(store: RedisStore) -> None:
    # Written with the create (same script, no extra round trip), read with the target.
    await store.create_response(ResponseRecord(response(rid("r"), "completed"), TENANT,
                                               replica="http://10.0.0.7:8000"),
                                [message("in_r", "q")], events=[event(0, "response.created")],
                                ttl=TTL, event_ttl=EVENT_TTL)
    chain = await store.load_chain(TENANT, rid("r"))
    assert chain is not None and chain.replica == "http://10.0.0.7:8000"
    assert seqs(await store.read_events(rid("r"))) == [0]  # the events still land after it
    ids = await make_chain(store, 1)  # created without one
    unknown = await store.load_chain(TENANT, ids[0])
    assert unknown is not None and unknown.replica is None


async def test_load_chain_skips_a_deleted_ancestor(store: RedisStore) -> None:
    ids = await make_chain(store, 3)
    assert await store.delete_response(TENANT, ids[1])
    chain = await store.load_chain(TENANT, ids[-1])
    assert chain is not None
    assert item_ids(chain.items) == ["in_0", "out_0", "in_2", "out_2"]
    assert chain.parents == (rid("0"), rid("1"), rid("2"))


@pytest.mark.parametrize("depth", [1, 2, 30])
async def test_load_chain_round_trips_do_not_grow_with_depth(
        store: RedisStore, round_trips: RoundTrips, depth: int) -> None:
    ids = await make_chain(store, depth)
    round_trips.reset()
    chain = await store.load_chain(TENANT, ids[-1])
    assert chain is not None and len(chain.items) == 2 * depth
    assert round_trips.count == (1 if depth == 1 else 2)


# -- transition -----------------------------------------------------------------------------


async def test_transition_from_an_allowed_status(store: RedisStore) -> None:
    await create(store, rid("1"), "queued")
    moved = await store.transition(rid("1"), tenant=TENANT, allowed_from=ACTIVE, to="in_progress",
                                   ttl=TTL)
    assert moved.changed
    assert moved.response is not None and moved.response["status"] == "in_progress"


async def test_transition_refused_changes_nothing(store: RedisStore) -> None:
    await create(store, rid("1"), "queued")
    new = response(rid("1"), "in_progress", output=[message("x", "replaced")])
    moved = await store.transition(rid("1"), tenant=TENANT, allowed_from=frozenset({"in_progress"}),
                                   to="completed", response=new, ttl=TTL)
    assert not moved.changed
    assert moved.response == response(rid("1"), "queued")
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.response == response(rid("1"), "queued")


async def test_transition_replaces_the_object_only_when_it_changes(store: RedisStore) -> None:
    await create(store, rid("1"), "queued")
    new = response(rid("1"), "cancelled", output=[message("p", "partial")])
    moved = await store.transition(rid("1"), tenant=TENANT, allowed_from=ACTIVE, to="cancelled",
                                   response=new,
                                   ttl=TTL)
    assert moved.changed and moved.response == new
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.response == new


@pytest.mark.parametrize("final", ["completed", "incomplete", "failed", "cancelled"])
async def test_a_terminal_status_is_final(store: RedisStore, final: str) -> None:
    await create(store, rid("1"), final)
    # even a caller that lists the terminal status as allowed cannot move it
    anything = frozenset({"queued", "in_progress", "completed", "incomplete", "failed",
                          "cancelled"})
    for to in ("in_progress", "queued", "completed", "failed"):
        moved = await store.transition(rid("1"), tenant=TENANT, allowed_from=anything, to=to,
                                       ttl=TTL)
        assert not moved.changed
        assert moved.response is not None and moved.response["status"] == final


# -- finish_response ------------------------------------------------------------------------


async def test_finish_stores_final_object_and_terminal_event_together(
        store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0), event(1)))
    final = response(rid("1"), "completed", output=[message("msg_1", "done", "assistant")])
    done = await store.finish_response(final, event(2, "response.completed"), tenant=TENANT,
                                       ttl=TTL,
                                       event_ttl=EVENT_TTL)
    assert done.changed and done.response == final
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.response == final and got.closed and got.logged
    log = await store.read_events(rid("1"))
    assert [(e.seq, e.type) for e in log][-1] == (2, "response.completed")


def terminal_of(final: dict[str, Any], seq: int) -> StoredEvent:
    """The terminal event as every caller of `finish_response` encodes it."""
    kind = f"response.{final['status']}"
    return StoredEvent(seq, kind, orjson.dumps({"type": kind, "sequence_number": seq,
                                                "response": final}))


@pytest.mark.parametrize("carried", [0, 3])
async def test_the_final_object_travels_once_inside_its_terminal_event(
        store: RedisStore, script_args: list[list[Any]], carried: int) -> None:
    """The object the terminal event carries is not encoded, nor sent, a second time; it is
    stored byte for byte as encoded, and the log's terminal event is the one given."""
    await create(store, rid("1"), events=(event(0),))
    final = response(rid("1"), "completed", output=[message("msg_1", "done " * 50, "assistant")])
    terminal = terminal_of(final, carried + 1)
    sent = script_args
    sent.clear()  # the create's
    done = await store.finish_response(final, terminal, tenant=TENANT, ttl=TTL,
                                       event_ttl=EVENT_TTL,
                                       events=[event(n) for n in range(1, carried + 1)])
    assert done.changed and done.response is final
    obj = orjson.dumps(final)
    (args,) = sent
    # (with events carried, the terminal is held by reference: its object goes as a view)
    assert sum(bytes(a).count(obj) for a in args if isinstance(a, bytes | memoryview)) == 1
    assert await store.client.hget(keys.response(rid("1")), keys.F_OBJECT) == obj
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.response == final and got.closed
    log = await store.read_events(rid("1"))
    assert seqs(log) == list(range(carried + 2)) and log[-1] == terminal


async def test_finish_without_terminal_event_still_closes(store: RedisStore) -> None:
    await create(store, rid("1"))
    done = await store.finish_response(response(rid("1"), "completed"), None, tenant=TENANT,
                                       ttl=TTL,
                                       event_ttl=EVENT_TTL)
    assert done.changed
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.closed and got.status == "completed"
    assert await store.read_events(rid("1")) == []


async def test_finish_refused_after_a_terminal_status(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    first = response(rid("1"), "completed", output=[message("m", "first", "assistant")])
    await store.finish_response(first, event(1, "response.completed"), tenant=TENANT, ttl=TTL,
                                event_ttl=EVENT_TTL)
    late = response(rid("1"), "failed")
    done = await store.finish_response(late, event(2, "response.failed"), tenant=TENANT, ttl=TTL,
                                       event_ttl=EVENT_TTL)
    assert not done.changed and done.response == first
    assert [e.type for e in await store.read_events(rid("1"))] == [
        "response.output_text.delta", "response.completed"]


async def test_cancelled_accepts_one_cancelled_final_object(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0), event(1)))
    # the cancel endpoint flips the status; the log stays open
    assert (await store.transition(rid("1"), tenant=TENANT, allowed_from=ACTIVE, to="cancelled",
                                   ttl=TTL)).changed
    partial = response(rid("1"), "cancelled", output=[message("m", "part", "assistant")])
    done = await store.finish_response(partial, event(2, "response.cancelled"), tenant=TENANT,
                                       ttl=TTL,
                                       event_ttl=EVENT_TTL)
    assert done.changed and done.response == partial
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.closed and got.response == partial
    # the second time the log is closed: refused
    again = response(rid("1"), "cancelled", output=[])
    twice = await store.finish_response(again, event(3, "response.cancelled"), tenant=TENANT,
                                        ttl=TTL,
                                        event_ttl=EVENT_TTL)
    assert not twice.changed and twice.response == partial
    assert seqs(await store.read_events(rid("1"))) == [0, 1, 2]


async def test_a_final_write_or_transition_naming_another_tenant_changes_nothing(
        store: RedisStore) -> None:
    """The caller names the response's owner (its ledger and index keys are declared from it,
    scripts.py); naming another is a bug that must not count bytes in the wrong ledger: an
    error, nothing written."""
    await create(store, rid("1"), events=(event(0),))
    before = await store.client.hgetall(keys.response(rid("1")))
    with pytest.raises(ResponseError, match="another tenant"):
        await store.finish_response(response(rid("1"), "completed"), event(1), tenant=OTHER,
                                    ttl=TTL, event_ttl=EVENT_TTL)
    with pytest.raises(ResponseError, match="another tenant"):
        await store.transition(rid("1"), tenant=OTHER, allowed_from=ACTIVE, to="cancelled",
                               ttl=TTL)
    assert await store.client.hgetall(keys.response(rid("1"))) == before
    assert [e.seq for e in await store.read_events(rid("1"))] == [0]
    assert await store.stored_bytes(OTHER) == 0


async def test_a_late_completion_never_overwrites_a_cancel(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    await store.transition(rid("1"), tenant=TENANT, allowed_from=ACTIVE, to="cancelled", ttl=TTL)
    late = response(rid("1"), "completed", output=[message("m", "late", "assistant")])
    done = await store.finish_response(late, event(1, "response.completed"), tenant=TENANT, ttl=TTL,
                                       event_ttl=EVENT_TTL)
    assert not done.changed
    assert done.response is not None and done.response["status"] == "cancelled"
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.status == "cancelled" and got.response["output"] == []
    assert not got.closed
    assert seqs(await store.read_events(rid("1"))) == [0]


async def test_finish_carries_the_unflushed_events_before_the_terminal_one(
        store: RedisStore, round_trips: RoundTrips) -> None:
    await create(store, rid("1"), events=(event(0),))
    await create(store, rid("0"))
    # a first final write loads the script into a fresh server (not what is counted here)
    await store.finish_response(response(rid("0"), "completed"), None, tenant=TENANT, ttl=TTL,
                                event_ttl=EVENT_TTL)
    final = response(rid("1"), "completed", output=[message("msg_1", "done", "assistant")])
    round_trips.reset()
    done = await store.finish_response(final, event(4, "response.completed"), tenant=TENANT,
                                       ttl=TTL,
                                       event_ttl=EVENT_TTL,
                                       events=(event(1, note="a"), event(2), event(3)))
    assert round_trips.count == 1  # the events, the end and the item index: one script call
    assert done.changed and done.response == final
    log = await store.read_events(rid("1"))
    assert [(e.seq, e.type) for e in log] == [
        (0, "response.output_text.delta"), (1, "response.output_text.delta"),
        (2, "response.output_text.delta"), (3, "response.output_text.delta"),
        (4, "response.completed")]
    assert log[1] == event(1, note="a")  # the bytes as given
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.closed and got.logged


async def test_finish_after_flushes_appends_only_what_follows_them(store: RedisStore) -> None:
    """A flush leaves the log's newest number in the record; the final write starts from it
    (an event at or below it, sent again, is skipped), and the log's counts stay right."""
    await create(store, rid("1"), events=(event(0),))
    await store.append_events({rid("1"): [event(1), event(2)]}, ttl=EVENT_TTL)
    await store.append_events({rid("1"): [event(3)]}, ttl=EVENT_TTL)
    final = response(rid("1"), "completed")
    done = await store.finish_response(final, terminal_of(final, 6), tenant=TENANT, ttl=TTL,
                                       event_ttl=EVENT_TTL,
                                       events=(event(3), event(4), event(5)))
    assert done.changed
    log = await store.read_events(rid("1"))
    assert seqs(log) == [0, 1, 2, 3, 4, 5, 6]
    assert await store.log_extent(rid("1")) == (7, log[-1])


async def test_finish_with_events_and_no_log_yet_marks_it_logged(store: RedisStore) -> None:
    await create(store, rid("1"))
    done = await store.finish_response(response(rid("1"), "completed"),
                                       event(2, "response.completed"), tenant=TENANT, ttl=TTL,
                                       event_ttl=EVENT_TTL, events=(event(0), event(1)))
    assert done.changed
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.logged and got.closed
    assert seqs(await store.read_events(rid("1"))) == [0, 1, 2]


async def test_a_retried_finish_adds_none_of_its_events_twice(store: RedisStore) -> None:
    """The first attempt landed and its reply was lost: the retry is refused, the log as the
    first one left it."""
    await create(store, rid("1"), events=(event(0), event(1)))
    final = response(rid("1"), "completed")
    carried = (event(1), event(2), event(3))  # 1 is in the log already: skipped
    first = await store.finish_response(final, event(4, "response.completed"), tenant=TENANT,
                                        ttl=TTL,
                                        event_ttl=EVENT_TTL, events=carried)
    again = await store.finish_response(final, event(4, "response.completed"), tenant=TENANT,
                                        ttl=TTL,
                                        event_ttl=EVENT_TTL, events=carried)
    assert first.changed and not again.changed and again.response == final
    assert seqs(await store.read_events(rid("1"))) == [0, 1, 2, 3, 4]


async def test_a_refused_finish_appends_none_of_its_events(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    await store.transition(rid("1"), tenant=TENANT, allowed_from=ACTIVE, to="cancelled", ttl=TTL)
    late = response(rid("1"), "completed")
    done = await store.finish_response(late, event(3, "response.completed"), tenant=TENANT, ttl=TTL,
                                       event_ttl=EVENT_TTL, events=(event(1), event(2)))
    assert not done.changed
    assert seqs(await store.read_events(rid("1"))) == [0]


async def test_finish_needs_its_events_in_order(store: RedisStore) -> None:
    await create(store, rid("1"))
    with pytest.raises(ValueError):
        await store.finish_response(response(rid("1"), "completed"), event(2), tenant=TENANT,
                                    ttl=TTL,
                                    event_ttl=EVENT_TTL, events=(event(1), event(3)))
    with pytest.raises(ValueError):
        await store.finish_response(response(rid("1"), "completed"), None, tenant=TENANT, ttl=TTL,
                                    event_ttl=EVENT_TTL, events=(event(1), event(1)))
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.status == "in_progress"


async def test_finish_needs_a_terminal_status(store: RedisStore) -> None:
    await create(store, rid("1"))
    with pytest.raises(ValueError):
        await store.finish_response(response(rid("1"), "in_progress"), None, tenant=TENANT, ttl=TTL,
                                    event_ttl=EVENT_TTL)


# -- event logs -----------------------------------------------------------------------------


async def test_append_keeps_events_dense_and_in_order(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    await store.append_events({rid("1"): [event(1), event(2)]}, ttl=EVENT_TTL)
    await store.append_events({rid("1"): [event(3)]}, ttl=EVENT_TTL)
    log = await store.read_events(rid("1"))
    assert seqs(log) == [0, 1, 2, 3]
    assert log[2] == event(2)


async def test_appended_bytes_come_back_exactly(store: RedisStore) -> None:
    # Events travel packed (byte 0 and 1 as separators): every text a delta can hold, control
    # characters and multi-byte UTF-8 included, must come back byte for byte.
    await create(store, rid("1"), events=(event(0),))
    notes = ["\x00\x01\x02 nul, soh", "héllo 🌍 ünïcode", "", "a" * 70_000, '{"json": [1]}']
    sent = [event(i + 1, note=note) for i, note in enumerate(notes)]
    await store.append_events({rid("1"): sent}, ttl=EVENT_TTL)
    assert await store.read_events(rid("1"), after=0) == sent


async def test_append_ignores_old_ids_without_losing_the_rest(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0), event(1)))
    await create(store, rid("2"), events=(event(0),))
    # a retried batch: 1 is already there, 0 is older, 2 and 3 are new; resp_2 shares the call
    await store.append_events({
        rid("1"): [event(1, note="dup"), event(0, note="old"), event(2), event(3)],
        rid("2"): [event(1), event(2)],
    }, ttl=EVENT_TTL)
    log = await store.read_events(rid("1"))
    assert seqs(log) == [0, 1, 2, 3]
    assert log[1] == event(1)  # the first write won
    assert seqs(await store.read_events(rid("2"))) == [0, 1, 2]
    # the whole batch again is harmless
    await store.append_events({rid("1"): [event(2), event(3)]}, ttl=EVENT_TTL)
    assert seqs(await store.read_events(rid("1"))) == [0, 1, 2, 3]


async def test_append_for_several_logs_is_one_round_trip(
        store: RedisStore, round_trips: RoundTrips) -> None:
    for n in range(5):
        await create(store, rid(n), events=(event(0),))
    await store.append_events({rid("0"): [event(1)]}, ttl=EVENT_TTL)  # loads the script
    round_trips.reset()
    await store.append_events({rid(n): [event(2), event(3)] for n in range(5)},
                              ttl=EVENT_TTL)
    # On a cluster: one call per shard tag, side by side (one round trip's wait).
    assert round_trips.count == (len({tag_of(rid(n)) for n in range(5)}) if store.sharded
                                 else 1)
    for n in range(5):
        expected = [0, 1, 2, 3] if n == 0 else [0, 2, 3]
        assert seqs(await store.read_events(rid(n))) == expected


async def test_append_marks_the_response_logged(store: RedisStore) -> None:
    await create(store, rid("1"))
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and not got.logged
    await store.append_events({rid("1"): [event(0)]}, ttl=EVENT_TTL)
    got = await store.get_response(TENANT, rid("1"))
    assert got is not None and got.logged


async def test_append_for_an_unknown_response_writes_nothing(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    await store.delete_response(TENANT, rid("1"))
    await store.append_events({rid("1"): [event(1)], rid("x"): [event(0)]}, ttl=EVENT_TTL)
    assert await store.client.exists(keys.response_log(rid("1")),
                                     keys.response_log(rid("x"))) == 0


async def test_nothing_is_appended_after_the_terminal_event(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    await store.finish_response(response(rid("1"), "completed"), event(1, "response.completed"),
                                tenant=TENANT, ttl=TTL, event_ttl=EVENT_TTL)
    await store.append_events({rid("1"): [event(2), event(3)]}, ttl=EVENT_TTL)
    assert seqs(await store.read_events(rid("1"))) == [0, 1]


async def test_read_events_after(store: RedisStore) -> None:
    await create(store, rid("1"), events=tuple(event(n) for n in range(6)))
    assert seqs(await store.read_events(rid("1"))) == [0, 1, 2, 3, 4, 5]
    assert seqs(await store.read_events(rid("1"), after=-1)) == [0, 1, 2, 3, 4, 5]
    assert seqs(await store.read_events(rid("1"), after=0)) == [1, 2, 3, 4, 5]
    assert seqs(await store.read_events(rid("1"), after=3)) == [4, 5]
    assert await store.read_events(rid("1"), after=5) == []
    assert (await store.read_events(rid("1"), after=2))[0] == event(3)


async def test_read_events_pages_with_a_count(store: RedisStore) -> None:
    await create(store, rid("1"), events=tuple(event(n) for n in range(6)))
    assert seqs(await store.read_events(rid("1"), limit=2)) == [0, 1]
    assert seqs(await store.read_events(rid("1"), after=1, limit=3)) == [2, 3, 4]
    assert seqs(await store.read_events(rid("1"), after=4, limit=3)) == [5]


async def test_log_extent_tells_a_whole_log_from_one_with_a_gap(store: RedisStore) -> None:
    assert await store.log_extent(rid("x")) == (0, None)
    await create(store, rid("1"), events=(event(0), event(1), event(2)))
    assert await store.log_extent(rid("1")) == (3, event(2))
    await store.append_events({rid("1"): [event(5)]}, ttl=EVENT_TTL)  # 3 and 4 lost
    count, last = await store.log_extent(rid("1"))
    assert last is not None and (count, last.seq) == (4, 5)


async def test_tail_returns_new_events_of_several_logs(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0), event(1)))
    await create(store, rid("2"), events=(event(0),))
    await create(store, rid("3"), events=(event(0),))
    got = await store.tail({rid("1"): 0, rid("2"): -1, rid("3"): 0}, block_ms=1000)
    assert {an_id: seqs(events) for an_id, events in got.items()} == {rid("1"): [1], rid("2"): [0]}
    assert got[rid("1")][0] == event(1)


async def test_tail_times_out_empty(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    started = time.monotonic()
    assert await store.tail({rid("1"): 0}, block_ms=300) == {}
    assert 0.25 <= time.monotonic() - started < 1.5
    assert await store.tail({}, block_ms=300) == {}
    # 0 means "do not wait" (Redis itself reads BLOCK 0 as forever)
    started = time.monotonic()
    assert await store.tail({rid("1"): 0}, block_ms=0) == {}
    assert time.monotonic() - started < 0.25


async def test_tail_wakes_for_an_event_appended_while_blocked(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),))
    await create(store, rid("2"), events=(event(0),))
    waiting = asyncio.create_task(store.tail({rid("1"): 0, rid("2"): 0}, block_ms=1500))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    started = time.monotonic()
    await store.append_events({rid("2"): [event(1)]}, ttl=EVENT_TTL)
    got = await asyncio.wait_for(waiting, 2)
    assert time.monotonic() - started < 0.5
    assert {an_id: seqs(events) for an_id, events in got.items()} == {rid("2"): [1]}


# -- lifetimes ------------------------------------------------------------------------------


async def every_key(store: RedisStore) -> list[bytes]:
    """KEYS over every primary of a cluster (redis-py asks one node otherwise)."""
    if store.sharded:
        found: list[bytes] = await store.client.keys(  # type: ignore[call-arg]
            "*", target_nodes="primaries")
        return found
    return list(await store.client.keys("*"))


async def assert_every_key_expires(store: RedisStore) -> None:
    # KEYS is fine in a test on a private database; the store itself never lists keys.
    names = await every_key(store)
    assert names
    for name in names:
        left = await store.client.pttl(name)
        assert left > 0, f"{name!r} has no TTL ({left})"


async def test_every_response_write_sets_ttls(store: RedisStore) -> None:
    await create(store, rid("1"), events=(event(0),), ttl=100)
    await assert_expiring(store, *response_keys(rid("1")))
    # the log lives by the event TTL, the record by the response TTL
    assert await ttl_ms(store, keys.response_log(rid("1"))) > 100_000

    await store.transition(rid("1"), tenant=TENANT, allowed_from=ACTIVE, to="in_progress", ttl=5000)
    await assert_expiring(store, keys.response(rid("1")), keys.response_input(rid("1")),
                          above_ms=1_000_000)

    await store.client.expire(keys.response_log(rid("1")), 50)
    await store.append_events({rid("1"): [event(1)]}, ttl=EVENT_TTL)
    await assert_expiring(store, keys.response_log(rid("1")), above_ms=100_000)

    await store.client.expire(keys.response_log(rid("1")), 50)
    await store.finish_response(response(rid("1"), "completed"), event(2, "response.completed"),
                                tenant=TENANT, ttl=9000, event_ttl=EVENT_TTL)
    await assert_expiring(store, keys.response(rid("1")), keys.response_input(rid("1")),
                          above_ms=5_000_000)
    await assert_expiring(store, keys.response_log(rid("1")), above_ms=100_000)
    await assert_every_key_expires(store)


async def test_a_log_started_by_append_expires(store: RedisStore) -> None:
    await create(store, rid("1"))
    await store.append_events({rid("1"): [event(0)]}, ttl=EVENT_TTL)
    await assert_expiring(store, keys.response_log(rid("1")))
    await assert_every_key_expires(store)


async def test_every_conversation_write_sets_ttls(store: RedisStore) -> None:
    await store.create_conversation(TENANT, conversation(cid("1")), [message("a", "1")], ttl=100)
    await assert_expiring(store, *conversation_keys(cid("1")))
    await store.add_conversation_items(TENANT, cid("1"), [message("b", "2")], ttl=5000)
    await assert_expiring(store, *conversation_keys(cid("1")), above_ms=1_000_000)
    await store.update_conversation(TENANT, cid("1"), {"k": "v"}, ttl=9000)
    await assert_expiring(store, *conversation_keys(cid("1")), above_ms=5_000_000)
    await store.delete_conversation_item(TENANT, cid("1"), "a")
    await assert_every_key_expires(store)


async def test_a_zero_ttl_is_refused_before_any_write(store: RedisStore) -> None:
    # EXPIRE 0 deletes at once: a zero TTL is a caller's bug, not "keep forever"
    with pytest.raises(ValueError):
        await create(store, rid("1"), ttl=0)
    with pytest.raises(ValueError):
        await store.append_events({rid("1"): [event(0)]}, ttl=0)
    assert await store.client.exists(*response_keys(rid("1"))) == 0


# -- conversations --------------------------------------------------------------------------


def conversation(conv_id: str, metadata: dict[str, str] | None = None) -> dict[str, Any]:
    return {"id": conv_id, "object": "conversation", "created_at": 1700000000,
            "metadata": metadata or {}}


async def make_conversation(store: RedisStore, conv_id: str | None = None, n: int = 5,
                            tenant: str = TENANT) -> list[dict[str, Any]]:
    items = [message(f"item_{i}", f"text {i}") for i in range(n)]
    await store.create_conversation(tenant, conversation(conv_id or cid("1"), {"topic": "t"}),
                                    items, ttl=TTL)
    return items


async def page_ids(store: RedisStore, *, after: str | None = None, limit: int = 20,
                   order: str = "asc", conv_id: str | None = None) -> tuple[list[str], bool]:
    page = await store.list_conversation_items(TENANT, conv_id or cid("1"), after=after,
                                               limit=limit,
                                               order=order)
    assert page is not None
    return item_ids(page.items), page.has_more


async def test_conversation_create_get_update_delete(store: RedisStore) -> None:
    await make_conversation(store)
    assert await store.get_conversation(TENANT, cid("1")) == conversation(
        cid("1"), {"topic": "t"})
    updated = await store.update_conversation(TENANT, cid("1"), {"a": "b"}, ttl=TTL)
    assert updated == conversation(cid("1"), {"a": "b"})
    assert await store.get_conversation(TENANT, cid("1")) == updated
    assert await store.update_conversation(TENANT, cid("1"), None, ttl=TTL) == conversation(
        cid("1"), {})
    assert await store.delete_conversation(TENANT, cid("1")) is True
    assert await store.get_conversation(TENANT, cid("1")) is None
    assert await store.all_conversation_items(TENANT, cid("1")) is None
    assert await store.client.exists(*conversation_keys(cid("1"))) == 0
    assert await store.delete_conversation(TENANT, cid("1")) is False


async def assert_conversation_absent(store: RedisStore, tenant: str, conversation_id: str,
                                     item_id: str) -> None:
    """Every conversation call, as `tenant`, behaves as if the conversation did not exist."""
    assert await store.get_conversation(tenant, conversation_id) is None
    assert await store.update_conversation(tenant, conversation_id, {"x": "y"}, ttl=TTL) is None
    assert await store.delete_conversation(tenant, conversation_id) is False
    assert await store.add_conversation_items(tenant, conversation_id, [message("evil", "x")],
                                              ttl=TTL) is False
    assert await store.list_conversation_items(tenant, conversation_id, after=None, limit=10,
                                               order="asc") is None
    assert await store.all_conversation_items(tenant, conversation_id) is None
    assert await store.get_conversation_item(tenant, conversation_id, item_id) is None
    assert await store.delete_conversation_item(tenant, conversation_id, item_id) is False


async def test_unknown_conversation_is_absent_everywhere(store: RedisStore) -> None:
    await assert_conversation_absent(store, TENANT, cid("x"), "a")
    assert await store.client.exists(*conversation_keys(cid("x"))) == 0


async def test_conversation_without_items(store: RedisStore) -> None:
    await store.create_conversation(TENANT, conversation(cid("1")), [], ttl=TTL)
    assert await page_ids(store) == ([], False)
    assert await store.all_conversation_items(TENANT, cid("1")) == []
    assert await store.add_conversation_items(TENANT, cid("1"), [message("a", "1")], ttl=TTL)
    assert await page_ids(store) == (["a"], False)


async def test_items_are_listed_in_insertion_order(store: RedisStore) -> None:
    items = await make_conversation(store, n=3)
    more = [message("item_z", "z"), message("item_a", "a")]  # ids deliberately not sorted
    assert await store.add_conversation_items(TENANT, cid("1"), more, ttl=TTL)
    expected = item_ids(items + more)
    assert await page_ids(store) == (expected, False)
    assert await page_ids(store, order="desc") == (expected[::-1], False)
    assert item_ids(await store.all_conversation_items(TENANT, cid("1")) or []) == expected
    page = await store.list_conversation_items(TENANT, cid("1"), after=None, limit=1,
                                               order="asc")
    assert page is not None and page.items == [items[0]]


@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_pages_follow_the_after_cursor(store: RedisStore, order: str) -> None:
    items = await make_conversation(store, n=7)
    expected = item_ids(items) if order == "asc" else item_ids(items)[::-1]
    assert await page_ids(store, limit=3, order=order) == (expected[:3], True)
    assert await page_ids(store, after=expected[2], limit=3, order=order) == (expected[3:6], True)
    assert await page_ids(store, after=expected[5], limit=3, order=order) == (expected[6:], False)
    assert await page_ids(store, after=expected[6], limit=3, order=order) == ([], False)
    # exactly one page's worth left: no more after it
    assert await page_ids(store, after=expected[3], limit=3, order=order) == (expected[4:], False)
    # walking the whole list
    seen: list[str] = []
    after: str | None = None
    while True:
        ids, more = await page_ids(store, after=after, limit=2, order=order)
        seen += ids
        if not more:
            break
        after = ids[-1]
    assert seen == expected


async def test_an_unknown_after_gives_an_empty_page(store: RedisStore) -> None:
    await make_conversation(store)
    assert await page_ids(store, after="item_nope") == ([], False)
    assert await page_ids(store, after="item_nope", order="desc") == ([], False)


async def test_get_and_delete_one_item(store: RedisStore) -> None:
    items = await make_conversation(store, n=4)
    assert await store.get_conversation_item(TENANT, cid("1"), "item_2") == items[2]
    assert await store.get_conversation_item(TENANT, cid("1"), "item_9") is None
    assert await store.delete_conversation_item(TENANT, cid("1"), "item_2") is True
    assert await store.delete_conversation_item(TENANT, cid("1"), "item_2") is False
    assert await store.get_conversation_item(TENANT, cid("1"), "item_2") is None
    assert await page_ids(store) == (["item_0", "item_1", "item_3"], False)
    assert await page_ids(store, after="item_1") == (["item_3"], False)
    assert item_ids(await store.all_conversation_items(TENANT, cid("1")) or []) == [
        "item_0", "item_1", "item_3"]
    # later items still go last
    await store.add_conversation_items(TENANT, cid("1"), [message("item_4", "4")], ttl=TTL)
    assert await page_ids(store) == (["item_0", "item_1", "item_3", "item_4"], False)


async def test_re_adding_an_item_keeps_its_place(store: RedisStore) -> None:
    await make_conversation(store, n=3)
    changed = message("item_0", "edited")
    assert await store.add_conversation_items(TENANT, cid("1"), [changed], ttl=TTL)
    assert await page_ids(store) == (["item_0", "item_1", "item_2"], False)
    assert await store.get_conversation_item(TENANT, cid("1"), "item_0") == changed


async def test_the_item_cap_is_enforced(store: RedisStore,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proxy.store.conversations.MAX_CONVERSATION_ITEMS", 5)
    await make_conversation(store, n=4)
    with pytest.raises(InvalidRequest) as refused:
        await store.add_conversation_items(
            TENANT, cid("1"), [message("x1", "x"), message("x2", "x")], ttl=TTL)
    assert refused.value.param == "items"
    assert len(await store.all_conversation_items(TENANT, cid("1")) or []) == 4  # all or none
    assert await store.add_conversation_items(TENANT, cid("1"), [message("x1", "x")], ttl=TTL)
    with pytest.raises(InvalidRequest):
        await store.add_conversation_items(TENANT, cid("1"), [message("x2", "x")], ttl=TTL)
    with pytest.raises(InvalidRequest):
        await make_conversation(store, cid("2"), n=6)
    assert await store.get_conversation(TENANT, cid("2")) is None


async def test_the_item_cap_holds_under_concurrent_appends(
        store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proxy.store.conversations.MAX_CONVERSATION_ITEMS", 5)
    await make_conversation(store, n=3)
    results = await asyncio.gather(*(
        store.add_conversation_items(TENANT, cid("1"), [message(f"c{n}a", "x"),
                                                        message(f"c{n}b", "x")], ttl=TTL)
        for n in range(4)
    ), return_exceptions=True)
    assert sum(r is True for r in results) == 1
    assert sum(isinstance(r, InvalidRequest) for r in results) == 3
    assert len(await store.all_conversation_items(TENANT, cid("1")) or []) == 5


async def test_the_real_cap_is_large(store: RedisStore) -> None:
    from proxy.store.base import MAX_CONVERSATION_ITEMS

    await store.create_conversation(TENANT, conversation(cid("1")), [], ttl=TTL)
    batch = [message(f"i{n}", "x") for n in range(MAX_CONVERSATION_ITEMS + 1)]
    with pytest.raises(InvalidRequest):
        await store.add_conversation_items(TENANT, cid("1"), batch, ttl=TTL)
    assert await store.add_conversation_items(TENANT, cid("1"), batch[:100], ttl=TTL)


async def test_another_tenant_cannot_touch_a_conversation(store: RedisStore) -> None:
    items = await make_conversation(store, n=3)
    before = await store.get_conversation(TENANT, cid("1"))
    await assert_conversation_absent(store, OTHER, cid("1"), "item_0")
    assert await store.get_conversation(TENANT, cid("1")) == before
    assert await store.all_conversation_items(TENANT, cid("1")) == items


async def test_conversation_reads_are_one_round_trip(
        store: RedisStore, round_trips: RoundTrips) -> None:
    await make_conversation(store, n=5)
    await store.list_conversation_items(TENANT, cid("1"), after=None, limit=2, order="asc")
    calls = [
        store.get_conversation(TENANT, cid("1")),
        store.list_conversation_items(TENANT, cid("1"), after="item_1", limit=2, order="desc"),
        store.all_conversation_items(TENANT, cid("1")),
        store.get_conversation_item(TENANT, cid("1"), "item_3"),
    ]
    for call in calls:
        round_trips.reset()
        await call
        assert round_trips.count == 1


async def test_one_flush_for_many_streams_skips_only_the_closed_one(store: RedisStore) -> None:
    # One script call carries every stream of a flush and derives each stream's keys from its
    # id (scripts.APPEND_EVENTS_MANY): the keys it writes must be keys.py's, with their TTL,
    # and a closed stream in the batch must not stop the others.
    await create(store, rid("1"), events=(event(0),))
    await create(store, rid("2"), events=(event(0),))
    await create(store, rid("3"))
    await store.finish_response(response(rid("1"), "completed"), event(1, "response.completed"),
                                tenant=TENANT, ttl=TTL, event_ttl=EVENT_TTL)
    await store.append_events({rid("1"): [event(2)], rid("2"): [event(1), event(2)],
                               rid("3"): [event(0, note="\x02\x03 separators")]},
                              ttl=EVENT_TTL)
    assert seqs(await store.read_events(rid("1"))) == [0, 1]
    assert seqs(await store.read_events(rid("2"))) == [0, 1, 2]
    assert await store.read_events(rid("3")) == [event(0, note="\x02\x03 separators")]
    for an_id in (rid("2"), rid("3")):
        assert 0 < await store.client.ttl(keys.response_log(an_id)) <= EVENT_TTL
    got = await store.get_response(TENANT, rid("3"))
    assert got is not None and got.logged


async def test_a_flush_bigger_than_one_call_is_split_in_one_round_trip(
        store: RedisStore, round_trips: RoundTrips) -> None:
    # A backlog (the store was slow) must not become one long script that stalls every other
    # client: past MAX_EVENTS_PER_CALL events it goes as several calls, still one round trip.
    from proxy.store.redis import MAX_EVENTS_PER_CALL

    streams = 6
    per_stream = MAX_EVENTS_PER_CALL // 2 + 1  # two streams never fit in one call
    for n in range(streams):
        await create(store, rid(n), events=(event(0),))
    await store.append_events({rid("0"): [event(1)]}, ttl=EVENT_TTL)  # loads the script
    round_trips.reset()
    await store.append_events({rid(n): [event(i) for i in range(1, per_stream + 1)]
                               for n in range(streams)}, ttl=EVENT_TTL)
    assert round_trips.count == (streams if store.sharded else 1)
    for n in range(streams):
        assert seqs(await store.read_events(rid(n))) == list(range(per_stream + 1))
