"""`--redis-url`'s forms (core/storage/topology.py) and what the settings make of them: one
primary, TLS, Sentinel; a Cluster URL understood but refused at start; a bad one a ConfigError
naming the flag without echoing the password."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from proxy.core.storage.topology import BadRedisUrl, RedisTarget, parse_redis_url
from proxy.settings import ConfigError, build_settings
from proxy.store.connection.factory import HiredisPackedConnection, open_store


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:6379/0", "redis://:secret@redis.internal:6380/2",
    "rediss://user:secret@redis.example.com:6380/0", "unix:///run/redis.sock",
])
def test_one_primary_forms_are_kept_as_given(url: str) -> None:
    assert parse_redis_url(url) == RedisTarget("single", url)


def test_sentinel_url_names_the_sentinels_the_master_and_the_db() -> None:
    url = "redis+sentinel://:s%40cret@10.0.0.1:26379,10.0.0.2,[::1]:26380/prod-main/3" \
          "?sentinel_password=sp"
    target = parse_redis_url(url)
    assert target.kind == "sentinel"
    assert target.hosts == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 26380))
    assert (target.master, target.db) == ("prod-main", 3)
    assert (target.password, target.sentinel_password) == ("s@cret", "sp")


def test_sentinel_url_without_a_password_or_db() -> None:
    target = parse_redis_url("redis+sentinel://h1:1,h2:2/m")
    assert (target.password, target.sentinel_password, target.db) == (None, None, 0)


def test_cluster_url_parses_its_seeds() -> None:
    target = parse_redis_url("redis+cluster://:pw@h1:7000,h2:7001")
    assert target.kind == "cluster"
    assert target.hosts == (("h1", 7000), ("h2", 7001))
    assert target.password == "pw"


@pytest.mark.parametrize("url", [
    "localhost:6379", "http://h:6379", "redis://", "redis://h:notaport/0",
    "redis+sentinel://h1:26379", "redis+sentinel://h1:26379/", "redis+sentinel://h1:26379/m/x",
    "redis+sentinel://h1:26379/m/0/extra", "redis+sentinel://:pw@/m", "redis+sentinel://h:0/m",
    "redis+sentinel://h:99999/m", "redis+cluster://h1:7000/0", "redis+cluster://h1:x",
])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(BadRedisUrl):
        parse_redis_url(url)


def test_a_bad_url_is_a_config_error_naming_the_flag_not_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        build_settings({"redis_url": "redis+sentinel://:hunter2@h1:26379"}, {})
    assert info.value.flag == "--redis-url"
    assert "hunter2" not in str(info.value)


def test_sentinel_url_is_accepted() -> None:
    url = "redis+sentinel://h1:26379,h2:26379/mymaster/1"
    assert build_settings({"redis_url": url}, {}).store.redis_url == url


def test_cluster_url_is_accepted_but_not_with_wait_replicas() -> None:
    url = "redis+cluster://h1:7000,h2:7001"
    assert build_settings({}, {"PROXY_REDIS_URL": url}).store.redis_url == url
    with pytest.raises(ConfigError) as info:
        build_settings({"redis_wait_replicas": "1"}, {"PROXY_REDIS_URL": url})
    assert info.value.flag == "--redis-wait-replicas"


def test_wait_replicas_defaults_to_zero_and_needs_a_redis_url() -> None:
    redis = {"redis_url": "redis://127.0.0.1:6379/0"}
    assert build_settings(redis, {}).store.wait_replicas == 0
    assert build_settings(redis, {"PROXY_REDIS_WAIT_REPLICAS": "1"}).store.wait_replicas == 1
    for flags in ({**redis, "redis_wait_replicas": "-1"}, {**redis, "redis_wait_replicas": "x"},
                  {"redis_wait_replicas": "1"}):
        with pytest.raises(ConfigError) as info:
            build_settings(flags, {})
        assert info.value.flag == "--redis-wait-replicas"


async def test_open_store_builds_a_sentinel_client_without_connecting() -> None:
    store = open_store("redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster/2")
    try:
        pool = store.client.connection_pool
        assert type(pool).__name__ == "SentinelBlockingPool"
        assert pool.connection_kwargs["db"] == 2
        assert pool.connection_kwargs["retry"].get_retries() == 0  # no client retries
    finally:
        await store.aclose()


async def test_a_cluster_clients_connections_pack_by_hiredis() -> None:
    """Every node's connections, the start-up ones and any learnt later: a redis-py whose
    cluster client changes where it keeps them would fall back to its own packing unseen."""
    store = open_store("redis+cluster://127.0.0.1:1,127.0.0.1:2")
    try:
        client: Any = store.client
        assert client.get_connection_kwargs()["connection_class"] is HiredisPackedConnection
        nodes = client.nodes_manager.startup_nodes.values()
        assert [node.connection_class for node in nodes] == [HiredisPackedConnection] * 2
    finally:
        await store.aclose()


@pytest.mark.parametrize("args", [
    ("EVALSHA", "0" * 40, 2, b"rp:{a}", b"rp:{a}:log", 3600, b"", -1, 0.5, 1e20, "é"),
    ("SCRIPT LOAD", "return 1"), (b"CONFIG GET", b"maxmemory"), ("SET", memoryview(b"k"), b"v"),
    ("SET", "k", bytearray(b"v")),
    ("XRANGE", "rp:{a}:log", "1-5", "+", "COUNT", 10),
])
def test_hiredis_packs_what_redis_py_packs(args: tuple[Any, ...]) -> None:
    def packed(connection: Connection) -> bytes:
        return b"".join(bytes(part) for part in connection.pack_command(*args))

    assert packed(HiredisPackedConnection()) == packed(Connection())


@pytest.mark.parametrize("value", [True, None, object()])
def test_hiredis_refuses_what_redis_py_refuses(value: Any) -> None:
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", value)
    with pytest.raises(DataError):
        HiredisPackedConnection().pack_command("SET", "k", value)
