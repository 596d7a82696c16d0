"""Redis stopped under a running proxy: stateful requests get a clear 503 while `store: false`
traffic goes on; when Redis is back the proxy serves normally, without a restart."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.servers import ServerProcess, start_proxy, start_redis

pytestmark = pytest.mark.e2e


@pytest.fixture
def redis_and_proxy(simulator: ServerProcess) -> Iterator[tuple[list[ServerProcess],
                                                                ServerProcess]]:
    redis = [start_redis()]
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{redis[0].port}/0")
    yield redis, proxy
    proxy.stop()
    for server in redis:
        server.stop()


def create(proxy: ServerProcess, **body: object) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/responses",
                      json={"model": "sim-model", "input": "outage?", **body}, timeout=15)


def test_503_while_redis_is_down_and_recovery_after(
        redis_and_proxy: tuple[list[ServerProcess], ServerProcess]) -> None:
    redis, proxy = redis_and_proxy
    stored = create(proxy)
    assert stored.status_code == 200
    response_id = stored.json()["id"]

    redis[0].kill()
    started = time.monotonic()
    down = create(proxy)
    assert down.status_code == 503, down.text
    assert time.monotonic() - started < 5  # fails fast, no hang
    error = down.json()["error"]
    assert error["code"] == "store_unavailable" and error["message"]
    assert httpx.get(f"{proxy.url}/v1/responses/{response_id}", timeout=15).status_code == 503
    streamed = create(proxy, stream=True)
    assert streamed.status_code == 503  # before the stream starts: an HTTP error, not SSE
    assert create(proxy, store=False).status_code == 200  # stateless traffic goes on
    assert create(proxy, store=False, stream=True).status_code == 200
    assert httpx.get(proxy.url + "/readyz", timeout=15).status_code == 503

    redis.append(start_redis(port=redis[0].port))  # back, empty (no persistence)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and create(proxy).status_code != 200:
        time.sleep(0.2)
    again = create(proxy)
    assert again.status_code == 200
    assert httpx.get(f"{proxy.url}/v1/responses/{again.json()['id']}",
                     timeout=15).status_code == 200
    assert httpx.get(proxy.url + "/readyz", timeout=15).status_code == 200


@pytest.mark.failover
def test_sixteen_streams_on_a_frozen_primary_end_without_waiting_out_six_timeouts(
        redis_and_proxy: tuple[list[ServerProcess], ServerProcess]) -> None:
    """Before: with the primary frozen (SIGSTOP), 16 open stored streams stayed stuck about
    30 s, each final-write retry waiting the full 5 s socket timeout. Now the retries after
    the first timeout probe with a 1 s PING on a fresh connection: every stream ends (its
    terminal event) well before that, and none hangs."""
    redis, proxy = redis_and_proxy
    ended: list[float] = []
    frozen_at: list[float] = []

    def stream(n: int) -> None:
        body = {"model": "sim-model", "stream": True,
                "input": f"frozen {n} [[sim tokens=60 delay_ms=25]]"}
        with httpx.stream("POST", proxy.url + "/v1/responses", json=body,
                          timeout=60) as reply:
            for _ in reply.iter_lines():
                pass
        ended.append(time.monotonic())

    threads = [threading.Thread(target=stream, args=(n,), daemon=True) for n in range(16)]
    for thread in threads:
        thread.start()
    time.sleep(0.6)  # all 16 streaming
    redis[0].signal(signal.SIGSTOP)
    frozen_at.append(time.monotonic())
    try:
        for thread in threads:
            thread.join(60)
        assert len(ended) == 16
        # Before: ~5 s (the flush in flight) + 6 x 5 s + 3.75 s of delays = ~39 s.
        slowest = max(ended) - frozen_at[0]
        assert slowest < 25, slowest
    finally:
        redis[0].signal(signal.SIGCONT)
