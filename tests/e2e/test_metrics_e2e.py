"""`/metrics` of a real proxy process (uvicorn, a real redis-server, the simulator): what an
in-process client cannot show, because it buffers whole bodies: a stream counted open while it
is open, its time to first byte, and the queue depth read from Redis when scraped."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.prom import Scrape, parse
from tests.support.servers import ServerProcess, start_proxy, start_redis

pytestmark = pytest.mark.e2e

RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def redis() -> Iterator[ServerProcess]:
    server = start_redis()  # its own: the queue depth below must be this module's jobs only
    yield server
    server.stop()


@pytest.fixture
def proxy(simulator: ServerProcess, redis: ServerProcess) -> Iterator[ServerProcess]:
    # No worker: background jobs stay queued, so the depth is known.
    server = start_proxy(simulator.url, "--no-worker",
                         redis_url=f"redis://127.0.0.1:{redis.port}/0")
    yield server
    server.stop()


def scrape(server: ServerProcess) -> Scrape:
    reply = httpx.get(server.url + "/metrics", timeout=5)
    assert reply.status_code == 200
    return parse(reply.text)


def test_a_stream_is_open_while_it_streams_and_its_first_byte_is_timed(
        proxy: ServerProcess) -> None:
    body = {"model": "sim-model", "stream": True,
            "input": "stream slowly [[sim tokens=40 delay_ms=25]]"}
    with httpx.Client(base_url=proxy.url, timeout=30) as http:
        with http.stream("POST", RESPONSES, json=body) as reply:
            chunks = reply.iter_bytes()
            assert next(chunks)  # response.created has reached us: the stream is open
            during = scrape(proxy)
            rest = b"".join(chunks)
        assert b"response.completed" in rest
        chat = {"model": "sim-model", "stream": True,
                "messages": [{"role": "user", "content": "chat slowly [[sim tokens=5]]"}]}
        with http.stream("POST", CHAT, json=chat) as reply:
            assert b"[DONE]" in b"".join(reply.iter_bytes())
    after = scrape(proxy)
    assert during.value("proxy_open_streams", route=RESPONSES) == 1
    assert after.value("proxy_open_streams", route=RESPONSES) == 0
    assert after.value("proxy_open_streams", route=CHAT) == 0
    assert after.value("proxy_ttft_seconds_count", route=RESPONSES) == 1
    assert after.value("proxy_ttft_seconds_count", route=CHAT) == 1
    assert after.value("proxy_overhead_seconds_count", route=RESPONSES) == 1
    assert after.value("proxy_responses_total", status="completed") == 1
    assert (after.value("proxy_tokens_total", direction="output") or 0) >= 40
    # the request is counted when its last byte has gone, not when its answer started
    assert during.value("proxy_requests_total", route=RESPONSES, method="POST",
                        status="200") is None
    assert after.value("proxy_requests_total", route=RESPONSES, method="POST",
                       status="200") == 1


def test_the_queue_depth_is_read_from_redis_when_scraped(proxy: ServerProcess) -> None:
    before = scrape(proxy).value("proxy_jobs_queued")
    assert before is not None
    with httpx.Client(base_url=proxy.url, timeout=30) as http:
        for n in range(3):
            reply = http.post(RESPONSES, json={"model": "sim-model", "background": True,
                                               "input": f"wait in line {n}"})
            assert reply.status_code == 200
    assert scrape(proxy).value("proxy_jobs_queued") == before + 3
