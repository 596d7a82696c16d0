"""Checks the topology e2e suites share (tests/e2e/test_sentinel_e2e.py, test_cluster_e2e.py):
the same state contract, whichever Redis topology the instances share."""

from __future__ import annotations

import time
from typing import Any

import httpx
from openai.types.responses import Response

from tests.conftest import SimControl
from tests.support import servers
from tests.support.clients import SDK
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


def sse(server: ServerProcess, key: str, method: str, path: str,
        **kwargs: Any) -> list[dict[str, Any]]:
    with httpx.stream(method, server.url + path, timeout=30,
                      headers={"authorization": f"Bearer {key}"}, **kwargs) as reply:
        assert reply.status_code == 200, reply.read()
        return data_payloads(b"".join(reply.iter_raw()))


def check_chain_across(a: ServerProcess, b: ServerProcess, key: str) -> Response:
    """Three turns of one chain, alternating instances; the first is returned."""
    first = SDK.get(a.url, key).responses.create(model="sim-model", input="turn one")
    second = SDK.get(b.url, key).responses.create(model="sim-model", input="turn two",
                                                  previous_response_id=first.id)
    third = SDK.get(a.url, key).responses.create(model="sim-model", input="turn three",
                                                 previous_response_id=second.id)
    assert third.status == "completed"
    items = SDK.get(b.url, key).responses.input_items.list(third.id)
    assert [i.content[0].text for i in items.data] == ["turn three"]  # type: ignore[union-attr]
    return first


def check_background_job_and_cancel(a: ServerProcess, b: ServerProcess, sim: SimControl,
                                    key: str) -> None:
    """A job queued on A runs on the worker and ends (read from B); a long one is cancelled
    from B while it streams, and its log ends `response.cancelled`."""
    auth = {"authorization": f"Bearer {key}"}
    job = SDK.get(a.url, key).responses.create(model="sim-model", input="in the back",
                                               background=True)
    done = servers.wait_status(b, job.id, TERMINAL, headers=auth)
    assert done["status"] == "completed"
    long = SDK.get(a.url, key).responses.create(
        model="sim-model", background=True, input="cancel me [[sim tokens=2000 delay_ms=20]]")
    servers.wait_status(b, long.id, {"in_progress"}, headers=auth)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sim.stats()["streams_started"] < 1:
        time.sleep(0.02)
    assert SDK.get(b.url, key).responses.cancel(long.id).status == "cancelled"
    events = sse(a, key, "GET", f"/v1/responses/{long.id}?stream=true")
    assert events[-1]["type"] == "response.cancelled"
    assert SDK.get(a.url, key).responses.retrieve(long.id).status == "cancelled"
