from __future__ import annotations

import subprocess
import sys

import pytest

from proxy.settings import ConfigError, Settings, build_settings, normalize_upstream


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://10.0.0.5:8000", "http://10.0.0.5:8000"),
        ("http://10.0.0.5:8000/", "http://10.0.0.5:8000"),
        ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000"),
        ("http://10.0.0.5:8000/v1/", "http://10.0.0.5:8000"),
        ("https://fleet.example/vllm/v1", "https://fleet.example/vllm"),
    ],
)
def test_upstream_url_forms_mean_the_server_root(raw: str, expected: str) -> None:
    assert normalize_upstream(raw) == expected


@pytest.mark.parametrize("raw", ["10.0.0.5:8000", "ftp://x", "http://", "http://h:99999"])
def test_bad_upstream_url_names_the_flag(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        normalize_upstream(raw)
    assert info.value.flag == "--upstream"


def test_flags_win_over_environment() -> None:
    env = {"PROXY_PORT": "9000", "PROXY_UPSTREAMS": "http://a:1,http://b:2",
           "PROXY_CACHE": "OFF"}
    from_env = build_settings({}, env)
    assert from_env.port == 9000
    assert from_env.upstreams == ("http://a:1", "http://b:2")
    assert from_env.cache == "off"
    from_flags = build_settings({"port": "9100", "upstream": ["http://c:3"], "cache": "off"}, env)
    assert (from_flags.port, from_flags.upstreams, from_flags.cache) == (
        9100, ("http://c:3",), "off",
    )


def test_defaults() -> None:
    s = build_settings({}, {})
    assert s == Settings()
    assert (s.host, s.port, s.cache, s.worker, s.max_body_bytes) == (
        "127.0.0.1", 8080, "off", True, 16 * 1024 * 1024,
    )


@pytest.mark.parametrize(
    ("flags", "env", "flag"),
    [
        ({"port": "http"}, {}, "--port"),
        ({"port": "0"}, {}, "--port"),
        ({}, {"PROXY_PORT": "70000"}, "--port"),
        ({"cache": "fuzzy"}, {}, "--cache"),
        ({}, {"PROXY_CACHE": "semantic"}, "--embedding-model"),  # semantic needs vectors
        ({"cache": "exact", "cache_ttl": "0"}, {}, "--cache-ttl"),
        ({"cache_similarity": "1.5"}, {}, "--cache-similarity"),
        ({"cache_similarity": "high"}, {}, "--cache-similarity"),
        ({"cache_max_entry_bytes": "0"}, {}, "--cache-max-entry-bytes"),
        ({"cache_max_per_namespace": "x"}, {}, "--cache-max-per-namespace"),
        ({"cache_embedding_timeout": "-1"}, {}, "--cache-embedding-timeout"),
        ({"heartbeat_interval": "0"}, {}, "--heartbeat-interval"),
        ({"max_queued_jobs": "many"}, {}, "--max-queued-jobs"),
        ({"event_ttl": "-5"}, {}, "--event-ttl"),
        ({"redis_url": "localhost:6379"}, {}, "--redis-url"),
        ({"api_key": ["has space"]}, {}, "--api-key"),
        ({"max_body_bytes": "-1"}, {}, "--max-body-bytes"),
        ({"idle_timeout": "soon"}, {}, "--idle-timeout"),
    ],
)
def test_bad_values_name_their_flag(flags: dict[str, object], env: dict[str, str],
                                    flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings(flags, env)
    assert info.value.flag == flag


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["serve", "--upstream", "http://127.0.0.1:1", "--port", "abc"], "--port"),
        (["serve", "--upstream", "nope"], "--upstream"),
        (["serve", "--upstream", "http://127.0.0.1:1", "--cache", "x"], "--cache"),
        (["serve"], "--upstream"),
        (["worker", "--upstream", "http://127.0.0.1:1"], "--redis-url"),
        (["simulate", "--port", "-3"], "--port"),
    ],
)
def test_cli_exits_with_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    done = subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert flag in lines[0]
    assert "Traceback" not in done.stderr


def test_cache_modes_start_with_their_settings() -> None:
    exact = build_settings({"cache": "exact", "cache_ttl": "60"}, {})
    assert (exact.cache, exact.cache_ttl) == ("exact", 60)
    semantic = build_settings({}, {"PROXY_CACHE": "semantic", "PROXY_EMBEDDING_MODEL": "emb",
                                   "PROXY_CACHE_SIMILARITY": "0.9"})
    assert (semantic.cache, semantic.embedding_model, semantic.cache_similarity) == (
        "semantic", "emb", 0.9)
