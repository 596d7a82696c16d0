"""WebSocket mode of `/v1/responses`, against real `serve` processes.

Clients: the `websockets` library (sync client). Two proxies share one real Redis for the
cross-instance chain; the simulator's stats show what reached the fleet.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import struct
import time
from collections.abc import Iterator
from socket import SO_RCVBUF, SOL_SOCKET
from socket import socket as tcp_socket
from typing import Any

import httpx
import openai
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.conftest import SimControl
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_proxy, wait_for
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

KEY = "sk-ws-one"
WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess
         ) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    a = start_proxy(simulator.url, "--api-key", KEY, "--max-body-bytes", "8192", redis_url=url)
    # b: sockets live 6 s, room for a create on a loaded machine, short enough to wait out.
    b = start_proxy(simulator.url, "--api-key", KEY, "--ws-max-age", "6", redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def socket(server: ServerProcess, key: str = KEY) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    return connect(url, additional_headers={"authorization": f"Bearer {key}"},
                   open_timeout=10, close_timeout=5)


def receive(ws: ClientConnection) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(ws.recv(timeout=20))
    return frame


def until_terminal(ws: ClientConnection, limit: int = 2000) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for _ in range(limit):
        event = receive(ws)
        events.append(event)
        if event["type"] in TERMINAL or event["type"] == "error":
            return events
    raise AssertionError("no terminal event")


def create(ws: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    ws.send(json.dumps({"type": "response.create", "model": "sim-model", **body}))
    return until_terminal(ws)


def shape(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["type"], e["sequence_number"], e.get("delta"), e.get("output_index"))
            for e in events]


def test_socket_events_equal_the_sse_events_of_the_same_request(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    body = {"model": "sim-model", "input": "count [[sim tokens=12]]", "store": False}
    with httpx.stream("POST", a.url + "/v1/responses", json={**body, "stream": True},
                      headers={"authorization": f"Bearer {KEY}"}, timeout=30) as response:
        assert response.status_code == 200
        sse = data_payloads(b"".join(response.iter_raw()))
    with socket(a) as ws:
        # `stream: true` (the SDK's example sends it) is accepted and changes nothing.
        events = create(ws, input=body["input"], store=False, stream=True)
    check_stream(events)
    assert shape(events) == shape(sse)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == \
        sse[-1]["response"]["output"][0]["content"][0]["text"]


def test_two_store_false_responses_chain_on_one_socket(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, _ = pair
    with socket(a) as ws:
        first = create(ws, input="remember the word heron", store=False)
        check_stream(first)
        first_id = first[-1]["response"]["id"]
        second = create(ws, input="which word?", store=False, previous_response_id=first_id)
        check_stream(second)
        assert second[-1]["response"]["previous_response_id"] == first_id
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == "remember the word heron"
    assert sent[1]["content"] == first[-1]["response"]["output"][0]["content"][0]["text"]
    # Nothing was stored: over HTTP the same id is unknown.
    answer = httpx.get(a.url + f"/v1/responses/{first_id}",
                       headers={"authorization": f"Bearer {KEY}"}, timeout=10)
    assert answer.status_code == 404


def test_stored_response_from_a_chains_over_a_socket_on_b(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    made = httpx.post(a.url + "/v1/responses", json={"model": "sim-model", "input": "on A"},
                      headers={"authorization": f"Bearer {KEY}"}, timeout=30)
    assert made.status_code == 200
    with socket(b) as ws:
        events = create(ws, input="on B", previous_response_id=made.json()["id"])
    check_stream(events)
    sent = sim.stats()["last_request"]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["on A", "on B"]


def test_unknown_previous_response_is_an_error_frame_and_the_socket_goes_on(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    with socket(a) as ws:
        error = create(ws, input="hi", previous_response_id="resp_0000nothere")
        assert len(error) == 1
        assert error[0]["type"] == "error"
        assert error[0]["status"] == 400
        assert error[0]["error"]["code"] == "previous_response_not_found"
        assert error[0]["error"]["param"] == "previous_response_id"
        events = create(ws, input="still here", store=False)
        check_stream(events)


def test_a_second_create_in_flight_is_refused_and_the_first_goes_on(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    with socket(a) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model", "store": False,
                            "input": "slow [[sim tokens=60 delay_ms=50]]"}))
        first = receive(ws)
        assert first["type"] == "response.created"
        ws.send(json.dumps({"type": "response.create", "model": "sim-model", "input": "x"}))
        events, errors = [first], []
        for _ in range(200):
            frame = receive(ws)
            (errors if frame["type"] == "error" else events).append(frame)
            if frame["type"] in TERMINAL:
                break
        assert len(errors) == 1
        assert errors[0]["error"]["code"] == "response_in_progress"
        assert events[-1]["type"] == "response.completed"  # the first went on, whole
        check_stream(events)
        # Once it has ended, the next create is served.
        assert create(ws, input="next", store=False)[-1]["type"] == "response.completed"


def test_wrong_key_is_refused_at_the_handshake(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair
    with pytest.raises(InvalidStatus) as refused:
        socket(a, key="sk-wrong")
    assert refused.value.response.status_code in (401, 403)
    url = a.url.replace("http://", "ws://") + "/v1/responses"
    with pytest.raises(InvalidStatus):
        connect(url, open_timeout=10)  # no key at all


@pytest.mark.parametrize("frame, param", [
    ("{not json", None),
    ("[1, 2]", "type"),
    ('{"model": "sim-model"}', "type"),
    ('{"type": "response.create", "model": "sim-model", "input": "x", "background": true}',
     "background"),
    ('{"type": "response.create", "input": "x"}', "model"),
])
def test_malformed_frames_are_error_frames(pair: tuple[ServerProcess, ServerProcess],
                                           frame: str, param: str | None) -> None:
    a, _ = pair
    with socket(a) as ws:
        ws.send(frame)
        error = receive(ws)
        assert error["type"] == "error"
        assert error["status"] == 400
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["param"] == param
        # Unknown frame types are ignored; the socket still serves.
        ws.send(json.dumps({"type": "response.processed", "response_id": "resp_x"}))
        ws.send(json.dumps({"type": "response.append", "input": "more"}))
        events = create(ws, input="after", store=False)
        assert events[-1]["type"] == "response.completed"


def test_tool_round_trip_on_one_socket(pair: tuple[ServerProcess, ServerProcess],
                                       sim: SimControl) -> None:
    a, _ = pair
    with socket(a) as ws:
        first = create(ws, input="call get_weather for Oslo", tools=[WEATHER], store=False)
        check_stream(first)
        call = first[-1]["response"]["output"][0]
        assert call["type"] == "function_call"
        second = create(ws, previous_response_id=first[-1]["response"]["id"], tools=[WEATHER],
                        store=False, input=[{"type": "function_call_output",
                                             "call_id": call["call_id"], "output": "snow"}])
        check_stream(second)
        assert second[-1]["type"] == "response.completed"
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call["call_id"]
    assert sent[2] == {"role": "tool", "tool_call_id": call["call_id"],
                       "name": "get_weather", "content": "snow"}


def test_a_client_that_leaves_mid_response_aborts_the_upstream(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, _ = pair
    with socket(a) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model", "store": False,
                            "input": "leave early [[sim tokens=500 delay_ms=20]]"}))
        for _ in range(5):
            receive(ws)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sim.stats()["streams_aborted"] < 1:
        time.sleep(0.05)
    assert sim.stats()["streams_aborted"] == 1


def test_connection_closes_at_its_max_age_with_the_limit_error(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    _, b = pair  # b runs with --ws-max-age 6
    with socket(b) as ws:
        events = create(ws, input="quick [[sim tokens=2]]", store=False)
        assert events[-1]["type"] == "response.completed"
        error = receive(ws)  # waits out the rest of the 6 s
        assert error["type"] == "error"
        assert error["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)


@pytest.mark.parametrize(("failing", "status", "param"), [
    ({"input": "two", "model": "no-such-model"}, 404, "model"),
    # An output for a call nobody made: OpenAI's 400 naming its call_id.
    ({"input": [{"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}]},
     400, "input[0].call_id"),
])
def test_a_failed_continuation_evicts_its_entry(
        pair: tuple[ServerProcess, ServerProcess], failing: dict[str, Any], status: int,
        param: str) -> None:
    a, _ = pair
    with socket(a) as ws:
        first = create(ws, input="one", store=False)
        first_id = first[-1]["response"]["id"]
        failed = create(ws, store=False, previous_response_id=first_id, **failing)
        assert failed[-1]["type"] == "error"
        assert failed[-1]["status"] == status and failed[-1]["error"]["param"] == param
        gone = create(ws, input="three", store=False, previous_response_id=first_id)
        assert gone[-1]["type"] == "error"
        assert gone[-1]["error"]["code"] == "previous_response_not_found"


# The SDK opens its socket without websockets' context manager (its own warning, not ours).
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_the_sdks_own_websocket_client_chains_two_responses(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, _ = pair
    client = openai.OpenAI(base_url=a.url + "/v1", api_key=KEY, max_retries=0)
    finals: list[Any] = []
    with client, client.responses.connect(max_retries=0) as connection:
        previous: str | None = None
        for text in ("first words", "second words"):
            extra = {"previous_response_id": previous} if previous else {}
            connection.response.create(model="sim-model", input=text, store=False, **extra)
            for event in itertools.islice(connection, 500):
                assert event.type != "error", event
                if event.type == "response.completed":
                    finals.append(event.response)
                    previous = event.response.id
                    break
    assert len(finals) == 2
    assert finals[1].previous_response_id == finals[0].id
    sent = sim.stats()["last_request"]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["first words",
                                                                     "second words"]


@pytest.fixture(scope="module")
def limited(simulator: ServerProcess, redis_server: ServerProcess,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("wslimits") / "keys.json"
    path.write_text(json.dumps({"keys": [{"key": "sk-ws-rpm", "name": "ws-rpm", "rpm": 2}]}))
    server = start_proxy(simulator.url, "--keys-file", str(path),
                         redis_url=f"redis://127.0.0.1:{redis_server.port}/1")
    yield server
    server.stop()


def test_per_key_limits_apply_to_socket_creates(limited: ServerProcess) -> None:
    with socket(limited, key="sk-ws-rpm") as ws:
        for _ in range(2):
            assert create(ws, input="hi", store=False)[-1]["type"] == "response.completed"
        refused = create(ws, input="hi", store=False)
        assert refused[-1]["type"] == "error"
        assert refused[-1]["status"] == 429


def test_a_frame_over_max_body_bytes_is_an_error_frame(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair  # a runs with --max-body-bytes 8192
    with socket(a) as ws:
        error = create(ws, input="x" * 9000, store=False)
        assert error[-1]["type"] == "error"
        assert error[-1]["status"] == 413  # as an HTTP body over the limit
        assert error[-1]["error"]["code"] == "frame_too_large"
        assert create(ws, input="small", store=False)[-1]["type"] == "response.completed"


def test_a_frame_is_measured_in_bytes_so_multibyte_text_over_the_limit_is_refused(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, _ = pair  # --max-body-bytes 8192
    frame = json.dumps({"type": "response.create", "model": "sim-model", "input": "é" * 4100,
                        "store": False}, ensure_ascii=False)
    assert len(frame) < 8192 < len(frame.encode())  # under in characters, over in bytes
    with socket(a) as ws:
        ws.send(frame)  # a text frame: the server sees a str
        error = until_terminal(ws)
        assert error[-1]["type"] == "error"
        assert (error[-1]["status"], error[-1]["error"]["code"]) == (413, "frame_too_large")
        # Just under the limit in bytes runs (raw UTF-8, not `\u00e9` escapes).
        ws.send(json.dumps({"type": "response.create", "model": "sim-model",
                            "input": "é" * 4000, "store": False}, ensure_ascii=False))
        assert until_terminal(ws)[-1]["type"] == "response.completed"


def test_a_frame_past_twice_the_limit_is_closed_by_the_transport_with_1009(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """uvicorn's `ws_max_size` (2 x --max-body-bytes) bounds what a frame may make the server
    buffer; past it there is no error frame, the socket is closed "message too big"."""
    a, _ = pair
    with socket(a) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model",
                            "input": "x" * (2 * 8192 + 100)}))
        with pytest.raises(ConnectionClosed) as closed:
            for _ in range(5):
                ws.recv(timeout=20)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    with socket(a) as ws:  # the server goes on
        assert create(ws, input="small", store=False)[-1]["type"] == "response.completed"


@pytest.mark.parametrize("store", [False, True])
def test_back_to_back_creates_chain_the_moment_each_terminal_event_arrives(
        pair: tuple[ServerProcess, ServerProcess], store: bool) -> None:
    """An agent loop sends its next create as soon as it reads the terminal event: the server
    must neither refuse it as "in progress" nor miss the chain it has just remembered (with
    `store: true` the closing also writes the response to Redis, a longer window)."""
    a, _ = pair
    previous = None
    with socket(a) as ws:
        for n in range(12):
            body: dict[str, Any] = {"input": f"step {n} [[sim tokens=3]]", "store": store}
            if previous is not None:
                body["previous_response_id"] = previous
            events = create(ws, **body)
            assert events[-1]["type"] == "response.completed", events[-1]
            previous = events[-1]["response"]["id"]


def test_creates_right_after_error_frames_are_served(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """An error frame is a response's last frame too: a create sent the moment it is read
    waits for the failed response to finish closing instead of being refused."""
    a, _ = pair
    with socket(a) as ws:
        for _ in range(8):
            error = create(ws, input="x", previous_response_id="resp_0000nothere")
            assert error[-1]["error"]["code"] == "previous_response_not_found", error[-1]
            done = create(ws, input="y [[sim tokens=2]]", store=False)
            assert done[-1]["type"] == "response.completed", done[-1]


# -- a raw client: the sync websockets client reads in a thread of its own, so a client that
# never reads (and one that sees the server's pings) is written by hand.

# 60,000 tokens at once (some 12 MB of event frames, several times what the socket's buffers
# hold), then the simulator stalls, holding its stream open for 300 s until the proxy leaves:
# the stream can only end early by the proxy aborting it, however the machine's load shifts
# the proxy's pace against the simulator's.
FLOOD = "[[sim tokens=100000 fail=stall:60000]]"


@pytest.fixture(scope="module")
def impatient(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--api-key", KEY, "--send-timeout", "1",
                         "--ping-interval", "0.5")
    yield server
    server.stop()


def raw_socket(server: ServerProcess) -> tcp_socket:
    """An upgraded connection with a tiny receive buffer, handshake done by hand."""
    sock = tcp_socket()
    sock.setsockopt(SOL_SOCKET, SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    nonce = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /v1/responses HTTP/1.1\r\nhost: proxy\r\nupgrade: websocket\r\n"
                  f"connection: Upgrade\r\nsec-websocket-key: {nonce}\r\n"
                  f"sec-websocket-version: 13\r\nauthorization: Bearer {KEY}\r\n\r\n"
                  ).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def send_text(sock: tcp_socket, text: str) -> None:
    """One masked text frame (RFC 6455 5.2), as a client must send it."""
    payload = text.encode()
    mask = os.urandom(4)
    size = len(payload)
    head = (struct.pack("!BB", 0x81, 0x80 | size) if size < 126
            else struct.pack("!BBH", 0x81, 0x80 | 126, size))
    sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def read_frame(sock: tcp_socket) -> tuple[int, bytes]:
    """(opcode, payload) of one unmasked server frame."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data
    first, second = exactly(2)
    size = second & 0x7F
    if size == 126:
        size = struct.unpack("!H", exactly(2))[0]
    elif size == 127:
        size = struct.unpack("!Q", exactly(8))[0]
    return first & 0x0F, exactly(size)



