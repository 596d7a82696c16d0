"""nginx in front of two instances and a worker, with the config we ship.

Three nginx processes render deploy/nginx/responses-proxy.conf for loopback ports: `edge` round
robin over both instances (as deployed), `edge_a` and `edge_b` with one instance each, so a test
can pin each request to the instance it needs. The instances run `--no-worker`; background jobs
run on the separate worker. nginx's access log (the shipped format) says which instance served.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import SimControl
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.servers import (
    NginxServer,
    ServerProcess,
    free_port,
    start_nginx,
    start_proxy,
    start_worker,
)
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

KEY = "sk-nginx-tenant"


@dataclass
class Stack:
    a: ServerProcess
    b: ServerProcess
    edge: NginxServer  # round robin over a and b
    edge_a: NginxServer  # only a
    edge_b: NginxServer  # only b


@pytest.fixture(scope="module")
def stack(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[Stack]:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    started: list[ServerProcess] = []
    try:
        a = start_proxy(simulator.url, "--no-worker", "--api-key", KEY, redis_url=url)
        started.append(a)
        b = start_proxy(simulator.url, "--no-worker", "--api-key", KEY, redis_url=url)
        started.append(b)
        started.append(start_worker(simulator.url, url))
        edges = []
        for upstreams in ([a.url, b.url], [a.url], [b.url]):
            edges.append(start_nginx(upstreams))
            started.append(edges[-1])
        yield Stack(a, b, *edges)
    finally:
        for server in reversed(started):
            server.stop()


def sdk(edge: ServerProcess) -> openai.OpenAI:
    return SDK.get(edge.url, KEY)


AUTH = {"authorization": f"Bearer {KEY}"}


def address(server: ServerProcess) -> str:
    return f"127.0.0.1:{server.port}"


def upstream_of(edge: NginxServer, request_id: str) -> str:
    """The instance nginx sent `request_id` to, from the shipped access-log format."""
    for _ in range(50):  # a stream's line is written when it ends: bounded wait for it
        for line in edge.access_log():
            if line.endswith(f"request_id={request_id}"):
                return line.split(" upstream=", 1)[1].split(" ", 1)[0]
        time.sleep(0.05)
    raise AssertionError(f"{request_id} not in nginx's access log: {edge.access_log()[-5:]}")


def sse(edge: ServerProcess, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
    with httpx.stream(method, edge.url + path, headers=AUTH, timeout=60, **kwargs) as response:
        assert response.status_code == 200, response.read()
        return data_payloads(b"".join(response.iter_raw()))


class EventReader:
    """An SSE stream read frame by frame, each `data:` payload with its arrival time."""

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.iter_raw()
        self._buffer = b""
        self.events: list[tuple[float, dict[str, Any]]] = []

    def next(self) -> dict[str, Any] | None:
        while b"\n\n" not in self._buffer:
            chunk = next(self._chunks, None)
            if chunk is None:
                return None
            self._buffer += chunk
        frame, self._buffer = self._buffer.split(b"\n\n", 1)
        payloads = data_payloads(frame + b"\n\n")
        if not payloads:  # a ping comment
            return self.next()
        event: dict[str, Any] = payloads[0]
        self.events.append((time.monotonic(), event))
        return event

    def until(self, event_type: str, limit: int = 10_000) -> dict[str, Any]:
        for _ in range(limit):
            event = self.next()
            assert event is not None, f"the stream ended before {event_type}"
            if event["type"] == event_type:
                return event
        raise AssertionError(f"no {event_type} in {limit} events")

    def rest(self, limit: int = 10_000) -> list[dict[str, Any]]:
        for _ in range(limit):
            if self.next() is None:
                break
        return [event for _, event in self.events]


def test_round_robin_spreads_requests_over_both_instances(stack: Stack) -> None:
    ids = []
    for n in range(6):
        response = httpx.post(stack.edge.url + "/v1/responses", headers=AUTH, timeout=30,
                              json={"model": "sim-model", "input": f"spread {n}",
                                    "store": False})
        assert response.status_code == 200, response.text
        ids.append(response.headers["x-request-id"])
    served = [upstream_of(stack.edge, request_id) for request_id in ids]
    assert set(served) == {address(stack.a), address(stack.b)}
    # nginx's request id (32 hex) is the instance's request id: one id in both logs.
    assert all(len(request_id) == 32 for request_id in ids)
    for request_id, upstream in zip(ids, served, strict=True):
        instance = stack.a if upstream == address(stack.a) else stack.b
        other = stack.b if instance is stack.a else stack.a
        assert _logged(instance, request_id)
        assert request_id not in other.full_output()


def _logged(server: ServerProcess, request_id: str) -> bool:
    """The instance's access-log line is written just after the answer: a bounded wait."""
    for _ in range(50):
        if request_id in server.full_output():
            return True
        time.sleep(0.05)
    return False


