"""Bounds on streams, over real sockets: a client that stops
reading is abandoned after `--send-timeout` and its upstream aborted; a client that leaves a
non-streamed pass-through call aborts the upstream; a stream's first token has a budget of its
own (`--first-token-timeout`), an HTTP 504 before any byte reached the client and
`response.failed` after; pass-through streams carry pings the openai SDK skips.

Every wait polls the simulator's counters with a deadline: a broken bound fails the test at the
deadline, it never hangs it. No assertion is on speed.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.conftest import SimControl
from tests.support.servers import ServerProcess, start_proxy, wait_for
from tests.support.sse import data_payloads, frames, mask

pytestmark = pytest.mark.e2e

# A long answer (~20 MB of chat frames, nominally 10 s): a client that stops reading fills the
# proxy's socket to it (a few MB) within moments, while the simulator still has most of the
# answer to send. Paced rather than all at once: loopback receive buffers grow to tens of MB,
# so an unpaced answer would be absorbed whole before any bound could act.
FLOOD = "[[sim tokens=100000 delay_ms=0.1]]"


@pytest.fixture(scope="module")
def bounded(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--first-token-timeout", "1", "--idle-timeout", "30",
                         "--ping-interval", "0.2")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def impatient(simulator: ServerProcess) -> Iterator[ServerProcess]:
    """Writes to a client may block 1 s (the first-token budget stays at its default: building
    a long answer takes the simulator a while)."""
    server = start_proxy(simulator.url, "--send-timeout", "1")
    yield server
    server.stop()



def raw_request(port: int, path: str, body: dict[str, Any]) -> socket.socket:
    """A client with a tiny receive buffer that sends a request and then never reads."""
    data = orjson.dumps(body)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"POST %s HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    return sock


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "messages": [{"role": "user", "content": text}], **extra}


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", chat(f"flood {FLOOD}", stream=True)),
    ("/v1/responses", {"model": "sim-model", "input": f"flood {FLOOD}", "stream": True,
                       "store": False}),
], ids=["passthrough", "responses"])
def test_a_client_that_stops_reading_is_abandoned_and_the_upstream_aborted(
        impatient: ServerProcess, sim: SimControl, path: str, body: dict[str, Any]) -> None:
    def over(stats: dict[str, Any]) -> bool:
        return bool(stats["active_streams"] == 0 and stats["streams_started"] == 1)

    sock = raw_request(impatient.port, path, body)
    try:
        # One snapshot per look: two reads can see no stream active yet, then one started.
        ended = wait_for(lambda: over(sim.stats()), within=30)
        stats = sim.stats()
        assert ended and stats["streams_aborted"] == 1, stats  # not completed: cut short
        assert "client stopped reading" in impatient.output()
    finally:
        sock.close()


def test_a_client_that_leaves_a_non_streamed_passthrough_aborts_the_upstream(
        bounded: ServerProcess, sim: SimControl) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(bounded.url + "/v1/chat/completions",
                   json=chat("slow [[sim ttft_ms=20000]]"), timeout=0.5)
    assert wait_for(lambda: sim.stats()["completions_aborted"] >= 1, within=10), sim.stats()


def test_no_first_token_in_time_is_a_504_on_a_passthrough_stream(
        bounded: ServerProcess, sim: SimControl) -> None:
    response = httpx.post(bounded.url + "/v1/chat/completions",
                          json=chat("queued [[sim ttft_ms=5000]]", stream=True), timeout=10)
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["code"] == "upstream_timeout" and set(error) == {"message", "type", "param",
                                                                   "code"}
    assert wait_for(lambda: sim.stats()["streams_aborted"] >= 1, within=5), sim.stats()


def test_no_first_token_in_time_fails_a_started_responses_stream(
        bounded: ServerProcess, sim: SimControl) -> None:
    with httpx.stream("POST", bounded.url + "/v1/responses", timeout=10, json={
            "model": "sim-model", "input": "queued [[sim ttft_ms=5000]]", "stream": True,
            "store": False}) as response:
        assert response.status_code == 200
        events = [orjson.loads(f["data"]) for f in frames(response.read())]
    assert [e["type"] for e in events][:1] == ["response.created"]
    assert events[-1]["type"] == "response.failed"
    assert wait_for(lambda: sim.stats()["streams_aborted"] >= 1, within=5), sim.stats()


def test_the_first_token_budget_is_not_the_gap_between_tokens(
        bounded: ServerProcess, sim: SimControl) -> None:
    """Gaps longer than the first-token budget after the first token are bounded by
    `--idle-timeout` only; non-streamed calls by `--first-byte-timeout` only."""
    body = chat("two slow tokens [[sim tokens=2 delay_ms=1500]]", stream=True)
    payloads = data_payloads(httpx.post(bounded.url + "/v1/chat/completions", json=body,
                                        timeout=10).content)
    assert payloads[-1] == "[DONE]"
    assert [p["choices"][0]["finish_reason"] for p in payloads[:-1] if p["choices"]][-1] == \
        "stop"
    whole = httpx.post(bounded.url + "/v1/chat/completions",
                       json=chat("slow start [[sim ttft_ms=1500 tokens=2]]"), timeout=10)
    assert whole.status_code == 200 and whole.json()["choices"][0]["finish_reason"] == "stop"


def test_pings_in_a_passthrough_stream_are_harmless_to_the_sdk(
        simulator: ServerProcess, bounded: ServerProcess) -> None:
    body = chat("slow enough for pings [[sim tokens=3 delay_ms=500]]", stream=True)
    raw = httpx.post(bounded.url + "/v1/chat/completions", json=body, timeout=10).content
    assert b": ping\n\n" in raw  # the pings are there ...
    direct = data_payloads(httpx.post(simulator.url + "/v1/chat/completions", json=body,
                                      timeout=10).content)
    assert mask(data_payloads(raw)) == mask(direct)  # ... and the data lines chunk for chunk

    def sdk(url: str) -> list[Any]:
        with openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
            stream = client.chat.completions.create(
                model="sim-model", messages=body["messages"], stream=True)
            return [chunk.model_dump() for chunk in stream]

    assert mask(sdk(bounded.url)) == mask(sdk(simulator.url))
