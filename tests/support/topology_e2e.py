"""Checks the topology e2e suites share (tests/e2e/test_sentinel_e2e.py, test_cluster_e2e.py):
the same state contract, whichever Redis topology the instances share."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
from openai.types.responses import Response

from tests.conftest import SimControl
from tests.support import servers
from tests.support.clients import SDK
from tests.support.servers import ServerProcess
from tests.support.sse import data_payloads

RPM = 3  # the limit of the rpm key `keys_file` writes


def keys_file(path: Any, key: str, rpm_key: str) -> Any:
    """A keys file with `key` (no limits) and `rpm_key` (RPM requests a minute), at `path`."""
    path.write_text(json.dumps({"keys": [{"key": key, "name": "team"},
                                         {"key": rpm_key, "name": "rpm-team", "rpm": RPM}]}))
    return path

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


def sse(server: ServerProcess, key: str, method: str, path: str,
        **kwargs: Any) -> list[dict[str, Any]]:
    with httpx.stream(method, server.url + path, timeout=30,
                      headers={"authorization": f"Bearer {key}"}, **kwargs) as reply:
        assert reply.status_code == 200, reply.read()
        return data_payloads(b"".join(reply.iter_raw()))


@contextlib.contextmanager
def trio(upstream: str, redis_url: str, keys: Any) -> Iterator[tuple[ServerProcess,
                                                                      ServerProcess]]:
    """Two instances (exact cache, the keys file `keys`) and a worker process on one Redis
    topology; the two instances are yielded, all three stopped after."""
    flags = ("--no-worker", "--keys-file", str(keys), "--cache", "exact")
    a = servers.start_proxy(upstream, *flags, redis_url=redis_url)
    b = servers.start_proxy(upstream, *flags, redis_url=redis_url)
    worker = servers.start_worker(upstream, redis_url, "--heartbeat-interval", "0.5",
                                  "--keys-file", str(keys))
    try:
        yield a, b
    finally:
        for server in (a, b, worker):
            server.stop()


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


def check_conversation_across(a: ServerProcess, b: ServerProcess, key: str) -> str:
    """A conversation made on A, turns on B and A, its items read from B; its id."""
    conv = SDK.get(a.url, key).conversations.create(items=[
        {"type": "message", "role": "user", "content": "remember: blue"}])
    SDK.get(b.url, key).responses.create(model="sim-model", input="what colour?",
                                         conversation=conv.id)
    SDK.get(a.url, key).responses.create(model="sim-model", input="and again?",
                                         conversation=conv.id)
    items = SDK.get(b.url, key).conversations.items.list(conv.id, order="asc")
    assert len(items.data) == 5  # the first item, then two turns of two
    assert SDK.get(a.url, key).conversations.delete(conv.id).deleted
    return conv.id


def check_cache_shared(a: ServerProcess, b: ServerProcess, key: str, sim: SimControl,
                       text: str) -> None:
    """An answer A cached (`--cache exact`) serves B, without another upstream call."""
    first = SDK.get(a.url, key).responses.with_raw_response.create(
        model="sim-model", store=False, input=text)
    assert first.headers["x-proxy-cache"] == "miss"
    calls = sim.stats()["chat_requests"]
    deadline = time.monotonic() + 5
    while True:  # the write runs after the answer
        hit = SDK.get(b.url, key).responses.with_raw_response.create(
            model="sim-model", store=False, input=text)
        if hit.headers["x-proxy-cache"] == "hit" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert hit.headers["x-proxy-cache"] == "hit"
    assert hit.parse().output_text == first.parse().output_text
    assert sim.stats()["chat_requests"] <= calls + 1


def check_rpm_shared(a: ServerProcess, b: ServerProcess, rpm_key: str) -> None:
    """`rpm_key`'s limit (RPM a minute) counts the requests of both instances together."""
    body = {"model": "sim-model", "input": "count me", "store": False}

    def five() -> list[int]:
        return [httpx.post(server.url + "/v1/responses", json=body, timeout=30,
                           headers={"authorization": f"Bearer {rpm_key}"}).status_code
                for server in (a, b, a, b, a)]

    codes = five()
    if codes.count(429) != 5 - RPM:  # a minute boundary passed between them: once more
        codes = five()
    assert sorted(codes) == [200] * RPM + [429] * (5 - RPM)
