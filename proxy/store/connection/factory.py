"""`open_store`: the one place that decides which Redis the store talks to, and how.

- With a URL: a pooled redis-py client tuned to fail fast and heal by itself.
  * connect timeout ~2 s: a host that does not answer is a 503 now, not after the OS's minute;
  * socket timeout: bounds every command, so a stuck server (SIGSTOP, a network partition)
    costs one timeout, not a hung request. It must exceed the longest blocking read we issue,
    so `tail` is capped at `socket_timeout - BLOCK_MARGIN`;
  * no client-level retries (redis-py retries every command, writes included, ten times with
    backoff by default): the store retries reads once itself and never replays a write;
  * `health_check_interval`: a connection idle that long is PINGed before use, and the pool
    checks each connection it hands out, so after a Redis restart stale sockets are replaced
    without a restart of ours;
  * a blocking pool: a burst waits briefly for a free connection instead of failing.
- Without a URL: the embedded store, fakeredis's in-process server (declared Redis 7.0, so a
  command newer than production's floor fails here too). One instance; state lost on exit.
  Its client gets a blocking pool too: fakeredis keeps redis-py's default pool of 100
  connections that raises MaxConnectionsError past them, and 300 concurrent stored streams
  got 142-150 503s from it.
- `job_queue(store)`: the background job queue on the store's own client (one pool per process,
  the same timeouts), so it needs nothing opened or closed of its own.
- `open_backend`: `open_store` and every adapter on its client (job queue, leases, limit
  counters, cache index, fleet secret, files, prompts) as one `Backend`, so the composition root
  (proxy/runtime.py) never reaches past an interface for the client. `open_store` stays the
  store alone: what the contract suite and most tests want.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from proxy.core.ids import IdFactory, new_id
from proxy.core.policy.storagebudget import UNLIMITED, StorageBudget
from proxy.core.storage.topology import RedisTarget, parse_redis_url
from proxy.store.connection.coalesce import pack_args
from proxy.store.connection.reconnect import PROBE_TIMEOUT, Reconnector
from proxy.store.connection.shards import ShardedIds, cluster_owners
from proxy.store.fleetsecret import SecretRead, shared_secret
from proxy.store.jobqueue import RedisJobQueue
from proxy.store.leases import LeaseTable
from proxy.store.limits import LimitStore
from proxy.store.objects.cache import RedisCache
from proxy.store.objects.files import RedisBlobStore
from proxy.store.objects.prompts import RedisPrompts
from proxy.store.objects.vectors import RedisVectorStores
from proxy.store.redis import RedisStore

CONNECT_TIMEOUT = 2.0
SOCKET_TIMEOUT = 5.0
# Headroom between the longest blocking read and the socket timeout: the reply to an XREAD that
# timed out on the server side must arrive before the client gives up on the socket.
BLOCK_MARGIN = 1.5
HEALTH_CHECK_INTERVAL = 15
# Redis connections one process opens at most. Every stored stream makes a few round trips
# as it starts and ends (create, lease, final write), each holding a connection for its round
# trip; 256 streams starting together over 64 connections queued for them, and on a loaded
# host some waited out the 2 s pool wait and failed with 503 (the benchmarks' burst rows). Redis
# serves thousands of clients; 256 per process is cheap (one socket each, opened on demand).
MAX_CONNECTIONS = 256
# The embedded store's connections are in-process objects (no socket, no server-side client),
# so its bound is only there to catch a leak: well past what 1,000 concurrent streams hold.
EMBEDDED_MAX_CONNECTIONS = 4096
# Connections of the reconnect probe (store/connection/reconnect.py): many streams failing at once
# probe together; past these they wait for one (as long as a probe may take).
PROBE_CONNECTIONS = 16
# Oldest Redis we support (docs/design.md): the embedded server refuses what 7.0 would refuse.
EMBEDDED_VERSION = (7, 0)


def open_store(redis_url: str | None, *, connect_timeout: float = CONNECT_TIMEOUT,
               socket_timeout: float = SOCKET_TIMEOUT,
               health_check_interval: int = HEALTH_CHECK_INTERVAL,
               max_connections: int = MAX_CONNECTIONS,
               budget: StorageBudget = UNLIMITED, wait_replicas: int = 0,
               probe_timeout: float = PROBE_TIMEOUT, compact_log: bool = True) -> RedisStore:
    """A `RedisStore` on `redis_url` (core/storage/topology.py: one primary, or the primary that
    Sentinel names), or the embedded store when it is None, holding each key to its `budget`
    of stored bytes. Nothing connects here: the first call does (call `ping()` to check at
    start-up). `wait_replicas`, `compact_log`: see `RedisStore`; `probe_timeout`: the reconnect
    probe's (store/connection/reconnect.py)."""
    if redis_url is None:
        return RedisStore(embedded_client(), embedded=True, budget=budget,
                          compact_log=compact_log)
    if socket_timeout <= BLOCK_MARGIN:
        raise ValueError(f"socket_timeout must exceed {BLOCK_MARGIN}s (blocking reads)")
    target = parse_redis_url(redis_url)
    if target.kind == "cluster":
        return RedisStore(cluster_client(target, connect_timeout=connect_timeout,
                                         socket_timeout=socket_timeout,
                                         health_check_interval=health_check_interval,
                                         max_connections=max_connections),
                          max_block_ms=int((socket_timeout - BLOCK_MARGIN) * 1000),
                          budget=budget, wait_replicas=wait_replicas, sharded=True,
                          compact_log=compact_log)
    options = dict(
        # Waiting for a free pooled connection is queueing behind our own burst (a thousand
        # replays at once), not a sign of a dead server (that fails its connect or its
        # command): it may take as long as a command may.
        timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        socket_timeout=socket_timeout,
        health_check_interval=health_check_interval,
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
    )
    closers: list[Callable[[], Awaitable[None]]] = []
    client = _client(target, closers, max_connections=max_connections, **options)
    # The probe: the same target, a few connections, a short timeout for everything.
    probe_options = {**options, "timeout": probe_timeout, "socket_timeout": probe_timeout,
                     "socket_connect_timeout": min(connect_timeout, probe_timeout)}
    probe = _client(target, closers, max_connections=PROBE_CONNECTIONS, **probe_options)
    max_block_ms = int((socket_timeout - BLOCK_MARGIN) * 1000)
    return RedisStore(client, max_block_ms=max_block_ms, budget=budget,
                      reconnector=Reconnector(client, probe, closers),
                      wait_replicas=wait_replicas, compact_log=compact_log)