def test_pinned_edges_reach_their_own_instance(stack: Stack) -> None:
    for edge, instance in ((stack.edge_a, stack.a), (stack.edge_b, stack.b)):
        response = httpx.get(edge.url + "/v1/models", headers={**AUTH, "x-request-id": "pin-1"},
                             timeout=10)
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "pin-1"  # the client's own id is kept
        assert upstream_of(edge, "pin-1") == address(instance)


def test_replay_with_starting_after_lands_on_the_other_instance(stack: Stack) -> None:
    live = [e.to_dict() for e in sdk(stack.edge_a).responses.create(
        model="sim-model", input="[[sim tokens=12]] replay me", stream=True)]
    check_stream(live)
    response_id = live[0]["response"]["id"]
    replayed = [e.to_dict() for e in sdk(stack.edge_b).responses.retrieve(
        response_id, stream=True, starting_after=3)]
    assert replayed == live[4:]
    assert replayed[0]["sequence_number"] == 4
    assert replayed[-1]["type"] == "response.completed"


def test_live_tail_on_one_instance_while_the_other_streams(stack: Stack) -> None:
    body = {"model": "sim-model", "input": "[[sim delay_ms=60 tokens=40]] tail me",
            "stream": True}
    with httpx.stream("POST", stack.edge_a.url + "/v1/responses", json=body, headers=AUTH,
                      timeout=60) as live_response:
        live = EventReader(live_response)
        response_id = live.until("response.created")["response"]["id"]
        live.until("response.output_text.delta")
        with httpx.stream("GET", f"{stack.edge_b.url}/v1/responses/{response_id}?stream=true",
                          headers=AUTH, timeout=60) as tail_response:
            tail = EventReader(tail_response)
            tail.until("response.output_text.delta")
            # The tail is live: the response is still being written while B already streams it.
            assert sdk(stack.edge_b).responses.retrieve(response_id).status == "in_progress"
            tailed = tail.rest()
        streamed = live.rest()
    check_stream(streamed)
    assert tailed == streamed
    assert tailed[-1]["type"] == "response.completed"


def test_three_turn_chain_with_turns_on_alternate_instances(stack: Stack,
                                                            sim: SimControl) -> None:
    first = sdk(stack.edge_a).responses.create(model="sim-model", input="one")
    second = sdk(stack.edge_b).responses.create(model="sim-model", input="two",
                                                previous_response_id=first.id)
    third = sdk(stack.edge_a).responses.create(model="sim-model", input="three",
                                               previous_response_id=second.id)
    assert third.output_text == "You said: three"
    sent = sim.stats()["last_request"]["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "one"), ("assistant", first.output_text),
        ("user", "two"), ("assistant", second.output_text),
        ("user", "three"),
    ]
    # The chain read back through the round-robin edge, from whichever instance.
    assert sdk(stack.edge).responses.retrieve(third.id).previous_response_id == second.id


def test_background_job_completes_and_streams_through_nginx(stack: Stack) -> None:
    job = sdk(stack.edge).responses.create(model="sim-model", input="[[sim tokens=8]] later",
                                           background=True)
    assert job.status in ("queued", "in_progress")
    events = sse(stack.edge, "GET", f"/v1/responses/{job.id}?stream=true")
    check_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert sdk(stack.edge).responses.retrieve(job.id).status == "completed"


def test_background_cancel_through_the_other_instance(stack: Stack) -> None:
    job = sdk(stack.edge_a).responses.create(
        model="sim-model", input="[[sim delay_ms=100 tokens=300]] cancel me", background=True)
    with httpx.stream("GET", f"{stack.edge_b.url}/v1/responses/{job.id}?stream=true",
                      headers=AUTH, timeout=60) as response:
        tail = EventReader(response)
        tail.until("response.output_text.delta")  # the worker is generating
        cancelled = sdk(stack.edge_b).responses.cancel(job.id)
        assert cancelled.status == "cancelled"
        events = tail.rest()
    assert events[-1]["type"] == "response.cancelled"
    assert sdk(stack.edge_a).responses.retrieve(job.id).status == "cancelled"


