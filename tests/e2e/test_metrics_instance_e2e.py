"""`/metrics` of `serve --workers 2` describes the instance: scraped while
both processes serve, every counter only grows, and once the load ends the request counter and
the duration histogram hold every request, whichever process served it or answers the scrape;
`proxy_processes` says 2. Which process served what is read from the JSON access log."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest

from tests.support.prom import Scrape, parse
from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hello there"}]}
ROUTE = "/v1/chat/completions"
REQUESTS = 60
SCRAPES = 40  # bounded: the load is over well before, or the test says so


@pytest.fixture
def instance(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[ServerProcess]:
    proxy = start_proxy(simulator.url, "--workers", "2", "--log-format", "json",
                        redis_url=f"redis://127.0.0.1:{redis_server.port}/0")
    try:
        yield proxy
    finally:
        proxy.stop(timeout=30)


def scrape(proxy: ServerProcess) -> Scrape:
    # A new connection each time: the kernel spreads them over both processes.
    response = httpx.get(proxy.url + "/metrics", timeout=10)
    assert response.status_code == 200
    return parse(response.text)


def counters(snapshot: Scrape) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {key: value for key, value in snapshot.samples.items()
            if snapshot.types.get(_family(key[0])) in ("counter", "histogram")
            and not key[0].endswith("_created")}


def _family(sample: str) -> str:
    for suffix in ("_total", "_bucket", "_count", "_sum"):
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample


def served_by(proxy: ServerProcess) -> Counter[int]:
    pids: Counter[int] = Counter()
    for line in proxy.full_output().splitlines():
        if line.startswith("{") and '"proxy.access"' in line:
            record = orjson.loads(line)
            if record.get("path") == ROUTE or ROUTE in str(record.get("message", "")):
                pids[int(record["pid"])] += 1
    return pids


def requests_total(snapshot: Scrape) -> float:
    return sum(value for (name, labels), value in snapshot.samples.items()
               if name == "proxy_requests_total" and ("route", ROUTE) in labels)


def test_a_two_process_instance_scrapes_as_one(instance: ServerProcess) -> None:

    def one(_: int) -> int:
        return httpx.post(instance.url + ROUTE, json=CHAT, timeout=30).status_code

    with ThreadPoolExecutor(4) as pool:
        results = pool.map(one, range(REQUESTS))
        snapshots = []
        for _ in range(SCRAPES):
            snapshots.append(scrape(instance))
        statuses = list(results)
    assert statuses == [200] * REQUESTS
    # Never backwards, whichever process answered each scrape.
    for before, after in itertools.pairwise(snapshots):
        now = counters(after)
        for key, value in counters(before).items():
            assert now.get(key, 0.0) >= value, key
    # After the load, every scrape holds every request: the sum over both processes.
    pids = served_by(instance)
    assert len(pids) == 2, f"one process served everything: {pids}"
    for _ in range(6):
        final = scrape(instance)
        assert requests_total(final) == REQUESTS
        assert final.value("proxy_request_duration_seconds_count", route=ROUTE) == REQUESTS
        assert final.value("proxy_processes") == 2
        assert final.value("proxy_open_streams", route=ROUTE) in (None, 0.0)
    assert final.types["proxy_requests"] == "counter"
    assert final.types["proxy_request_duration_seconds"] == "histogram"
