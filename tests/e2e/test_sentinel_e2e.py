"""Two proxy instances and a worker process behind Sentinel (`redis+sentinel://`, the session's
primary + replica + 3 sentinels: tests/support/sentinel.py): the same state contract as on one
primary. A stored stream on A replayed from B, a chain and a conversation across the two, a
background job run by the worker and a cancel, cache hits and a per-key limit shared by both.
The failover under load is a `make chaos` row (reliability/failover.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conftest import SimControl
from tests.support import topology_e2e
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.sentinel import SentinelGroup
from tests.support.servers import ServerProcess
from tests.support.topology_e2e import check_background_job_and_cancel

pytestmark = pytest.mark.e2e

KEY = "sk-sentinel"
RPM_KEY = "sk-sentinel-rpm"
AUTH = {"authorization": f"Bearer {KEY}"}
TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


@pytest.fixture(scope="module")
def trio(simulator: ServerProcess, sentinel_group: SentinelGroup,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[ServerProcess, ServerProcess]]:
    url = sentinel_group.url()
    keys = topology_e2e.keys_file(tmp_path_factory.mktemp("sentinel") / "keys.json", KEY, RPM_KEY)
    with topology_e2e.trio(simulator.url, url, keys) as pair:
        yield pair


def sse(server: ServerProcess, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
    return topology_e2e.sse(server, KEY, method, path, **kwargs)


def sdk(server: ServerProcess) -> openai.OpenAI:
    return SDK.get(server.url, KEY)


def test_a_stored_stream_on_a_replays_from_b(trio: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = trio
    live = sse(a, "POST", "/v1/responses",
               json={"model": "sim-model", "input": "behind sentinel", "stream": True})
    check_stream(live)
    rid = live[0]["response"]["id"]
    assert sse(b, "GET", f"/v1/responses/{rid}?stream=true") == live
    assert sdk(b).responses.retrieve(rid).to_dict() == live[-1]["response"]


def test_a_chain_across_the_instances(trio: tuple[ServerProcess, ServerProcess]) -> None:
    topology_e2e.check_chain_across(*trio, KEY)


def test_a_background_job_runs_on_the_worker_and_another_is_cancelled(
        trio: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    check_background_job_and_cancel(*trio, sim, KEY)


def test_a_conversation_across_the_instances(trio: tuple[ServerProcess, ServerProcess]) -> None:
    topology_e2e.check_conversation_across(*trio, KEY)


def test_a_cache_entry_written_by_a_serves_b(trio: tuple[ServerProcess, ServerProcess],
                                             sim: SimControl) -> None:
    topology_e2e.check_cache_shared(*trio, KEY, sim, "cached behind sentinel")


def test_an_rpm_limit_holds_across_both_instances(
        trio: tuple[ServerProcess, ServerProcess]) -> None:
    topology_e2e.check_rpm_shared(*trio, RPM_KEY)
