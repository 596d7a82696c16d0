"""Shared fixtures: real servers (simulator, redis-server) started once per session, and an
in-process proxy app whose lifespan runs for the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.core.context.requestctx import CURRENT
from proxy.settings import Settings
from tests.support.cluster import RedisClusterGroup
from tests.support.sentinel import SentinelGroup
from tests.support.servers import ServerProcess, start_redis, start_simulator
from tests.support.tls import share_default_context

# Every httpx client the tests make (~3,500 a run) shares one verifying TLS context instead of
# loading certifi's CAs again (45-90 ms of CPU each): tests/support/tls.py.
share_default_context()

# Fixtures that start redis-server: a test using one is marked `redis` (`make test-quick`
# leaves it out, so the inner loop needs neither redis-server nor nginx).
REDIS_FIXTURES = frozenset({"redis_server", "redis_cluster", "sentinel_group"})


# Files whose tests compare times, CPU or memory with a bound (relative TTFTs of a burst, the
# fleet's spread under load, a prefix cache's speed-up, the cost-bounds rows, a child's CPU):
# another test running beside them on a 2-core machine can cross it, so `make test` runs them
# alone, after the rest has run two files at a time (Makefile `test`).
SERIAL = (
    "tests/e2e/test_burst_e2e.py",
    "tests/e2e/test_fleet_e2e.py",
    "tests/e2e/test_prefix_isolation_e2e.py",
    "tests/e2e/test_chaos_e2e.py",
    "tests/e2e/test_drain_e2e.py",
    "tests/costbounds/",
    "tests/integration/test_extraction.py",
    "tests/integration/test_upstream_client.py",
    "tests/integration/test_metering_http.py",
    "tests/unit/test_toolsearch.py::test_the_worst_search_is_bounded",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if REDIS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis)
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(autouse=True)
def _no_request_context_left() -> Iterator[None]:
    """Fails a test that leaves a request's context current in the worker's thread: each later
    test there would inherit it (`asyncio.Runner` copies the thread's context), and the
    upstream client then sends an `x-request-id` nobody asked for. test_randomhex.py did, and
    test_upstream_client.py's headers test failed whenever it ran after it in one process."""
    yield
    left = CURRENT.get()
    if left is not None:
        CURRENT.set(None)
        pytest.fail(f"the test left RequestContext({left.request_id!r}) current")


@pytest.fixture(scope="session")
def simulator() -> Iterator[ServerProcess]:
    server = start_simulator()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ServerProcess]:
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterGroup]:
    """A 6-node Redis Cluster (3 primaries, 3 replicas: tests/support/cluster.py), shared by
    the session: tests that kill or move something start their own."""
    group = RedisClusterGroup()
    yield group
    group.stop()


@pytest.fixture(scope="session")
def sentinel_group() -> Iterator[SentinelGroup]:
    """A primary, its replica and three sentinels (tests/support/sentinel.py), shared by the
    session: tests that kill or stop one of them start their own group."""
    group = SentinelGroup()
    yield group
    group.stop()


class SimControl:
    """Read and reset the simulator's counters."""

    def __init__(self, url: str) -> None:
        self.url = url

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(self.url + "/sim/stats", timeout=30).json()
        return data

    def reset(self) -> None:
        httpx.post(self.url + "/sim/reset", timeout=30).raise_for_status()


@pytest.fixture
def sim(simulator: ServerProcess) -> SimControl:
    control = SimControl(simulator.url)
    control.reset()
    return control


@pytest.fixture
def settings(simulator: ServerProcess) -> Settings:
    return Settings.of(upstreams=(simulator.url,))


@pytest.fixture
async def asgi_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The proxy app in-process (lifespan running) behind an httpx client. Buffers whole
    bodies: timing, pings and disconnects belong in e2e tests."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield http
