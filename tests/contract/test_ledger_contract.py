"""The storage ledger and the per-key storage budget (store/budget/ledger.py, store/base.py "Bytes
are bounded per tenant"), against a real redis-server and the embedded store alike: bytes counted
as they are written, released by a delete or when their TTL passes, a create refused (writing
nothing) once the key holds its budget, the check and the count atomic across instances."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from proxy.core.errors import QuotaExceeded, StoreUnavailable
from proxy.core.policy.storagebudget import StorageBudget
from proxy.core.shardtags import tag_of
from proxy.store import keys
from proxy.store.redis import RedisStore
from tests.contract.conftest import RoundTrips
from tests.contract.tagged import cid, rid
from tests.contract.test_store_contract import (
    EVENT_TTL,
    OTHER,
    TENANT,
    TTL,
    create,
    message,
    record,
    response,
)


def budgeted(store: RedisStore, budget: int, tenant: str = TENANT) -> RedisStore:
    """Another instance on the same server, holding `tenant` to `budget` bytes."""
    return RedisStore(store.client, embedded=store.embedded,
                      budget=StorageBudget(0, {tenant: budget}), sharded=store.sharded)


def response_bytes(an_id: str, inputs: list[dict[str, Any]], *, status: str = "in_progress",
                   output: list[dict[str, Any]] | None = None,
                   parents: tuple[str, ...] = ()) -> int:
    """What the ledger counts for a response: its object, its ancestors, its input items."""
    return (len(orjson.dumps(response(an_id, status, output=output)))
            + len(orjson.dumps(parents)) + len(orjson.dumps(inputs)))


def conversation(cid: str) -> dict[str, Any]:
    return {"id": cid, "object": "conversation", "created_at": 1700000000,
            "metadata": {"topic": "x"}}


def conversation_bytes(cid: str, items: list[dict[str, Any]]) -> int:
    body = {k: v for k, v in conversation(cid).items() if k != "metadata"}
    return (len(orjson.dumps(body)) + len(orjson.dumps({"topic": "x"}))
            + sum(len(orjson.dumps(item)) for item in items))


async def test_a_response_counts_its_object_input_and_ancestors(store: RedisStore) -> None:
    inputs = [message("msg_1", "x" * 1000)]
    await create(store, rid("1"), inputs=inputs, parents=())
    assert await store.stored_bytes(TENANT) == response_bytes(rid("1"), inputs)
    assert await store.stored_bytes(OTHER) == 0
    # The final write renews the TTL: the bytes move to their new bucket, counted once.
    output = [message("msg_out", "y" * 500, role="assistant")]
    await store.finish_response(response(rid("1"), "completed", output=output), None,
                                tenant=TENANT, ttl=TTL,
                                event_ttl=EVENT_TTL)
    assert await store.stored_bytes(TENANT) == response_bytes(
        rid("1"), inputs, status="completed", output=output)
    assert await store.client.hlen(keys.stored_bytes(TENANT, tag_of(rid("1")))) == 1


async def test_a_bucket_holding_less_than_its_record_counted_is_left_holding_the_new_count(
        store: RedisStore) -> None:
    """The final write lands in its create's bucket (one HINCRBY moves the difference): a bucket
    found short of the old count (lost to an operator's edit, say) ends holding the new count,
    as taking the old count out (never below zero) and adding the new one did."""
    inputs = [message("msg_1", "x" * 100)]
    await create(store, rid("1"), inputs=inputs)
    ledger = keys.stored_bytes(TENANT, tag_of(rid("1")))
    (bucket,) = await store.client.hkeys(ledger)
    await store.client.hset(ledger, bucket, 1)
    await store.finish_response(response(rid("1"), "completed"), None, tenant=TENANT, ttl=TTL,
                                event_ttl=EVENT_TTL)
    assert await store.client.hgetall(ledger) == {
        bucket: str(response_bytes(rid("1"), inputs, status="completed")).encode()}


async def test_a_status_change_moves_the_bytes_without_counting_them_twice(
        store: RedisStore) -> None:
    await create(store, rid("1"), "queued")
    before = await store.stored_bytes(TENANT)
    moved = await store.transition(rid("1"), tenant=TENANT, allowed_from=frozenset({"queued"}),
                                   to="cancelled", response=response(rid("1"), "cancelled"),
                                   ttl=TTL)
    assert moved.changed
    grown = len(b"cancelled") - len(b"queued")  # the stored object's status field
    assert await store.stored_bytes(TENANT) == before + grown


async def test_deleting_a_response_frees_its_bytes(store: RedisStore) -> None:
    await create(store, rid("1"), inputs=[message("msg_1", "x" * 1000)])
    await create(store, rid("2"))
    kept = response_bytes(rid("2"), [message(f"in_{rid('2')}", f"hello {rid('2')}")])
    assert not await store.delete_response(OTHER, rid("1"))  # not theirs: nothing moves
    assert await store.delete_response(TENANT, rid("1"))
    assert await store.stored_bytes(TENANT) == kept
    assert await store.delete_response(TENANT, rid("2"))
    assert await store.stored_bytes(TENANT) == 0


async def test_bytes_stop_counting_once_their_ttl_has_passed(store: RedisStore) -> None:
    # A two-second TTL: its bucket is a second wide, so the bytes count for at least two seconds
    # (read at once, with that margin: a one-second TTL failed once on a loaded CI machine) and
    # stop counting within three.
    short_inputs = [message("msg_1", "x" * 1000)]
    await create(store, rid("short"), inputs=short_inputs, ttl=2)
    assert await store.stored_bytes(TENANT) == response_bytes(rid("short"), short_inputs)
    await create(store, rid("long"))
    long_bytes = response_bytes(rid("long"), [message(f"in_{rid('long')}",
                                                   f"hello {rid('long')}")])
    await asyncio.sleep(3.1)
    assert await store.get_response(TENANT, rid("short")) is None
    assert await store.stored_bytes(TENANT) == long_bytes
    # the passed bucket dropped
    assert await store.client.hlen(keys.stored_bytes(TENANT, tag_of(rid("long")))) == 1


async def test_the_ledger_itself_expires_with_its_last_bucket(store: RedisStore) -> None:
    await create(store, rid("1"), ttl=1)
    ledger = keys.stored_bytes(TENANT, tag_of(rid("1")))
    assert 0 < await store.client.ttl(ledger) <= 2
    await store.finish_response(response(rid("1"), "completed"), None, tenant=TENANT, ttl=TTL,
                                event_ttl=EVENT_TTL)
    # Renewed to outlive the bytes it now holds (keys built in Lua match keys.py's).
    assert await store.client.ttl(ledger) > TTL - 5


async def a_bucket_begins(store: RedisStore, ttl: int) -> None:
    """Return once the server's clock has just entered a ledger bucket for `ttl` (ledger.py
    `ledger_until`): writes for `ttl` made in the next second or more share it, however slow
    the machine is between them. Bounded: a bucket begins within its width."""
    width = max(1, -(-ttl // 30))
    for _ in range(width + 2):
        seconds, micros = await store.client.time()
        if (seconds + 1 + ttl) % width == 1 % width and micros < 200_000:
            return
        await asyncio.sleep((1_000_000 - micros) / 1e6 + 0.01)  # the next second's start
    raise AssertionError("no bucket began")


async def test_writes_into_a_bucket_already_counted_leave_the_ledger_outliving_it(
        store: RedisStore) -> None:
    # A write into a bucket that holds bytes skips the ledger's TTL read (ledger.py): the write
    # that counted there first gave the ledger a TTL reaching that bucket's end. A far bucket, a
    # near one twice (made at a near bucket's start, so that both writes land in it: two
    # seconds wide), the far again.
    await create(store, rid(0, like="1"), ttl=TTL)
    await a_bucket_begins(store, 60)
    for n in (1, 2):
        await create(store, rid(n, like="1"), ttl=60)
    await create(store, rid(3, like="1"), ttl=TTL)
    ledger = keys.stored_bytes(TENANT, tag_of(rid("1")))
    records = [await store.client.hmget(keys.response(rid(n, like="1")), "bytes", "until")
               for n in range(4)]
    assert records[1][1] == records[2][1]  # the near pair shared its bucket
    # The far pair shares one too unless a far bucket (two minutes wide) ended between them.
    assert await store.client.hlen(ledger) == len({until for _size, until in records})
    assert await store.client.ttl(ledger) > TTL - 5
    buckets = await store.client.hgetall(ledger)
    assert {until: sum(int(size) for size, u in records if u == until)
            for _size, until in records} == {k: int(v) for k, v in buckets.items()}


async def test_a_key_holding_its_budget_stores_nothing_more(store: RedisStore) -> None:
    first = [message("msg_1", "x" * 100)]
    limited = budgeted(store, response_bytes(rid("1"), first) + 10)
    await limited.check_storage(TENANT)
    # Under the budget: admitted, even though this one takes the key past it.
    await limited.create_response(record(rid("1")), [message("msg_1", "x" * 200)], ttl=TTL,
                                  event_ttl=EVENT_TTL)
    held = await limited.stored_bytes(TENANT)
    with pytest.raises(QuotaExceeded) as refused:
        await limited.check_storage(TENANT)
    assert refused.value.status == 429 and refused.value.code == "insufficient_quota"
    budget = response_bytes(rid("1"), first) + 10
    assert f"storage budget ({budget} bytes; {held} bytes stored)" in refused.value.message
    with pytest.raises(QuotaExceeded):
        await limited.create_response(record(rid("2")), [message("msg_2", "q")], ttl=TTL,
                                      event_ttl=EVENT_TTL)
    # Refused whole: no record, no index entry, nothing counted.
    assert await store.get_response(TENANT, rid("2")) is None
    assert await store.client.exists(keys.item_location(TENANT, "msg_2", tag_of(rid("2")))) == 0
    assert await limited.stored_bytes(TENANT) == held
    # Other keys are not affected, and neither is the final write of a running response.
    await limited.create_response(record(rid("3"), tenant=OTHER), [], ttl=TTL,
                                  event_ttl=EVENT_TTL)
    done = await limited.finish_response(response(rid("1"), "completed"), None, tenant=TENANT,
                                         ttl=TTL,
                                         event_ttl=EVENT_TTL)
    assert done.changed
    # A delete frees the bytes: the key may store again.
    assert await limited.delete_response(TENANT, rid("1"))
    await limited.check_storage(TENANT)
    await limited.create_response(record(rid("4")), [], ttl=TTL, event_ttl=EVENT_TTL)


async def test_two_instances_cannot_both_take_the_last_bytes(store: RedisStore) -> None:
    # Ids of one shard tag on a cluster (`same_tag`): there the check and the count are one
    # script per tag, so creates racing under *different* tags may each take the last bytes
    # (docs/operations.md: may overshoot by one request, as the write that crosses the budget does).
    size = response_bytes(rid("0"), [message("msg", "x" * 50)])
    instances = [budgeted(store, size) for _ in range(2)]

    async def attempt(n: int) -> bool:
        try:
            await instances[n % 2].create_response(
                record(rid(n, like="0")), [message("msg", "x" * 50)], ttl=TTL,
                event_ttl=EVENT_TTL)
        except QuotaExceeded:
            return False
        return True

    admitted = await asyncio.gather(*(attempt(n) for n in range(8)))
    assert sum(admitted) == 1
    assert await instances[1].stored_bytes(TENANT) == size


async def test_no_budget_no_round_trip_for_the_check(store: RedisStore,
                                                     round_trips: RoundTrips) -> None:
    limited = budgeted(store, 10)
    await limited.check_storage(TENANT)  # its script loaded
    round_trips.reset()
    await store.check_storage(TENANT)  # the contract fixture's store has no budget
    assert round_trips.count == 0
    await limited.check_storage(TENANT, rechecked=True)
    # On a cluster the key's ledgers are read at most once a second (store/budget/ledgerview.py);
    # on one primary a key seen well inside its budget less than a second ago is not read
    # again before a create (store/budget/headroom.py): the read just before is still fresh.
    assert round_trips.count == 0


async def unseen(store: RedisStore, round_trips: RoundTrips) -> RedisStore:
    """One primary's store (a cluster reads its ledger view) that has seen nothing of the key
    yet, as after a quiet second, its read's script loaded; round trips counted from here."""
    if store.sharded:
        pytest.skip("one primary's read (a cluster reads its ledger view)")
    await budgeted(store, 10_000).check_storage(TENANT)  # its script loaded
    fresh = budgeted(store, 10_000)
    round_trips.reset()
    return fresh


