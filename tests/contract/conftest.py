"""The `store` fixture: every contract test runs once per backend.

- `redis`: a `RedisStore` on the session's real redis-server (flushed before each test);
- `sentinel`: the same through Sentinel (`redis+sentinel://`, the session's primary + replica +
  3 sentinels: tests/support/sentinel.py), so the client follows the sentinels' primary;
- `embedded`: the store `open_store(None)` builds, over fakeredis's in-process server;
- `cluster`: `redis+cluster://`, the session's 6-node Redis Cluster (tests/support/cluster.py;
  marked `cluster`), where the tests' ids carry shard tags (tagged.py).

`round_trips` counts what reaches the server: one per command sent on its own (scripts included)
and one per pipeline, however many commands it carries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.store.connection.coalesce import ScriptCoalescer
from proxy.store.connection.factory import job_queue, open_store
from proxy.store.connection.held import HeldConnection
from proxy.store.jobqueue import RedisJobQueue
from proxy.store.redis import RedisStore
from tests.contract.tagged import STYLE


@pytest.fixture(params=["redis", "sentinel", "embedded",
                        pytest.param("cluster", marks=pytest.mark.cluster)])
def store_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "embedded":
        return None
    if request.param == "cluster":
        return str(request.getfixturevalue("redis_cluster").url())
    if request.param == "sentinel":
        group = request.getfixturevalue("sentinel_group")
        return str(group.url())
    server = request.getfixturevalue("redis_server")
    return f"redis://127.0.0.1:{server.port}/0"


@pytest.fixture
async def store(store_url: str | None) -> AsyncIterator[RedisStore]:
    store = open_store(store_url)
    await store.client.flushall()
    STYLE.tagged = store.sharded  # tests/contract/tagged.py: the ids this store holds
    try:
        yield store
    finally:
        STYLE.tagged = False
        await store.aclose()


@pytest.fixture
def queue(store: RedisStore) -> RedisJobQueue:
    """The job queue on the store's client, as the app builds it (so `round_trips` counts its
    commands too)."""
    return job_queue(store)


class RoundTrips:
    def __init__(self) -> None:
        self.count = 0

    def reset(self) -> None:
        self.count = 0


@pytest.fixture
def round_trips(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    counter = RoundTrips()
    client = store.client
    send_one: Any = client.execute_command

    async def counted_command(*args: Any, **options: Any) -> Any:
        counter.count += 1
        return await send_one(*args, **options)

    pipeline_class = type(client.pipeline())
    send_many = pipeline_class.execute

    async def counted_pipeline(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter.count += 1
        return await send_many(self, *args, **kwargs)

    # Coalesced script calls (a create, a final write) go out one write per batch: on the
    # connection the coalescer holds, or pooled on a client whose connections it cannot hold
    # (store/connection/coalesce.py).
    send_batch = ScriptCoalescer._pipelined

    async def counted_batch(self: ScriptCoalescer, *args: Any, **kwargs: Any) -> Any:
        counter.count += 1
        return await send_batch(self, *args, **kwargs)

    write_batch = HeldConnection.send

    def counted_write(self: HeldConnection, *args: Any, **kwargs: Any) -> None:
        counter.count += 1
        write_batch(self, *args, **kwargs)

    monkeypatch.setattr(client, "execute_command", counted_command)
    monkeypatch.setattr(pipeline_class, "execute", counted_pipeline)
    monkeypatch.setattr(ScriptCoalescer, "_pipelined", counted_batch)
    monkeypatch.setattr(HeldConnection, "send", counted_write)
    return counter


@pytest.fixture
def script_args(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """The arguments of every script call the store makes (its `_waited`), in order: what a
    create or a final write sends to Redis."""
    sent: list[list[Any]] = []
    waited = store._waited

    async def recorded(script: Any, keys_: list[str], args: list[Any]) -> Any:
        sent.append(args)
        return await waited(script, keys_, args)

    monkeypatch.setattr(store, "_waited", recorded)
    return sent
