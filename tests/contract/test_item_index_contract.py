"""`Store.find_items`: the items `item_reference` inputs name, resolved from the same tenant's
stored responses (their input and output items) in two round trips however many ids; run
against a real redis-server and the embedded store alike."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ResponseError

from proxy.core.shardtags import tag_of
from proxy.store import keys
from proxy.store.base import ResponseRecord
from proxy.store.redis import RedisStore
from tests.contract.conftest import RoundTrips
from tests.contract.tagged import rid
from tests.contract.test_store_contract import OTHER, TENANT, message, response

TTL = 3600


async def stored(store: RedisStore, an_id: str, inputs: list[dict[str, Any]],
                 outputs: list[dict[str, Any]], tenant: str = TENANT) -> None:
    await store.create_response(ResponseRecord(response(an_id), tenant), inputs, ttl=TTL,
                                event_ttl=60)
    await store.finish_response(response(an_id, "completed", output=outputs), None,
                                tenant=tenant, ttl=TTL, event_ttl=60)


async def test_input_and_output_items_are_found_by_id(store: RedisStore) -> None:
    question = message("msg_in", "hi")
    answer = message("msg_out", "hello", role="assistant")
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [], "content": []}
    await stored(store, rid("1"), [question], [reasoning, answer])
    found = await store.find_items(TENANT, ["msg_out", "rs_1", "msg_in", "msg_nope"])
    assert found == {"msg_out": answer, "rs_1": reasoning, "msg_in": question}


async def test_another_tenant_finds_nothing(store: RedisStore) -> None:
    await stored(store, rid("1"), [message("msg_in", "hi")],
                 [message("msg_out", "x", role="assistant")])
    assert await store.find_items(OTHER, ["msg_in", "msg_out"]) == {}


async def test_another_keys_item_with_the_same_id_neither_blocks_nor_shows(
        store: RedisStore) -> None:
    # The other key stores the (client-chosen) id first: it squats nothing.
    await stored(store, rid("2"), [message("msg_mine", "theirs")], [], tenant=OTHER)
    await stored(store, rid("1"), [message("msg_mine", "mine")],
                 [message("msg_out", "answer", role="assistant")])
    # ...and a later one of its own cannot move mine either.
    await stored(store, rid("3"), [message("msg_out", "theirs")], [], tenant=OTHER)
    assert await store.find_items(TENANT, ["msg_mine", "msg_out"]) == {
        "msg_mine": message("msg_mine", "mine"),
        "msg_out": message("msg_out", "answer", role="assistant")}
    assert await store.find_items(OTHER, ["msg_mine", "msg_out"]) == {
        "msg_mine": message("msg_mine", "theirs"), "msg_out": message("msg_out", "theirs")}


async def test_an_id_only_another_key_uses_looks_unknown(store: RedisStore,
                                                        round_trips: RoundTrips) -> None:
    await stored(store, rid("1"), [message("msg_theirs", "secret")],
                 [message("msg_answer", "x", role="assistant")], tenant=OTHER)
    round_trips.reset()
    assert await store.find_items(TENANT, ["msg_theirs", "msg_answer"]) == {}
    # The same work as for an id nobody uses: nothing, not even timing, tells them apart.
    assert round_trips.count == 1
    theirs = keys.item_location(TENANT, "msg_theirs", tag_of(rid("1")))
    assert await store.client.exists(theirs) == 0


async def test_entries_of_the_global_index_resolve_for_their_owner_only(
        store: RedisStore) -> None:
    if store.sharded:
        pytest.skip("no version before the per-key index ran on a cluster: nothing global to read")
    # Written by a version before the index was per key (`it:{<id>}`): still read until they
    # expire, for the key whose response holds the item, and only for it.
    await stored(store, rid("1"), [message("msg_old_in", "q")],
                 [message("msg_old_out", "a", role="assistant")])
    for item_id, where in (("msg_old_in", "i"), ("msg_old_out", "o")):
        await store.client.delete(keys.item_location(TENANT, item_id))
        await store.client.set(keys.legacy_item_location(item_id), f"{where}:resp_1", ex=TTL)
    assert sorted(await store.find_items(TENANT, ["msg_old_in", "msg_old_out"])) == [
        "msg_old_in", "msg_old_out"]
    assert await store.find_items(OTHER, ["msg_old_in", "msg_old_out"]) == {}
    # A scoped entry wins over a global one.
    await stored(store, rid("2"), [message("msg_old_in", "newer")], [])
    await store.client.set(keys.legacy_item_location("msg_old_in"), "i:resp_1", ex=TTL)
    assert await store.find_items(TENANT, ["msg_old_in"]) == {
        "msg_old_in": message("msg_old_in", "newer")}


async def test_a_deleted_response_holds_nothing_and_entries_expire_with_it(
        store: RedisStore) -> None:
    await stored(store, rid("1"), [message("msg_in", "hi")],
                 [message("msg_out", "x", role="assistant")])
    for item_id in ("msg_out", "msg_in"):
        entry = keys.item_location(TENANT, item_id, tag_of(rid("1")))
        assert 0 < await store.client.ttl(entry) <= TTL
    assert await store.delete_response(TENANT, rid("1"))
    assert await store.find_items(TENANT, ["msg_in", "msg_out"]) == {}


async def test_two_round_trips_for_any_number_of_ids(store: RedisStore,
                                                     round_trips: RoundTrips) -> None:
    for n in range(5):
        await stored(store, rid(n), [message(f"msg_in{n}", "q")],
                     [message(f"msg_out{n}", "a", role="assistant")])
    ids = [f"msg_{kind}{n}" for n in range(5) for kind in ("in", "out")]
    round_trips.reset()
    found = await store.find_items(TENANT, ids)
    assert sorted(found) == sorted(ids)
    assert round_trips.count == 2
    round_trips.reset()
    assert await store.find_items(TENANT, ["msg_unknown"]) == {}
    assert round_trips.count == 1


async def test_storing_with_items_still_takes_one_round_trip(store: RedisStore,
                                                             round_trips: RoundTrips) -> None:
    await stored(store, rid("0"), [message("msg_a", "q")], [])  # scripts loaded
    round_trips.reset()
    await store.create_response(ResponseRecord(response(rid("1")), TENANT),
                                [message("msg_b", "q"), message("msg_c", "q")], ttl=TTL,
                                event_ttl=60)
    await store.finish_response(
        response(rid("1"), "completed", output=[message("msg_d", "a", role="assistant")]),
        None, tenant=TENANT, ttl=TTL, event_ttl=60)
    assert round_trips.count == 2


async def test_a_server_that_lost_its_scripts_still_stores_and_indexes(store: RedisStore) -> None:
    await stored(store, rid("0"), [message("msg_a", "q")], [])
    await store.client.script_flush()  # what a restarted server looks like
    await stored(store, rid("1"), [message("msg_b", "q")],
                 [message("msg_c", "a", role="assistant")])
    assert sorted(await store.find_items(TENANT, ["msg_b", "msg_c"])) == ["msg_b", "msg_c"]
    record = await store.get_response(TENANT, rid("1"))
    assert record is not None and record.status == "completed"


async def test_a_refused_final_write_indexes_nothing(store: RedisStore) -> None:
    await stored(store, rid("1"), [], [message("msg_kept", "a", role="assistant")])
    # A second, late final write (say after a cancel had ended it) is refused whole: its items
    # are not the stored response's, so no index entry may point there.
    late = await store.finish_response(
        response(rid("1"), "completed", output=[message("msg_late", "b", role="assistant")]),
        None, tenant=TENANT, ttl=TTL, event_ttl=60)
    assert not late.changed
    assert await store.client.exists(keys.item_location(TENANT, "msg_late", tag_of(rid("1")))) == 0
    assert sorted(await store.find_items(TENANT, ["msg_kept", "msg_late"])) == ["msg_kept"]


async def test_a_failed_create_indexes_nothing(store: RedisStore) -> None:
    await store.client.set(keys.response(rid("bad")), "not a hash")  # its HSET fails
    with pytest.raises(ResponseError):
        await store.create_response(ResponseRecord(response(rid("bad")), TENANT),
                                    [message("msg_orphan", "q")], ttl=TTL, event_ttl=60)
    assert await store.client.exists(keys.item_location(TENANT, "msg_orphan",
                                                  tag_of(rid("bad")))) == 0
