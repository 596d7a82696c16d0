"""A Redis that answers but refuses us (no or wrong password, protected mode,
an ACL without the command, a read-only replica, maxmemory with noeviction) is a 503
`store_unavailable` naming the cause in the proxy's log, never a 500 with a traceback, while
`store: false` traffic is still served. Real redis-server processes, except protected mode,
which cannot be provoked on loopback: a socket that answers exactly what Redis sends then."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from websockets.sync.client import connect

from tests.support.servers import ServerProcess, start_proxy, start_redis

pytestmark = pytest.mark.e2e

# What redis-server 7 writes to a non-loopback client in protected mode, then it closes.
_DENIED = (b"-DENIED Redis is running in protected mode because protected mode is enabled and "
           b"no password is set for the default user. In this mode connections are only "
           b"accepted from the loopback interface.\r\n")


def _create(proxy: ServerProcess, **body: object) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/responses",
                      json={"model": "sim-model", "input": "refused?", **body}, timeout=15)


def _assert_store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "store_unavailable" and error["type"] == "server_error"
    assert error["message"]


def _check_refused(proxy: ServerProcess, cause: str, *, reads_served: bool = False) -> None:
    """Stored create and stream are 503; stateless traffic goes on; a retrieve is 503 too,
    unless the store still serves reads (a replica, a full server: the id is just unknown)."""
    stateless = _create(proxy, store=False)
    assert stateless.status_code == 200, stateless.text
    assert _create(proxy, store=False, stream=True).status_code == 200
    _assert_store_unavailable(_create(proxy))
    streamed = _create(proxy, stream=True)
    _assert_store_unavailable(streamed)  # before the stream starts: an HTTP error, not SSE
    retrieved = httpx.get(f"{proxy.url}/v1/responses/{stateless.json()['id']}", timeout=15)
    if reads_served:
        assert retrieved.status_code == 404, retrieved.text
    else:
        _assert_store_unavailable(retrieved)
    log = proxy.full_output()
    assert "Traceback" not in log
    assert "store unavailable on POST /v1/responses" in log and cause in log, log[-2000:]


@pytest.fixture
def servers() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for server in reversed(started):
        server.stop()


def test_password_required_and_none_given(simulator: ServerProcess,
                                          servers: list[ServerProcess]) -> None:
    store = start_redis(flags=["--requirepass", "store-secret"])
    servers.append(store)
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{store.port}/0")
    servers.append(proxy)
    _check_refused(proxy, "NOAUTH")  # redis-py: AuthenticationError, a ConnectionError
    assert "store-secret" not in proxy.full_output()


def test_wrong_password(simulator: ServerProcess, servers: list[ServerProcess]) -> None:
    store = start_redis(flags=["--requirepass", "store-secret"])
    servers.append(store)
    proxy = start_proxy(simulator.url,
                        redis_url=f"redis://:not-the-password@127.0.0.1:{store.port}/0")
    servers.append(proxy)
    _check_refused(proxy, "WRONGPASS")
    assert "not-the-password" not in proxy.full_output()


def test_acl_user_without_the_commands(simulator: ServerProcess,
                                       servers: list[ServerProcess]) -> None:
    # An operator tightens the proxy's ACL user under it: every command is then NOPERM, a plain
    # ResponseError in redis-py (a 500 with a traceback before).
    store = start_redis(flags=["--user", "admin", "on", ">admin-pw", "~*", "&*", "+@all"])
    servers.append(store)
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{store.port}/0")
    servers.append(proxy)
    admin = redis.Redis(host="127.0.0.1", port=store.port, username="admin", password="admin-pw")
    try:
        admin.execute_command("ACL", "SETUSER", "default", "resetkeys", "resetchannels",
                              "-@all", "+@connection")
    finally:
        admin.close()
    _check_refused(proxy, "NOPERM")


def test_read_only_replica(simulator: ServerProcess, servers: list[ServerProcess]) -> None:
    primary = start_redis()
    servers.append(primary)
    replica = start_redis(flags=["--replicaof", "127.0.0.1", str(primary.port)])
    servers.append(replica)
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{replica.port}/0")
    servers.append(proxy)
    _check_refused(proxy, "ReadOnlyError", reads_served=True)


def test_full_store_with_noeviction(simulator: ServerProcess,
                                    servers: list[ServerProcess]) -> None:
    store = start_redis(flags=["--maxmemory", "1mb", "--maxmemory-policy", "noeviction"])
    servers.append(store)
    client = redis.Redis(host="127.0.0.1", port=store.port)
    try:  # fill it past maxmemory; the script stops at the first refused write
        client.eval("for i = 1, 50000 do redis.call('set', 'fill:' .. i, string.rep('x', 100)) "
                    "end", 0)
    except redis.exceptions.ResponseError:
        pass
    finally:
        client.close()
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{store.port}/0")
    servers.append(proxy)
    _check_refused(proxy, "OutOfMemoryError", reads_served=True)


@pytest.fixture
def protected_mode_store() -> Iterator[int]:
    """A loopback socket that answers every connection as protected-mode Redis does."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(_DENIED)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_protected_mode(simulator: ServerProcess, servers: list[ServerProcess],
                        protected_mode_store: int) -> None:
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{protected_mode_store}/0")
    servers.append(proxy)
    _check_refused(proxy, "DENIED")