async def test_a_burst_of_checks_of_one_key_reads_it_once(
        store: RedisStore, round_trips: RoundTrips) -> None:
    fresh = await unseen(store, round_trips)
    await asyncio.gather(*(fresh.check_storage(TENANT) for _ in range(32)))
    assert round_trips.count == 1


async def test_a_check_cancelled_mid_read_leaves_the_shared_read_to_the_others(
        store: RedisStore, round_trips: RoundTrips) -> None:
    fresh = await unseen(store, round_trips)
    first = asyncio.ensure_future(fresh.check_storage(TENANT))  # starts the shared read
    others = [asyncio.ensure_future(fresh.check_storage(TENANT)) for _ in range(4)]
    await asyncio.sleep(0)  # every check is waiting on the one read
    first.cancel()  # its client left
    await asyncio.gather(*others)  # answered by the read the cancelled check started
    assert first.cancelled() and round_trips.count == 1
    # The key's next burst reads again (nothing left of the finished read).
    assert not fresh._reading
    await asyncio.gather(*(fresh.check_storage(TENANT) for _ in range(3)))
    assert round_trips.count == 2 and not fresh._reading


async def test_a_failed_shared_read_fails_every_check_waiting_on_it(store: RedisStore) -> None:
    if store.sharded:
        pytest.skip("one primary's read (a cluster reads its ledger view)")
    fresh = budgeted(store, 10_000)

    async def down(tenant: str) -> int:
        await asyncio.sleep(0)
        raise StoreUnavailable("down")

    fresh.stored_bytes = down  # type: ignore[method-assign]
    results = await asyncio.gather(*(fresh.check_storage(TENANT) for _ in range(3)),
                                   return_exceptions=True)
    assert all(isinstance(result, StoreUnavailable) for result in results)


