"""A connection that does not deliver a request head in time is closed, on
real uvicorn processes: the proxy itself (`serve --workers 2`, uvicorn's `auto` protocol,
httptools) and a bare uvicorn on each protocol class proxy/process/headtimeout.py makes (httptools,
h11). `--header-timeout` is 1 s here; a new idle connection has uvicorn's keep-alive (5 s in the
proxy, 2 s in the bare app).

Bounds, not speeds: a closed connection is seen within `CLOSED_WITHIN` seconds (several times
the timeouts); before the fix none was closed at all (the test then waits out its bound)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import pytest
from websockets.sync.client import connect

from tests.support.servers import ServerProcess, free_port, start_proxy

pytestmark = pytest.mark.e2e

HEAD_TIMEOUT = "1"
CLOSED_WITHIN = 15.0
HEAD = b"GET /healthz HTTP/1.1\r\nHost: proxy\r\nUser-Agent: slow\r\n\r\n"


@pytest.fixture(scope="module", params=["proxy", "httptools", "h11"])
def server(request: pytest.FixtureRequest, simulator: ServerProcess,
           redis_server: ServerProcess) -> Iterator[ServerProcess]:
    if request.param == "proxy":
        started = start_proxy(simulator.url, "--workers", "2", "--header-timeout", HEAD_TIMEOUT,
                              redis_url=f"redis://127.0.0.1:{redis_server.port}/11")
    else:
        port = free_port()
        started = ServerProcess([sys.executable, "-m", "tests.support.headapp", "--port",
                                 str(port), "--http", request.param, "--header-timeout",
                                 HEAD_TIMEOUT, "--keep-alive", "2"], port,
                                log_name="headapp").start()
    try:
        yield started
    finally:
        started.stop()


def dial(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=CLOSED_WITHIN)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """Reads until the server closes (True) or `deadline` passes (False)."""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not sock.recv(4096):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def exchange(sock: socket.socket, head: bytes = HEAD, body: bytes = b"") -> bytes:
    sock.sendall(head + body)
    sock.settimeout(CLOSED_WITHIN)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, "closed before an answer"
        answer += chunk
    head_part, _, rest = answer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head_part.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed mid-answer"
        rest += chunk
    return head_part.split(b"\r\n")[0]


def test_an_idle_new_connection_is_closed(server: ServerProcess) -> None:
    with dial(server) as sock:
        assert closed_by_server(sock, time.monotonic() + CLOSED_WITHIN)


def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_deadline(server: ServerProcess) -> None:
    # Each byte would reset an idle timer; the head's deadline is fixed at its first byte.
    deadline = time.monotonic() + CLOSED_WITHIN
    with dial(server) as sock:
        for byte in HEAD[:-4] * 50:  # never completes the head; 50x the head is a bound
            try:
                sock.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if closed_by_server(sock, min(deadline, time.monotonic() + 0.2)):
                break
            assert time.monotonic() < deadline, "the half-sent head was never cut"
        else:
            pytest.fail("the half-sent head was never cut")


def test_a_keep_alive_client_keeps_working_across_pauses_longer_than_the_head_timeout(
        server: ServerProcess) -> None:
    # Pauses between requests longer than --header-timeout (but within keep-alive): only a
    # started head is timed, never the wait for the next one.
    with dial(server) as sock:
        assert exchange(sock).startswith(b"HTTP/1.1 200")
        for _ in range(2):
            time.sleep(1.3)
            assert exchange(sock).startswith(b"HTTP/1.1 200")


def test_a_slow_body_is_the_body_timeouts_business_not_the_heads(server: ServerProcess) -> None:
    body = b'{"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}'
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\n\r\n")
    with dial(server) as sock:
        sock.sendall(head + body[:10])
        time.sleep(1.5)  # past the head timeout, well within --body-timeout
        assert exchange(sock, b"", body[10:]).startswith(b"HTTP/1.1 200")


def test_a_websocket_outlives_the_head_timeout(server: ServerProcess,
                                               request: pytest.FixtureRequest) -> None:
    if request.node.callspec.params["server"] != "proxy":
        pytest.skip("the bare app has no WebSocket route")
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, open_timeout=10, close_timeout=5) as ws:
        time.sleep(1.5)
        ws.send('{"type": "response.create", "model": "sim-model", "input": "hi"}')
        for _ in range(200):
            if '"response.completed"' in str(ws.recv(timeout=20)):
                break
        else:
            pytest.fail("no response.completed on the socket")