def ended_one(sim: SimControl) -> bool:
    """One stream started and none left; a simulator too busy flooding to answer is not yet."""
    try:
        stats = sim.stats()
    except httpx.TimeoutException:
        return False
    return bool(stats["streams_started"] == 1 and stats["active_streams"] == 0)


def test_a_client_that_never_reads_is_dropped_and_its_upstream_aborted(
        impatient: ServerProcess, sim: SimControl) -> None:
    sock = raw_socket(impatient)
    try:
        send_text(sock, json.dumps({"type": "response.create", "model": "sim-model",
                                    "store": False, "input": f"flood {FLOOD}"}))
        ended = wait_for(lambda: ended_one(sim), within=90)
        stats = sim.stats()
        assert ended and stats["streams_aborted"] == 1, stats  # cut short by the proxy
        assert wait_for(lambda: "client stopped reading" in impatient.output(), within=10)
    finally:
        sock.close()


def test_an_idle_socket_is_pinged(impatient: ServerProcess) -> None:
    sock = raw_socket(impatient)  # the server runs with --ping-interval 0.5
    try:
        opcodes = []
        for _ in range(20):
            opcode, _payload = read_frame(sock)
            opcodes.append(opcode)
            if opcode == 0x9:
                break
        assert opcodes[-1] == 0x9, opcodes  # a ping, with nothing asked on the socket
    finally:
        sock.close()


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_the_async_sdk_client_runs_a_tool_round_trip_over_its_socket(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    """`AsyncOpenAI().responses.connect()`: every frame parses as the SDK's event types, the
    sequence numbers count up from 0 in each response, and a function call's output goes back
    on the same socket."""
    a, _ = pair

    async def run() -> list[list[Any]]:
        client = openai.AsyncOpenAI(base_url=a.url + "/v1", api_key=KEY, max_retries=0)
        responses: list[list[Any]] = []
        async with client, client.responses.connect(max_retries=0) as connection:
            await connection.response.create(model="sim-model", store=False, tools=[WEATHER],
                                             input="please call get_weather city=Bergen")
            for _ in range(2):
                events: list[Any] = []
                async for event in connection:
                    assert event.type != "error", event
                    events.append(event)
                    if event.type in TERMINAL:
                        break
                responses.append(events)
                final = events[-1].response
                calls = [item for item in final.output if item.type == "function_call"]
                if not calls:
                    break
                await connection.response.create(
                    model="sim-model", store=False, tools=[WEATHER],
                    previous_response_id=final.id,
                    input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                            "output": "fog"}])
        return responses

    responses = asyncio.run(asyncio.wait_for(run(), 60))
    assert len(responses) == 2
    for events in responses:
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].type == "response.completed"
    call = responses[0][-1].response.output[0]
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Bergen"}
    sent = sim.stats()["last_request"]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": call.call_id, "name": "get_weather",
                        "content": "fog"}
    assert responses[1][-1].response.output[0].content[0].text == "Tool results: get_weather=fog"


