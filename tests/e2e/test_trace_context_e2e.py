"""With tracing off the proxy passes a client's W3C trace context on unchanged to the replica
(a non-participating intermediary, as W3C Trace Context asks), so vLLM still joins the
client's trace: the Responses path, the chat pass-through and a background job's worker call.
A malformed `traceparent` (or `tracestate`) is dropped, never forwarded verbatim."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.servers import ServerProcess, start_proxy

STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


@pytest.fixture(scope="module")
def untraced_proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url)  # no --otlp-endpoint: tracing off
    yield server
    server.stop()


def _sent(simulator: ServerProcess) -> dict[str, str]:
    headers: dict[str, str] = httpx.get(simulator.url + "/sim/stats",
                                        timeout=5).json()["last_headers"]
    return headers


def _ask(proxy: ServerProcess, path: str, headers: list[tuple[str, str]]) -> None:
    body: dict[str, object] = (
        {"model": "sim-model", "input": "hello", "stream": True} if path == "/v1/responses"
        else {"model": "sim-model", "messages": [{"role": "user", "content": "hello"}]})
    answer = httpx.post(proxy.url + path, headers=headers, json=body, timeout=30)
    assert answer.status_code == 200


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_tracing_off_the_clients_trace_context_goes_upstream_unchanged(
        untraced_proxy: ServerProcess, simulator: ServerProcess, path: str) -> None:
    parent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    _ask(untraced_proxy, path, [("traceparent", parent), ("tracestate", STATE)])
    sent = _sent(simulator)
    assert sent["traceparent"] == parent
    assert sent["tracestate"] == STATE


BAD_PARENTS = [
    "00-" + "A" * 32 + "-" + "b" * 16 + "-01",  # uppercase hex
    "00-" + "0" * 32 + "-" + "b" * 16 + "-01",  # an all-zero trace id
    "00-" + "a" * 32 + "-" + "0" * 16 + "-01",  # an all-zero parent id
    "ff-" + "a" * 32 + "-" + "b" * 16 + "-01",  # the forbidden version
    "00-" + "a" * 32 + "-" + "b" * 16 + "-01-extra",  # version 00 has four fields
    "00-" + "a" * 31 + "-" + "b" * 17 + "-01",  # misplaced dashes
    "00-" + "a" * 32 + "-" + "b" * 16 + "-01 x-evil: 1",  # something smuggled after it
    "garbage",
]


@pytest.mark.parametrize("value", BAD_PARENTS)
def test_a_malformed_traceparent_is_dropped_with_its_tracestate(
        untraced_proxy: ServerProcess, simulator: ServerProcess, value: str) -> None:
    good = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    _ask(untraced_proxy, "/v1/responses", [("traceparent", good), ("tracestate", STATE)])
    assert _sent(simulator)["traceparent"] == good  # the same proxy passes a valid one on
    _ask(untraced_proxy, "/v1/responses", [("traceparent", value), ("tracestate", STATE)])
    sent = _sent(simulator)
    assert "traceparent" not in sent and "tracestate" not in sent
    assert "x-evil" not in sent


def test_two_traceparents_are_dropped_and_a_bad_tracestate_alone_is(
        untraced_proxy: ServerProcess, simulator: ServerProcess) -> None:
    one = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    two = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00"
    _ask(untraced_proxy, "/v1/responses", [("traceparent", one), ("traceparent", two)])
    assert "traceparent" not in _sent(simulator)
    _ask(untraced_proxy, "/v1/responses", [("traceparent", one), ("tracestate", "no equals")])
    sent = _sent(simulator)
    assert sent["traceparent"] == one and "tracestate" not in sent
    # A list split over two headers is one list, joined.
    _ask(untraced_proxy, "/v1/responses", [("traceparent", one), ("tracestate", "a=1"),
                                           ("tracestate", "b=2")])
    assert _sent(simulator)["tracestate"] == "a=1,b=2"


def test_tracing_off_a_background_jobs_call_carries_the_clients_traceparent(
        untraced_proxy: ServerProcess, simulator: ServerProcess) -> None:
    parent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    answer = httpx.post(untraced_proxy.url + "/v1/responses", timeout=30,
                        headers={"traceparent": parent},
                        json={"model": "sim-model", "input": "later", "background": True})
    assert answer.status_code == 200
    response_id = answer.json()["id"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = httpx.get(f"{untraced_proxy.url}/v1/responses/{response_id}", timeout=5).json()
        if got["status"] == "completed":
            break
        time.sleep(0.05)
    assert got["status"] == "completed"
    assert _sent(simulator)["traceparent"] == parent