async def test_a_key_near_its_budget_is_checked_every_time_and_refused(
        store: RedisStore, round_trips: RoundTrips) -> None:
    if store.sharded:
        pytest.skip("one primary's headroom (a cluster reads its ledger view)")
    an_id = rid(901)
    size = response_bytes(an_id, [message("msg", "x" * 50)])
    limited = budgeted(store, size + 1)
    await limited.check_storage(TENANT)  # nothing held: seen well inside
    round_trips.reset()
    await limited.check_storage(TENANT, rechecked=True)
    assert round_trips.count == 0
    # A write that counts without refusing (a file's) always reads.
    await limited.check_storage(TENANT)
    assert round_trips.count == 1
    # Our own create leaves the key above 90% of its budget: from now on every check reads.
    await limited.create_response(record(an_id), [message("msg", "x" * 50)], ttl=TTL,
                                  event_ttl=EVENT_TTL)
    round_trips.reset()
    await limited.check_storage(TENANT, rechecked=True)
    assert round_trips.count == 1
    # Filled by another instance meanwhile: the next create is refused by its own script.
    other = budgeted(store, size + 1)
    await other.create_response(record(rid(902)), [message("msg", "x")], ttl=TTL,
                                event_ttl=EVENT_TTL)
    with pytest.raises(QuotaExceeded):
        await limited.check_storage(TENANT)
    with pytest.raises(QuotaExceeded):
        await limited.create_response(record(rid(903)), [message("msg", "x")], ttl=TTL,
                                      event_ttl=EVENT_TTL)