def test_first_delta_is_not_held_back_by_nginx(stack: Stack) -> None:
    # A slow generation: 12 tokens 150 ms apart. Buffered anywhere on the way (nginx, gzip, a
    # cache), the deltas would arrive together at the end; unbuffered, the first arrives while
    # the rest are still being generated, about 11 x 150 ms before the last.
    body = {"model": "sim-model", "input": "[[sim delay_ms=150 tokens=12]] slow",
            "stream": True, "store": False}
    with httpx.stream("POST", stack.edge.url + "/v1/responses", json=body, headers=AUTH,
                      timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = EventReader(response)
        reader.rest()
    deltas = [at for at, event in reader.events if event["type"] == "response.output_text.delta"]
    terminal_at = reader.events[-1][0]
    assert len(deltas) == 12
    generation = 11 * 0.150
    assert terminal_at - deltas[0] > generation / 2
    assert deltas[-1] - deltas[0] > generation / 2


def test_chat_pass_through_streams_through_nginx(stack: Stack) -> None:
    chunks = list(sdk(stack.edge).chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "[[sim tokens=5]] hi"}],
        stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_body_over_the_limit_is_an_openai_error_at_the_edge(stack: Stack) -> None:
    too_big = b"x" * (16 * 1024 * 1024 + 1)
    response = httpx.post(stack.edge.url + "/v1/responses", headers=AUTH, content=too_big,
                          timeout=30)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    with pytest.raises(openai.APIStatusError) as info:
        sdk(stack.edge).responses.create(model="sim-model", input="x" * (16 * 1024 * 1024))
    assert info.value.status_code == 413


def test_metrics_are_not_served_through_the_load_balancer(stack: Stack) -> None:
    assert httpx.get(stack.edge.url + "/metrics", timeout=10).status_code == 404
    assert httpx.get(stack.a.url + "/metrics", timeout=10).status_code == 200


def test_a_dead_instance_is_skipped_without_an_error() -> None:
    """Connection refused (an instance restarting): nginx sends the request to the other one,
    a POST included, because it never reached the dead one."""
    dead = f"http://127.0.0.1:{free_port()}"
    alive = _Echo()
    edge = start_nginx([dead, alive.url])
    try:
        for n in range(4):
            response = httpx.post(edge.url + "/v1/responses", content=b"{}", timeout=10,
                                  headers={"x-request-id": f"dead-{n}"})
            assert response.status_code == 200, response.text
        # It was tried: nginx logs both addresses for the request it moved on.
        dead_address, alive_address = (url.split("://")[1] for url in (dead, alive.url))
        assert any(f"upstream={dead_address}, {alive_address} " in line
                   for line in edge.access_log())
    finally:
        edge.stop()
        alive.close()


def test_no_instance_answering_is_an_openai_shaped_503() -> None:
    edge = start_nginx([f"http://127.0.0.1:{free_port()}"])
    try:
        with pytest.raises(openai.InternalServerError) as info:
            SDK.get(edge.url, KEY).responses.create(model="sim-model", input="anyone?")
        assert info.value.status_code == 503
        assert info.value.code == "service_unavailable"
    finally:
        edge.stop()


def test_websocket_upgrade_is_passed_through() -> None:
    """The coming WebSocket mode: nginx forwards Upgrade/Connection and then tunnels bytes."""
    backend = _Echo()
    edge = start_nginx([backend.url])
    try:
        with socket.create_connection(("127.0.0.1", edge.port), timeout=10) as client:
            client.sendall(b"GET /v1/responses HTTP/1.1\r\nHost: edge\r\nUpgrade: websocket\r\n"
                           b"Connection: Upgrade\r\n\r\n")
            head = _read_head(client)
            assert head.startswith(b"HTTP/1.1 101"), head
            client.sendall(b"ping-frame")
            assert client.recv(64) == b"ping-frame"
        upgrade_head = backend.heads[-1].lower()
        assert b"upgrade: websocket" in upgrade_head
        assert b"connection: upgrade" in upgrade_head
    finally:
        edge.stop()
        backend.close()


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    for _ in range(100):
        if b"\r\n\r\n" in data:
            break
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


class _Echo:
    """A tiny HTTP/1.1 backend on a thread: a 101 to an upgrade (then echoes bytes), else a
    200 with an empty JSON object. It records each request head."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.heads: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        with conn:
            try:
                while True:
                    head = _read_head(conn)
                    if not head:
                        return
                    self.heads.append(head)
                    if b"upgrade: websocket" in head.lower():
                        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                     b"Connection: Upgrade\r\n\r\n")
                        conn.sendall(conn.recv(64))
                        return
                    length = _content_length(head)
                    rest = head.split(b"\r\n\r\n", 1)[1]
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: 2\r\n\r\n{}")
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0
