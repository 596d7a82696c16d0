"""No client-visible error and no unauthenticated endpoint names a replica's address,
against real `serve` processes with the simulator as the fleet: a replica that
answers 503, one that cuts the connection mid-stream, one that stalls, one that cannot be
reached; seen as an HTTP error body, a stream's `response.failed`, a WebSocket frame and a chat
stream's in-band error. The operator still finds the address in the log, by request id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.support.servers import ServerProcess, free_port, start_proxy
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

FAILURES = {"http": "[[sim fail=http:503]]", "cut": "[[sim tokens=8 fail=cut:3]]",
            "stall": "[[sim tokens=8 fail=stall:3]]"}


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--idle-timeout", "1", "--first-token-timeout", "1",
                         "--log-format", "text")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def unreachable() -> Iterator[ServerProcess]:
    server = start_proxy(f"http://127.0.0.1:{free_port()}", "--log-format", "text")
    yield server
    server.stop()


def addresses(server: ServerProcess, simulator: ServerProcess) -> list[str]:
    """What must not show: the replica's URL, host:port, host."""
    return [simulator.url, simulator.url.removeprefix("http://"), "127.0.0.1", "http://"]


def assert_private(text: str, words: list[str]) -> None:
    for word in words:
        assert word not in text, (word, text)


def create(http: httpx.Client, prompt: str, **extra: Any) -> httpx.Response:
    return http.post("/v1/responses", json={"model": "sim-model", "input": prompt, **extra},
                     headers={"x-request-id": "privacy-" + prompt[-12:-2].replace(" ", "-")
                              .replace(":", "-").replace("=", "-")})


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_http_and_stream_errors_name_no_replica(proxy: ServerProcess, simulator: ServerProcess,
                                                kind: str) -> None:
    words = addresses(proxy, simulator)
    prompt = "hello " + FAILURES[kind]
    with httpx.Client(base_url=proxy.url, timeout=60) as http:
        plain = create(http, prompt)
        assert plain.status_code >= 500 or plain.json()["status"] == "failed", plain.text
        assert_private(plain.text, words)
        streamed = create(http, prompt, stream=True)
        assert_private(streamed.text, words)
        if streamed.status_code == 200:
            last = data_payloads(streamed.text)[-1]
            assert last["type"] == "response.failed"
            assert last["response"]["error"]["message"]
        chat = http.post("/v1/chat/completions", json={
            "model": "sim-model", "stream": True,
            "messages": [{"role": "user", "content": prompt}]})
        assert_private(chat.text, words)
    # The operator's side: the log names the replica, next to the request's id.
    assert any(simulator.url in line and "privacy-" in line
               for line in proxy.full_output().splitlines()), proxy.full_output()[-3000:]


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_websocket_error_frames_name_no_replica(proxy: ServerProcess, simulator: ServerProcess,
                                                kind: str) -> None:
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, open_timeout=10, close_timeout=5) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model",
                            "input": "hello " + FAILURES[kind]}))
        frames = []
        for _ in range(200):
            frame = str(ws.recv(timeout=20))
            frames.append(frame)
            if json.loads(frame)["type"] in ("error", "response.failed"):
                break
        else:
            raise AssertionError("no error frame")
    assert_private("\n".join(frames), addresses(proxy, simulator))


def test_an_unreachable_replica_is_not_named(unreachable: ServerProcess) -> None:
    port = unreachable.full_output()  # the log names it; the client must not see it
    with httpx.Client(base_url=unreachable.url, timeout=60) as http:
        for reply in (create(http, "hello there!"), create(http, "hello there!", stream=True),
                      http.post("/v1/chat/completions", json={
                          "model": "sim-model", "messages": [{"role": "user", "content": "x"}]}),
                      http.get("/readyz"), http.get("/metrics")):
            assert_private(reply.text, ["127.0.0.1", "http://"])
    assert "127.0.0.1" in port


def test_public_endpoints_name_no_replica(proxy: ServerProcess,
                                          simulator: ServerProcess) -> None:
    with httpx.Client(base_url=proxy.url, timeout=60) as http:
        for path in ("/readyz", "/healthz", "/metrics", "/v1/models"):
            reply = http.get(path)
            assert reply.status_code == 200, (path, reply.text)
            assert_private(reply.text, addresses(proxy, simulator))
        assert 'replica="replica-1"' in http.get("/metrics").text