class SentinelBlockingPool(SentinelConnectionPool, BlockingConnectionPool):
    """redis-py's Sentinel pool (each new connection asks the sentinels for the primary; a
    changed primary drops the idle connections) with the blocking pool's wait for a free
    connection instead of an error past `max_connections`."""


def _client(target: RedisTarget, closers: list[Callable[[], Awaitable[None]]],
            **options: Any) -> Redis:
    """A client of `target`'s primary with `options` (pool and connection settings). What
    else must be closed with it goes into `closers`."""
    if target.kind == "single":
        return Redis(connection_pool=BlockingConnectionPool.from_url(target.url, **options))
    # The sentinels answer one small command each; they get the connect timeout for both
    # (a stuck sentinel is skipped for the next one) and no retries, as the primary.
    timeout = options["socket_connect_timeout"]
    sentinel = Sentinel(list(target.hosts), sentinel_kwargs={  # type: ignore[no-untyped-call]
        "socket_connect_timeout": timeout, "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 0), "password": target.sentinel_password})
    closers.append(sentinel.aclose)
    client: Redis = sentinel.master_for(target.master, connection_pool_class=SentinelBlockingPool,
                                        db=target.db, password=target.password, **options)
    return client


def cluster_client(target: RedisTarget, *, connect_timeout: float, socket_timeout: float,
                   health_check_interval: int, max_connections: int) -> Redis:
    """redis-py's cluster client on `target`'s seeds: it learns the slot map (CLUSTER SLOTS)
    at its first command, routes each command by its key's slot, follows MOVED and ASK (a
    resharding) and, after a failed connection, learns the map again before its next command
    (a failover). Same fail-fast settings as one primary: no retries of its own (the store
    retries reads once; the next command after a failure re-reads the slot map), bounded
    waits. `max_connections` is per node. No reconnect probe: the client re-learns the map
    by itself after a failure (store/connection/reconnect.py's pool reset has no cluster
    equivalent)."""
    nodes = [ClusterNode(host, port) for host, port in target.hosts]
    client: Any = RedisCluster(
        startup_nodes=nodes, password=target.password, socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout, health_check_interval=health_check_interval,
        max_connections=max_connections, retry=Retry(NoBackoff(), 0),
        # A MOVED reply patches that slot's owner only: a resharding sends thousands, and the
        # default (re-read the whole map every 5th) recycles every connection each time,
        # racing commands in flight on them (seen as 500s under load before this). A failed
        # connection still re-reads the whole map (a failover).
        reinitialize_steps=0, decode_responses=False)
    _packed_by_hiredis(client)
    return cast(Redis, client)


class HiredisPackedConnection(Connection):
    """redis-py's asyncio connection with its commands packed by hiredis (C), as redis-py's
    own sync client packs them when hiredis is installed (a dependency of ours): the asyncio
    connection packs in Python, ~1 µs an argument. A cluster's event-log flush names each
    stream's hash and log and its entries' parts (about nine arguments a stream a flush):
    packed in Python that was the largest part of the cluster's store client CPU
    (`bench.topology`). The bytes are the same, a `bytearray` included, and a value Redis
    cannot take the same `DataError` (tests/unit/test_redis_topology.py): the coalescer's
    packing, which one primary's scripts already go through (store/connection/coalesce.py
    `pack_args`)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        command = args[0]  # a command of two words ("SCRIPT LOAD") is sent as two arguments
        if isinstance(command, str):
            args = (*command.encode().split(), *args[1:])
        elif b" " in command:
            args = (*command.split(), *args[1:])
        return [pack_args(args)]


def _packed_by_hiredis(client: Any) -> None:
    """The cluster client's connections made as `HiredisPackedConnection`s. redis-py's cluster
    client takes no connection class (it picks its own, TLS or not): its nodes' shared
    connection settings and the start-up nodes it made already are given ours, where they
    are what this redis-py is known to have; anything else keeps redis-py's own packing."""
    settings = getattr(client, "connection_kwargs", None)
    nodes = getattr(getattr(client, "nodes_manager", None), "startup_nodes", None)
    if not isinstance(settings, dict) or settings.get("connection_class") is not Connection \
            or not isinstance(nodes, dict):
        return
    settings["connection_class"] = HiredisPackedConnection
    for node in nodes.values():
        if getattr(node, "connection_class", None) is Connection:
            node.connection_class = HiredisPackedConnection


def embedded_client() -> Redis:
    """A client of a fresh in-process server, private to the caller."""
    # Imported here, not at start: fakeredis imports numpy when it is installed, and a process
    # on a real Redis should not load it (core/vectors/lazynumpy.py says what numpy costs every
    # Redis command's packing once loaded).
    import fakeredis

    server = fakeredis.FakeServer(version=EMBEDDED_VERSION)
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=False,
                                      connection_pool_class=BlockingConnectionPool,
                                      max_connections=EMBEDDED_MAX_CONNECTIONS)
    # A burst past the bound waits for a connection as long as a command may, as on Redis.
    pool = client.connection_pool
    assert isinstance(pool, BlockingConnectionPool)
    pool.timeout = SOCKET_TIMEOUT
    return client


def job_queue(store: RedisStore) -> RedisJobQueue:
    """The job queue sharing `store`'s client: same server, pool and timeouts; its blocking
    reads stay under the store's `max_block_ms`. Closed with the store (`store.aclose()`)."""
    return RedisJobQueue(store.client, max_block_ms=store.max_block_ms)


@dataclass(frozen=True)
class Backend:
    """One process's storage, each part behind its own interface, all on one client (one pool,
    one set of timeouts; `store.aclose()` closes it for all)."""

    store: RedisStore
    queue: RedisJobQueue
    limits: LimitStore
    cache: RedisCache
    secret: SecretRead  # the deployment's fleet secret (store/fleetsecret.py)
    # Which instance writes each foreground stored response; None on the embedded store (it
    # dies with its process, so there is no other instance to take over).
    leases: LeaseTable | None
    files: RedisBlobStore  # uploaded files (`/v1/files`), behind store/objects/files.py's BlobStore
    prompts: RedisPrompts  # prompt templates (`/v1/prompts`)
    vectors: RedisVectorStores  # vector stores (`/v1/vector_stores`)
    # The ids of new responses and conversations: shard-tagged on a cluster
    # (store/connection/shards.py).
    ids: IdFactory = new_id

    @property
    def shared(self) -> bool:
        """Other processes use this server (False: the embedded store, private to us)."""
        return not self.store.embedded


def backend_of(store: RedisStore) -> Backend:
    client = store.client
    return Backend(store, job_queue(store), LimitStore(client),
                   RedisCache(client, sharded=store.sharded),
                   functools.partial(shared_secret, client),
                   None if store.embedded else LeaseTable(client, sharded=store.sharded),
                   RedisBlobStore(client), RedisPrompts(client), RedisVectorStores(client),
                   ShardedIds(cluster_owners(client)) if store.sharded else new_id)


def open_backend(redis_url: str | None, *, budget: StorageBudget = UNLIMITED,
                 wait_replicas: int = 0, compact_log: bool = True) -> Backend:
    return backend_of(open_store(redis_url, budget=budget, wait_replicas=wait_replicas,
                                 compact_log=compact_log))