# -- an open proxy (no keys) and the browsers of other sites -------------------------------
@pytest.fixture(scope="module")
def open_proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--allow-origin", "https://app.example")
    yield server
    server.stop()


def open_socket(server: ServerProcess, origin: str | None) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    return connect(url, origin=origin, open_timeout=10, close_timeout=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1"])
def test_with_auth_off_a_foreign_origin_is_refused_at_the_handshake(
        open_proxy: ServerProcess, sim: SimControl, origin: str) -> None:
    with pytest.raises(InvalidStatus) as refused:
        open_socket(open_proxy, origin)
    assert refused.value.response.status_code == 403
    assert sim.stats()["chat_requests"] == 0


@pytest.mark.parametrize("origin", [None, "https://app.example", "own"])
def test_with_auth_off_no_origin_the_own_and_allowed_origins_are_served(
        open_proxy: ServerProcess, origin: str | None) -> None:
    if origin == "own":  # a page the proxy's own host served
        origin = open_proxy.url
    with open_socket(open_proxy, origin) as ws:
        events = create(ws, input="hello")
    assert events[-1]["type"] == "response.completed"


def test_with_auth_on_the_key_decides_not_the_origin(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """A browser's WebSocket cannot carry a bearer key: a foreign page never gets this far."""
    a, _ = pair
    url = a.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, origin="http://tool.example",  # type: ignore[arg-type]
                 additional_headers={"authorization": f"Bearer {KEY}"}, open_timeout=10) as ws:
        assert create(ws, input="hello")[-1]["type"] == "response.completed"