def _wait_for_log(proxy: ServerProcess, *needles: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = proxy.full_output()
        if all(n in log for n in needles) or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def test_a_websocket_create_gets_the_error_frame_and_the_log_names_the_cause(
        simulator: ServerProcess, servers: list[ServerProcess]) -> None:
    store = start_redis(flags=["--requirepass", "store-secret"])
    servers.append(store)
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{store.port}/0")
    servers.append(proxy)
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, open_timeout=10, close_timeout=5) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model",
                            "input": "the heron counts copper spoons"}))
        frame = json.loads(ws.recv(timeout=20))
        # The contract's error frame, the socket staying open: a stateless create still runs.
        assert frame["type"] == "error" and frame["status"] == 503, frame
        assert frame["error"]["code"] == "store_unavailable"
        assert frame["error"]["type"] == "server_error"
        ws.send(json.dumps({"type": "response.create", "model": "sim-model",
                            "input": "stateless", "store": False}))
        for _ in range(500):
            event = json.loads(ws.recv(timeout=20))
            if event["type"] in ("response.completed", "error"):
                break
        assert event["type"] == "response.completed", event
    log = _wait_for_log(proxy, "store unavailable on WebSocket /v1/responses", "NOAUTH")
    assert "store unavailable on WebSocket /v1/responses" in log and "NOAUTH" in log, log[-2000:]
    assert log.count("store unavailable on WebSocket") == 1  # once, for the one refusal
    assert "Traceback" not in log and "store-secret" not in log and "heron" not in log


def test_a_store_that_starts_refusing_mid_stream_is_logged_with_its_cause(
        simulator: ServerProcess, servers: list[ServerProcess]) -> None:
    store = start_redis(flags=["--user", "admin", "on", ">admin-pw", "~*", "&*", "+@all"])
    servers.append(store)
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{store.port}/0")
    servers.append(proxy)
    body = {"model": "sim-model", "stream": True,
            "input": "the heron counts copper spoons [[sim tokens=150 delay_ms=10]]"}
    admin = redis.Redis(host="127.0.0.1", port=store.port, username="admin", password="admin-pw")
    text = ""
    try:
        with httpx.stream("POST", proxy.url + "/v1/responses", json=body, timeout=60) as answer:
            assert answer.status_code == 200
            lines = answer.iter_lines()
            for line in lines:  # stored and streaming: now the store starts refusing us
                if "response.output_text.delta" in line:
                    admin.execute_command("ACL", "SETUSER", "default", "resetkeys",
                                          "resetchannels", "-@all", "+@connection")
                    break
            text = "\n".join(lines)
    finally:
        admin.close()
    # The answer is real: the client gets it whole, its terminal event included.
    assert "response.completed" in text
    log = _wait_for_log(proxy, "could not store the end of", "NoPermissionError")
    # The flush and the end's write name the server's refusal, as the 503 path does.
    assert "event log write failed" in log and "could not store the end of" in log, log[-3000:]
    for line in log.splitlines():
        if "event log write failed" in line or "could not store the end of" in line:
            assert "NoPermissionError" in line and "no permissions" in line, line
    assert "Traceback" not in log and "heron" not in log and "admin-pw" not in log
