"""A real redis-server going away and coming back, under one `RedisStore` object.

- killed (connection refused): every call fails at once with StoreUnavailable;
- stopped (SIGSTOP: connections accepted, nothing answered): calls fail within the socket
  timeout, blocking reads included;
- restarted on the same port / continued: the very same store works again, without being
  rebuilt (the pool replaces its dead connections by itself).

Each test runs its own redis-server: killing the session's would break the other tests.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from redis import exceptions as rex

from proxy.core.errors import StoreUnavailable
from proxy.services.eventlog.durable import store_final
from proxy.store.base import ResponseRecord, StoredEvent
from proxy.store.connection.factory import open_store
from proxy.store.redis import RedisStore
from tests.support.servers import start_redis

SOCKET_TIMEOUT = 2.0
TENANT = "tenant-a"


class Servers:
    """The redis-server of one test, across restarts; all of them stopped at the end."""

    def __init__(self) -> None:
        self.current = start_redis()
        self.started = [self.current]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.current.port}/0"

    def restart(self) -> None:
        self.current = start_redis(port=self.current.port)
        self.started.append(self.current)

    def stop_all(self) -> None:
        for server in self.started:
            server.signal(signal.SIGCONT)
            server.stop()


@pytest.fixture
def servers() -> Iterator[Servers]:
    servers = Servers()
    try:
        yield servers
    finally:
        servers.stop_all()


@pytest.fixture
async def store(servers: Servers) -> AsyncIterator[RedisStore]:
    store = open_store(servers.url, socket_timeout=SOCKET_TIMEOUT)
    try:
        yield store
    finally:
        await store.aclose()


def record(rid: str) -> ResponseRecord:
    return ResponseRecord(response={"id": rid, "object": "response", "status": "queued",
                                    "output": []}, tenant=TENANT)


def event(seq: int) -> StoredEvent:
    return StoredEvent(seq=seq, type="response.output_text.delta", data=b'{"x":1}')


def calls(store: RedisStore) -> dict[str, Callable[[], Awaitable[Any]]]:
    """One read and one write of every kind the proxy makes."""
    return {
        "ping": store.ping,
        "get": lambda: store.get_response(TENANT, "resp_1"),
        "create": lambda: store.create_response(record("resp_2"), [], ttl=60, event_ttl=60),
        "transition": lambda: store.transition(
            "resp_1", tenant=TENANT, allowed_from=frozenset({"queued"}), to="in_progress", ttl=60),
        "append": lambda: store.append_events({"resp_1": [event(1)]}, ttl=60),
        "tail": lambda: store.tail({"resp_1": 0}, block_ms=60_000),
        "chain": lambda: store.load_chain(TENANT, "resp_1"),
    }


async def assert_unavailable(call: Callable[[], Awaitable[Any]], within: float) -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as failed:
        await call()
    assert time.monotonic() - started < within
    assert isinstance(failed.value.__cause__, (rex.RedisError, OSError))
    assert failed.value.status == 503


async def assert_works(store: RedisStore, rid: str) -> None:
    await store.ping()
    await store.create_response(record(rid), [], events=(event(0),), ttl=60, event_ttl=60)
    got = await store.get_response(TENANT, rid)
    assert got is not None and got.status == "queued"
    await store.append_events({rid: [event(1)]}, ttl=60)  # scripts reloaded after a restart
    assert [e.seq for e in await store.read_events(rid)] == [0, 1]


async def test_a_killed_server_fails_fast_and_a_restarted_one_is_used_again(
        servers: Servers, store: RedisStore) -> None:
    await assert_works(store, "resp_1")
    servers.current.kill()
    for name, call in calls(store).items():
        try:
            await assert_unavailable(call, within=1.0)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc
    servers.restart()
    await assert_works(store, "resp_1")


async def test_a_stopped_server_fails_within_the_socket_timeout_then_recovers(
        servers: Servers, store: RedisStore) -> None:
    await assert_works(store, "resp_1")
    servers.current.signal(signal.SIGSTOP)
    try:
        # each costs a full socket timeout: one read, one write, the blocking read
        stuck = {name: call for name, call in calls(store).items()
                 if name in ("get", "transition", "tail")}
        for name, call in stuck.items():
            try:
                await assert_unavailable(call, within=SOCKET_TIMEOUT + 1.5)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from exc
    finally:
        servers.current.signal(signal.SIGCONT)
    await assert_works(store, "resp_3")
    got = await store.get_response(TENANT, "resp_1")
    assert got is not None


def final(rid: str) -> dict[str, Any]:
    return {"id": rid, "object": "response", "status": "completed", "output": []}


async def test_final_writes_on_a_stopped_server_give_up_after_one_timeout_not_six(
        servers: Servers) -> None:
    """Before: 16 streams ending on a frozen primary stayed stuck 30 s, each of the six
    attempts of their final write waiting out the socket timeout. After the first timeout
    every retry first probes the server (a short PING on a fresh connection): each costs the
    probe's timeout, so all 16 give up within one socket timeout and five probes."""
    probe = 0.3
    store = open_store(servers.url, socket_timeout=SOCKET_TIMEOUT, probe_timeout=probe)
    try:
        rids = [f"resp_f{n}" for n in range(16)]
        for rid in rids:
            await store.create_response(record(rid), [], ttl=60, event_ttl=60)
        delays = (0.05,) * 5
        servers.current.signal(signal.SIGSTOP)
        started = time.monotonic()
        results = await asyncio.gather(*[
            store_final(store, final(rid), StoredEvent(1, "response.completed", b"{}"),
                        tenant=TENANT, ttl=60, event_ttl=60, delays=delays) for rid in rids],
            return_exceptions=True)
        elapsed = time.monotonic() - started
        assert all(isinstance(r, StoreUnavailable) for r in results), results
        # Before: 6 x 2 s = 12 s. Now: 2 s + 5 x (0.3 s probe + 0.05 s) = 3.75 s.
        assert elapsed < SOCKET_TIMEOUT + 5 * (probe + 0.05) + 1.0, elapsed
    finally:
        servers.current.signal(signal.SIGCONT)
    try:
        # And once the server answers again, the same store writes the end.
        done = await store_final(store, final(rids[0]), None, tenant=TENANT, ttl=60, event_ttl=60,
                                 delays=delays)
        assert done.changed
    finally:
        await store.aclose()
