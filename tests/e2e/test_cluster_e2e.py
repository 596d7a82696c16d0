"""Two proxy instances and a worker process on a Redis Cluster (`redis+cluster://`, the session's
6 nodes: tests/support/cluster.py): the same state contract as on one primary. Stored streams on
A replayed from B, a chain and a conversation across the two, background jobs on the worker and
a cancel, cache hits and per-key limits shared by both instances; and the stored responses'
keys land on every primary (shard tags drawn from the slot map, store/connection/shards.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import redis
from redis.cluster import RedisCluster

from proxy.core.shardtags import tag_of
from tests.conftest import SimControl
from tests.support import topology_e2e
from tests.support.clients import SDK
from tests.support.cluster import RedisClusterGroup
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess
from tests.support.topology_e2e import check_background_job_and_cancel

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

KEY = "sk-cluster"
AUTH = {"authorization": f"Bearer {KEY}"}
TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


@pytest.fixture(scope="module")
def trio(simulator: ServerProcess, redis_cluster: RedisClusterGroup,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess,
                                                                     ServerProcess]]:
    redis_cluster.flush()
    path: Path = topology_e2e.keys_file(tmp_path_factory.mktemp("cluster") / "keys.json",
                                        KEY, "sk-cluster-rpm")
    with topology_e2e.trio(simulator.url, redis_cluster.url(), path) as pair:
        yield pair


def sdk(server: ServerProcess) -> openai.OpenAI:
    return SDK.get(server.url, KEY)


def test_stored_streams_on_a_replay_from_b_and_spread_over_every_primary(
        trio: tuple[ServerProcess, ServerProcess], redis_cluster: RedisClusterGroup) -> None:
    a, b = trio
    ids = []
    for n in range(12):
        live = topology_e2e.sse(a, KEY, "POST", "/v1/responses",
                   json={"model": "sim-model", "input": f"on the cluster {n}", "stream": True})
        check_stream(live)
        rid = live[0]["response"]["id"]
        assert tag_of(rid) is not None
        assert topology_e2e.sse(b, KEY, "GET", f"/v1/responses/{rid}?stream=true") == live
        assert sdk(b).responses.retrieve(rid).to_dict() == live[-1]["response"]
        ids.append(rid)
    seeds = [redis.cluster.ClusterNode("127.0.0.1", n.port) for n in redis_cluster.nodes[:3]]
    with RedisCluster(startup_nodes=seeds) as client:
        owners = {client.get_node_from_key(f"rp:{{{tag_of(rid)}}}").name for rid in ids}
    assert len(owners) == 3  # round-robin over the primaries, not hash luck


def test_a_chain_across_the_instances(trio: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = trio
    first = topology_e2e.check_chain_across(a, b, KEY)
    # An item of another response, by reference (the item index, read over every tag).
    ref = sdk(b).responses.create(model="sim-model", input=[
        {"type": "item_reference", "id": first.output[0].id}])
    assert ref.status == "completed"


def test_a_conversation_across_the_instances(
        trio: tuple[ServerProcess, ServerProcess]) -> None:
    assert tag_of(topology_e2e.check_conversation_across(*trio, KEY)) is not None


def test_a_background_job_runs_on_the_worker_and_another_is_cancelled(
        trio: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    check_background_job_and_cancel(*trio, sim, KEY)


def test_a_cache_entry_written_by_a_serves_b(trio: tuple[ServerProcess, ServerProcess],
                                             sim: SimControl) -> None:
    topology_e2e.check_cache_shared(*trio, KEY, sim, "cached on the cluster")


def test_an_rpm_limit_holds_across_both_instances(
        trio: tuple[ServerProcess, ServerProcess]) -> None:
    topology_e2e.check_rpm_shared(*trio, "sk-cluster-rpm")
