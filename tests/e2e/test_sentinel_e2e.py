"""Two proxy instances and a worker process behind Sentinel (`redis+sentinel://`, the session's
primary + replica + 3 sentinels: tests/support/sentinel.py): the same state contract as on one
primary. A stored stream on A replayed from B, a chain across the two, a background job run by
the worker, and a cancel. The failover under load is `test_sentinel_failover_e2e.py`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import SimControl
from tests.support import servers
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.sentinel import SentinelGroup
from tests.support.servers import ServerProcess, start_proxy, start_worker
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

KEY = "sk-sentinel"
AUTH = {"authorization": f"Bearer {KEY}"}
TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


@pytest.fixture(scope="module")
def trio(simulator: ServerProcess, sentinel_group: SentinelGroup) -> Iterator[
        tuple[ServerProcess, ServerProcess]]:
    url = sentinel_group.url()
    a = start_proxy(simulator.url, "--no-worker", redis_url=url)
    b = start_proxy(simulator.url, "--no-worker", redis_url=url)
    worker = start_worker(simulator.url, url, "--heartbeat-interval", "0.5")
    yield a, b
    for server in (a, b, worker):
        server.stop()


def sse(server: ServerProcess, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
    with httpx.stream(method, server.url + path, headers=AUTH, timeout=30, **kwargs) as reply:
        assert reply.status_code == 200, reply.read()
        return data_payloads(b"".join(reply.iter_raw()))


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
    a, b = trio
    first = sdk(a).responses.create(model="sim-model", input="turn one")
    second = sdk(b).responses.create(model="sim-model", input="turn two",
                                     previous_response_id=first.id)
    third = sdk(a).responses.create(model="sim-model", input="turn three",
                                    previous_response_id=second.id)
    assert third.status == "completed"
    items = sdk(b).responses.input_items.list(third.id)
    assert [i.content[0].text for i in items.data] == ["turn three"]  # type: ignore[union-attr]


def test_a_background_job_runs_on_the_worker_and_another_is_cancelled(
        trio: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = trio
    job = sdk(a).responses.create(model="sim-model", input="in the back", background=True)
    done = servers.wait_status(b, job.id, TERMINAL, headers=AUTH)
    assert done["status"] == "completed"
    long = sdk(a).responses.create(model="sim-model", background=True,
                                   input="cancel me [[sim tokens=2000 delay_ms=20]]")
    servers.wait_status(b, long.id, {"in_progress"}, headers=AUTH)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sim.stats()["streams_started"] < 1:
        time.sleep(0.02)
    assert sdk(b).responses.cancel(long.id).status == "cancelled"
    events = sse(a, "GET", f"/v1/responses/{long.id}?stream=true")
    assert events[-1]["type"] == "response.cancelled"
    assert sdk(a).responses.retrieve(long.id).status == "cancelled"
