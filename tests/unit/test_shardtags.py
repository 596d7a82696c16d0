"""Shard tags (core/shardtags.py), the keys they give (store/keys.py) and how an instance draws
them over a cluster's primaries (store/connection/shards.py)."""

from __future__ import annotations

import asyncio
import collections
import random

import pytest
from redis.asyncio.connection import Connection
from redis.crc import key_slot
from redis.exceptions import ClusterError

from proxy.core import ids as idp
from proxy.core.errors import StoreUnavailable
from proxy.core.shardtags import BUCKETS, SLOTS, TAGS, tag_of, tagged_id
from proxy.store import keys
from proxy.store.connection.failures import store_errors
from proxy.store.connection.shards import REGROUP_SECONDS, TAGS_PER_PRIMARY, ShardedIds

TENANT = "t" * 64


def test_one_tag_per_range_of_slots_each_hashing_where_redis_puts_it() -> None:
    assert len(set(TAGS)) == BUCKETS
    for bucket, tag in enumerate(TAGS):
        assert key_slot(f"x{{{tag}}}y".encode()) * BUCKETS // SLOTS == bucket


def test_an_id_carries_its_tag_and_only_known_tags_count() -> None:
    made = tagged_id("resp", TAGS[5])
    assert tag_of(made) == TAGS[5] and len(made.rsplit("_", 1)[1]) == 44  # 176 random bits
    assert tag_of(idp.new_id("resp")) is None  # every id made before Cluster support
    assert tag_of("resp_1") is None and tag_of("resp_nope_1") is None and tag_of("x") is None


def test_untagged_ids_keep_todays_keys() -> None:
    assert keys.response("resp_ab") == "rp:{resp_ab}"
    assert keys.response_log("resp_ab") == "rp:{resp_ab}:log"
    assert keys.conversation("conv_ab") == "cv:{conv_ab}"
    assert keys.stored_bytes(TENANT) == f"lim:{{{TENANT}}}:stored"
    assert keys.item_location(TENANT, "msg_1") == f"ix:{{{TENANT}:msg_1}}"
    assert keys.leases(None) == keys.LEASES


def test_every_key_a_tagged_response_writes_shares_one_slot() -> None:
    for tag in TAGS:
        rid, cid = tagged_id("resp", tag), tagged_id("conv", tag)
        written = [keys.response(rid), keys.response_input(rid), keys.response_log(rid),
                   keys.response_reaper(rid), keys.leases(tag), keys.stored_bytes(TENANT, tag),
                   keys.item_location(TENANT, "msg_1", tag), keys.conversation(cid),
                   keys.conversation_order(cid), keys.conversation_items(cid)]
        assert {key_slot(key.encode()) for key in written} == {key_slot(tag.encode())}


def test_a_responses_three_keys_at_once_are_the_three_keys() -> None:
    # The create and the final write take them together (keys.response_keys).
    for rid in ("resp_ab", idp.new_id("resp"), *(tagged_id("resp", tag) for tag in TAGS[:4])):
        assert keys.response_keys(rid, tag_of(rid)) == [
            keys.response(rid), keys.response_input(rid), keys.response_log(rid)]


def _owners(primaries: int) -> dict[str, str]:
    return {tag: f"node{n * primaries // BUCKETS}" for n, tag in enumerate(TAGS)}


def test_new_responses_spread_evenly_over_every_primary_from_a_few_tags() -> None:
    owners = _owners(3)
    ids = ShardedIds(lambda: owners, rng=random.Random(1))
    made = [ids(idp.RESPONSE) for _ in range(300)] + [ids(idp.CONVERSATION) for _ in range(30)]
    per_primary = collections.Counter(owners[str(tag_of(one))] for one in made)
    assert sorted(per_primary.values()) == [110, 110, 110]
    tags_used = {tag_of(one) for one in made}
    assert len(tags_used) == 3 * TAGS_PER_PRIMARY  # a flush: at most this many calls
    assert tag_of(ids(idp.MESSAGE)) is None  # only responses and conversations are tagged


def test_new_responses_follow_a_resharding_once_the_map_changes() -> None:
    owners = _owners(3)
    now = [0.0]
    ids = ShardedIds(lambda: dict(owners), clock=lambda: now[0], rng=random.Random(2))
    ids(idp.RESPONSE)
    # Every tag of node0 moves to a new fourth primary.
    kept = ids.groups()
    owners.update({tag: "node3" for tag, owner in owners.items() if owner == "node0"})
    now[0] += REGROUP_SECONDS
    made = [ids(idp.RESPONSE) for _ in range(300)]
    per_primary = collections.Counter(owners[str(tag_of(one))] for one in made)
    assert sorted(per_primary) == ["node1", "node2", "node3"]
    assert sorted(per_primary.values()) == [100, 100, 100]
    # The tags still on their primary are kept (live streams stay a call per primary).
    assert ids.groups()[:2] == kept[1:]


def test_before_the_map_is_known_any_tag_serves() -> None:
    ids = ShardedIds(dict, rng=random.Random(3))
    assert tag_of(ids(idp.RESPONSE)) in TAGS


def test_a_connection_the_cluster_client_closed_under_a_command_is_a_503_not_a_500() -> None:
    # What redis-py's cluster client raised under a failover and a resharding
    # (reliability/clusterfailover.py): a connection it recycled while a command was being
    # sent on it. Only from inside redis-py's connection code: ours stay bugs (500).
    async def send_on_closed() -> None:
        # The step that failed: the write on a connection whose writer a disconnect dropped.
        await Connection()._send_packed_command([b"PING"])

    with pytest.raises(StoreUnavailable), store_errors():
        asyncio.run(send_on_closed())
    with pytest.raises(AttributeError), store_errors():
        raise AttributeError("'NoneType' object has no attribute 'writelines'")
    with pytest.raises(RuntimeError, match="a bug"), store_errors():
        raise RuntimeError("a bug")
    with pytest.raises(StoreUnavailable), store_errors():
        raise ClusterError("TTL exhausted.")