async def test_conversations_count_and_free_their_bytes(store: RedisStore) -> None:
    items = [message("msg_a", "a" * 300), message("msg_b", "b" * 40)]
    await store.create_conversation(TENANT, conversation(cid("1")), items, ttl=TTL)
    assert await store.stored_bytes(TENANT) == conversation_bytes(cid("1"), items)
    more = [message("msg_c", "c" * 700)]
    assert await store.add_conversation_items(TENANT, cid("1"), more, ttl=TTL)
    assert await store.stored_bytes(TENANT) == conversation_bytes(cid("1"), items + more)
    # An item appended again (a retried append) replaces its bytes, never adds them twice.
    assert await store.add_conversation_items(TENANT, cid("1"), more, ttl=TTL)
    assert await store.stored_bytes(TENANT) == conversation_bytes(cid("1"), items + more)
    assert await store.delete_conversation_item(TENANT, cid("1"), "msg_a")
    assert await store.stored_bytes(TENANT) == conversation_bytes(cid("1"), items[1:] + more)
    await store.update_conversation(TENANT, cid("1"), {"topic": "y"}, ttl=TTL)
    assert await store.stored_bytes(TENANT) == conversation_bytes(cid("1"), items[1:] + more)
    assert not await store.delete_conversation(OTHER, cid("1"))
    assert await store.delete_conversation(TENANT, cid("1"))
    assert await store.stored_bytes(TENANT) == 0


async def test_a_conversation_past_the_budget_takes_no_more_items(store: RedisStore) -> None:
    items = [message("msg_a", "a" * 300)]
    limited = budgeted(store, conversation_bytes(cid("1"), items))
    await limited.create_conversation(TENANT, conversation(cid("1")), items, ttl=TTL)
    with pytest.raises(QuotaExceeded):
        await limited.create_conversation(TENANT, conversation(cid("2")), [], ttl=TTL)
    assert await limited.get_conversation(TENANT, cid("2")) is None
    with pytest.raises(QuotaExceeded):
        await limited.add_conversation_items(TENANT, cid("1"), [message("msg_b", "b")],
                                             ttl=TTL)
    assert await limited.get_conversation_item(TENANT, cid("1"), "msg_b") is None
    # A turn's own append (its answer was generated) is counted, never refused.
    assert await limited.add_conversation_items(TENANT, cid("1"), [message("msg_c", "c")],
                                                ttl=TTL, bounded=False)
    assert await limited.stored_bytes(TENANT) == conversation_bytes(
        cid("1"), [*items, message("msg_c", "c")])


async def test_a_conversation_stored_before_the_ledger_is_counted_whole(
        store: RedisStore) -> None:
    items = [message("msg_a", "a" * 300)]
    await store.create_conversation(TENANT, conversation(cid("1")), items, ttl=TTL)
    # What a version without the ledger left behind: no count on the record, no ledger.
    await store.client.hdel(keys.conversation(cid("1")), keys.F_STORED_BYTES,
                            keys.F_STORED_UNTIL)
    await store.client.delete(keys.stored_bytes(TENANT, tag_of(cid("1"))))
    more = [message("msg_b", "b" * 10)]
    assert await store.add_conversation_items(TENANT, cid("1"), more, ttl=TTL)
    assert await store.stored_bytes(TENANT) == conversation_bytes(cid("1"), items + more)
