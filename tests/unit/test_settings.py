from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
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
    assert from_env.server.port == 9000
    assert from_env.fleet.upstreams == ("http://a:1", "http://b:2")
    assert from_env.cache.mode == "off"
    from_flags = build_settings({"port": "9100", "upstream": ["http://c:3"], "cache": "off"}, env)
    assert (from_flags.server.port, from_flags.fleet.upstreams, from_flags.cache.mode) == (
        9100, ("http://c:3",), "off",
    )


def test_defaults() -> None:
    s = build_settings({}, {})
    assert s == Settings()
    assert (s.server.host, s.server.port, s.cache.mode, s.jobs.run, s.limits.max_body_bytes) == (
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
        ({}, {"PROXY_MAX_INPUT_ITEMS": "0"}, "--max-input-items"),
        ({"max_input_items": "lots"}, {}, "--max-input-items"),
        ({"idle_timeout": "soon"}, {}, "--idle-timeout"),
        ({"setup_slots": "-1"}, {}, "--setup-slots"),
        ({}, {"PROXY_SETUP_SLOTS": "eight"}, "--setup-slots"),
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
        # The placeholders shipped in deploy/: named, never started.
        (["serve", "--upstream", "http://127.0.0.1:1", "--fleet-secret",
          "change-me-to-a-long-random-secret"], "--fleet-secret"),
        (["serve", "--upstream", "http://127.0.0.1:1", "--api-key",
          "replace-with-client-keys"], "--api-key"),
        (["worker", "--upstream", "http://127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1",
          "--fleet-secret", "replace-with-a-long-random-secret"], "--fleet-secret"),
        # A hosted tool's MCP server outside --mcp-allow: refused at start like a bad flag,
        # not through the server's start-up (a traceback and exit 3).
        (["serve", "--upstream", "http://127.0.0.1:1", "--code-interpreter-mcp",
          "http://127.0.0.1:9/mcp"], "--code-interpreter-mcp"),
        (["serve", "--upstream", "http://127.0.0.1:1", "--code-interpreter-mcp",
          "http://127.0.0.1:9/mcp", "--mcp-allow", "https://tools.example/"],
         "--code-interpreter-mcp"),
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


def test_log_format_from_flag_or_environment() -> None:
    assert build_settings({}, {}).server.log_format == "text"
    assert build_settings({}, {"PROXY_LOG_FORMAT": "JSON"}).server.log_format == "json"
    flag_wins = build_settings({"log_format": "text"}, {"PROXY_LOG_FORMAT": "json"})
    assert flag_wins.server.log_format == "text"
    with pytest.raises(ConfigError) as info:
        build_settings({"log_format": "xml"}, {})
    assert info.value.flag == "--log-format"


def test_request_tolerance_modes_from_flags_and_environment() -> None:
    defaults = build_settings({}, {})
    assert (defaults.tolerance.params, defaults.tolerance.hosted_tools) == ("lenient", "drop")
    env = {"PROXY_PARAMS": "strict", "PROXY_HOSTED_TOOLS": "reject"}
    from_env = build_settings({}, env)
    assert (from_env.tolerance.params, from_env.tolerance.hosted_tools) == ("strict", "reject")
    from_flags = build_settings({"params": "lenient", "hosted_tools": "drop"}, env)
    assert (from_flags.tolerance.params, from_flags.tolerance.hosted_tools) == ("lenient", "drop")


@pytest.mark.parametrize(("flags", "flag"), [({"params": "loose"}, "--params"),
                                             ({"hosted_tools": "keep"}, "--hosted-tools")])
def test_bad_tolerance_mode_names_the_flag(flags: dict[str, str], flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings(flags, {})
    assert info.value.flag == flag


def test_the_fleet_secret_comes_from_the_flag_or_the_environment() -> None:
    from proxy.settings import fleet_secrets

    by_env = build_settings({}, {"PROXY_FLEET_SECRET": "from-env"})
    by_flag = build_settings({"fleet_secret": "from-flag"}, {"PROXY_FLEET_SECRET": "from-env"})
    assert fleet_secrets(by_env) == (b"from-env",) and fleet_secrets(by_flag) == (b"from-flag",)
    rotating = build_settings({"fleet_secret": "new, old"}, {})
    assert fleet_secrets(rotating) == (b"new", b"old")  # the first seals, both open
    # None given (or empty, as compose passes an unset variable): no public default, a
    # random secret per deployment (services/process/sealing.py).
    assert fleet_secrets(build_settings({}, {})) == ()
    assert fleet_secrets(build_settings({}, {"PROXY_FLEET_SECRET": ""})) == ()
    with pytest.raises(ConfigError) as info:
        build_settings({"fleet_secret": " , "}, {})
    assert info.value.flag == "--fleet-secret"
    assert "from-env" not in " ".join(describe_lines(by_env))


@pytest.mark.parametrize("placeholder", ["replace-with-client-keys",
                                         "replace-with-a-long-random-secret",
                                         "change-me-to-a-long-random-secret"])
def test_the_placeholders_shipped_in_deploy_refuse_to_start(placeholder: str,
                                                            tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(orjson.dumps({"keys": [{"key": placeholder, "name": "a"}]}).decode())
    cases = [({"fleet_secret": placeholder}, {}, "--fleet-secret"),
             ({}, {"PROXY_FLEET_SECRET": f"fine-secret, {placeholder}"}, "PROXY_FLEET_SECRET"),
             ({"api_key": [placeholder]}, {}, "--api-key"),
             ({}, {"PROXY_API_KEYS": f"k1,{placeholder}"}, "PROXY_API_KEYS"),
             ({"keys_file": str(keys_file)}, {}, "--keys-file")]
    for flags, env, named in cases:
        with pytest.raises(ConfigError) as info:
            build_settings(flags, env)
        assert named in str(info.value) and "placeholder" in str(info.value)


def test_the_sealed_blob_cap_is_a_setting_below_the_body_limit() -> None:
    assert build_settings({}, {}).sealing.max_bytes == 1024 * 1024
    assert build_settings({}, {"PROXY_MAX_SEALED_BYTES": "4096"}).sealing.max_bytes == 4096
    assert build_settings({"max_body_bytes": "8192"}, {}).sealing.max_bytes == 8192
    with pytest.raises(ConfigError) as info:
        build_settings({"max_sealed_bytes": "2048", "max_body_bytes": "1024"}, {})
    assert info.value.flag == "--max-sealed-bytes"


def test_the_job_queue_bounds_one_key_and_by_default_ten_keys_shares_in_all() -> None:
    defaults = build_settings({}, {})
    assert (defaults.jobs.max_queued, defaults.jobs.max_queued_total) == (1000, 10_000)
    raised = build_settings({"max_queued_jobs": "50"}, {})
    assert (raised.jobs.max_queued, raised.jobs.max_queued_total) == (50, 500)
    both = build_settings({"max_queued_jobs": "50"}, {"PROXY_MAX_QUEUED_JOBS_TOTAL": "60"})
    assert (both.jobs.max_queued, both.jobs.max_queued_total) == (50, 60)
    with pytest.raises(ConfigError) as info:
        build_settings({"max_queued_jobs": "50", "max_queued_jobs_total": "49"}, {})
    assert info.value.flag == "--max-queued-jobs-total"


def describe_lines(settings: Settings) -> list[str]:
    from proxy.settings import describe

    return list(describe(settings))


def test_stream_bounds_come_from_flags_and_environment() -> None:
    s = build_settings({"first_token_timeout": "7.5"}, {"PROXY_SEND_TIMEOUT": "3"})
    assert (s.timeouts.first_token, s.streams.send_timeout) == (7.5, 3.0)
    assert (Settings().timeouts.first_token, Settings().streams.send_timeout) == (120.0, 30.0)
    for flags, flag in (({"first_token_timeout": "0"}, "--first-token-timeout"),
                        ({"send_timeout": "never"}, "--send-timeout")):
        with pytest.raises(ConfigError) as info:
            build_settings(flags, {})
        assert info.value.flag == flag


def test_upstream_client_settings(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not checked here: the TLS context loads it")
    s = build_settings({"upstream_ca_bundle": str(bundle), "max_connections_per_upstream": "8"},
                       {"HTTPS_PROXY": "http://proxy.internal:3128", "no_proxy": ".fleet"})
    assert (s.upstream.ca_bundle, s.upstream.max_connections) == (str(bundle), 8)
    assert (s.upstream.https_proxy, s.upstream.no_proxy) == ("http://proxy.internal:3128", ".fleet")
    for flags, env, flag in (
            ({"upstream_ca_bundle": str(tmp_path / "missing.pem")}, {}, "--upstream-ca-bundle"),
            ({"max_connections_per_upstream": "0"}, {}, "--max-connections-per-upstream"),
            ({}, {"https_proxy": "https://proxy.internal:3128"}, "HTTPS_PROXY"),
            ({}, {"HTTPS_PROXY": "proxy.internal"}, "HTTPS_PROXY")):
        with pytest.raises(ConfigError) as info:
            build_settings(flags, env)
        assert info.value.flag == flag


def test_cache_modes_start_with_their_settings() -> None:
    exact = build_settings({"cache": "exact", "cache_ttl": "60"}, {})
    assert (exact.cache.mode, exact.cache.ttl) == ("exact", 60)
    semantic = build_settings({}, {"PROXY_CACHE": "semantic", "PROXY_EMBEDDING_MODEL": "emb",
                                   "PROXY_CACHE_SIMILARITY": "0.9"})
    assert (semantic.cache.mode, semantic.cache.embedding_model, semantic.cache.similarity) == (
        "semantic", "emb", 0.9)


def test_flow_control_and_routing_flags() -> None:
    from proxy.settings import ConfigError, build_settings

    defaults = build_settings({}, {})
    assert (defaults.flow.max_inflight_per_replica, defaults.flow.max_queued_requests,
            defaults.flow.queue_timeout, defaults.fleet.routing) == (None, 1024, 30.0, "affinity")
    given = build_settings({"max_inflight_per_replica": "8", "queue_timeout": "2.5",
                            "routing": "round_robin"}, {"PROXY_MAX_QUEUED_REQUESTS": "10"})
    assert (given.flow.max_inflight_per_replica, given.flow.max_queued_requests,
            given.flow.queue_timeout, given.fleet.routing) == (8, 10, 2.5, "round_robin")
    for flags, flag in (({"routing": "random"}, "--routing"),
                        ({"queue_timeout": "0"}, "--queue-timeout"),
                        ({"max_inflight_per_replica": "x"}, "--max-inflight-per-replica")):
        try:
            build_settings(flags, {})
        except ConfigError as exc:
            assert exc.flag == flag
        else:
            raise AssertionError(f"{flags} was accepted")
def test_lease_ttl_from_flag_or_environment() -> None:
    assert build_settings({}, {}).store.lease_ttl == 10.0
    assert build_settings({}, {"PROXY_LEASE_TTL": "3"}).store.lease_ttl == 3.0
    assert build_settings({"lease_ttl": "2.5"}, {"PROXY_LEASE_TTL": "3"}).store.lease_ttl == 2.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError) as info:
            build_settings({"lease_ttl": bad}, {})
        assert info.value.flag == "--lease-ttl"


def test_max_input_items_from_flag_or_env() -> None:
    assert build_settings({}, {}).limits.max_input_items == 2048
    assert build_settings({}, {"PROXY_MAX_INPUT_ITEMS": "64"}).limits.max_input_items == 64
    assert build_settings({"max_input_items": "8"},
                          {"PROXY_MAX_INPUT_ITEMS": "64"}).limits.max_input_items == 8


def test_workers_count_auto_and_the_shared_store_they_need() -> None:
    import os

    redis = {"redis_url": "redis://127.0.0.1:6379/0"}
    assert build_settings({}, {}).server.workers == 1
    assert build_settings({**redis, "workers": "3"}, {}).server.workers == 3
    assert build_settings(redis, {"PROXY_WORKERS": "2"}).server.workers == 2
    cores = len(os.sched_getaffinity(0))
    if cores > 1:
        assert build_settings({**redis, "workers": "auto"}, {}).server.workers == cores
    assert build_settings({"workers": "1"}, {}).server.workers == 1  # one process: embedded is fine
    for bad, flags in (("0", redis), ("two", redis), ("2", {})):
        with pytest.raises(ConfigError) as info:
            build_settings({**flags, "workers": bad}, {})
        assert info.value.flag == "--workers"


def test_allowed_origins_from_flags_or_environment() -> None:
    up = {"upstream": ["http://u:1"]}
    assert build_settings(up, {}).tenancy.allow_origins == ()
    assert build_settings({**up, "allow_origin": ["https://app.example", "http://l:3000"]},
                          {}).tenancy.allow_origins == ("https://app.example", "http://l:3000")
    assert build_settings(up, {"PROXY_ALLOW_ORIGIN": "https://a.example, https://b.example"}
                          ).tenancy.allow_origins == ("https://a.example", "https://b.example")


@pytest.mark.parametrize("value", ["app.example", "https://app.example/path", "null", "*"])
def test_a_bad_allowed_origin_names_the_flag(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings({"upstream": ["http://u:1"], "allow_origin": [value]}, {})
    assert str(info.value).startswith("--allow-origin")


# -- the option table (proxy/settings/options.py) -------------------------------------------


def test_every_field_of_every_group_is_set_by_exactly_one_option() -> None:
    import dataclasses

    from proxy.settings.options import OPTIONS

    paths = [opt.path for opt in OPTIONS]
    assert len(paths) == len(set(paths)), "two options set one field"
    assert len({opt.name for opt in OPTIONS}) == len(OPTIONS)
    fields = {f"{group.name}.{field.name}"
              for group in dataclasses.fields(Settings)
              for field in dataclasses.fields(getattr(Settings(), group.name))}
    assert set(paths) == fields


def test_the_parser_is_the_table() -> None:
    from proxy.cli import _parser
    from proxy.settings.options import OPTIONS

    subcommands = _parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("serve", "worker"):
        flags = {flag for action in subcommands[command]._actions
                 for flag in action.option_strings} - {"-h", "--help"}
        assert flags == {opt.flag_name for opt in OPTIONS
                         if opt.help is not None and command in opt.commands}


def test_help_shows_the_fields_own_default() -> None:
    from proxy.cli import _help
    from proxy.settings.options import OPTIONS

    by_name = {opt.name: opt for opt in OPTIONS}
    assert _help(by_name["connect_timeout"]).endswith("(default 5)")
    assert _help(by_name["cache_similarity"]).endswith("(default 0.95)")
    assert _help(by_name["response_ttl"]).endswith("(default 30 days)")
    assert "(default" not in _help(by_name["upstreams"])


def test_settings_of_and_replace_take_groups_or_option_names() -> None:
    from proxy.settings import Timeouts

    s = Settings.of(upstreams=("http://u:1",), cache_ttl=60, run_jobs=False)
    assert (s.fleet.upstreams, s.cache.ttl, s.jobs.run) == (("http://u:1",), 60, False)
    quick = s.replace(timeouts=Timeouts(connect=1), max_body_bytes=512)
    assert (quick.timeouts.connect, quick.limits.max_body_bytes, quick.cache.ttl) == (1, 512, 60)
    with pytest.raises(TypeError):
        Settings.of(cache_tll=60)


def test_setup_slots_default_off_and_set_by_flag_or_environment() -> None:
    assert build_settings({}, {}).flow.setup_slots == 0  # measured: no gate
    assert build_settings({"setup_slots": "8"}, {}).flow.setup_slots == 8
    assert build_settings({}, {"PROXY_SETUP_SLOTS": "16"}).flow.setup_slots == 16


def test_event_log_format_is_compact_unless_set_full_and_reaches_the_store() -> None:
    # Compact by default (every release from c405424 on reads it); full by flag or environment,
    # for a release before it beside this one (operations.md, "Event logs across an upgrade"),
    # and the store is opened so.
    from proxy.store.connection.factory import open_store

    assert build_settings({}, {}).store.event_log_format == "compact"
    assert build_settings({"event_log_format": "full"}, {}).store.event_log_format == "full"
    assert build_settings({}, {"PROXY_EVENT_LOG_FORMAT": "FULL"}).store.event_log_format \
        == "full"
    with pytest.raises(ConfigError, match="--event-log-format"):
        build_settings({"event_log_format": "tiny"}, {})
    assert open_store(None, compact_log=False).compact_log is False
    assert open_store(None).compact_log is True


@pytest.mark.parametrize("chosen", ["compact", "full"])
async def test_the_event_log_format_reaches_the_runtime_store(chosen: str) -> None:
    # `full` is the switch for an upgrade from a release before c405424: the store the runtime
    # opens (runtime.py) must write what the setting says.
    from proxy.runtime import Runtime
    from proxy.store.redis import RedisStore

    runtime = await Runtime.open(Settings.of(upstreams=("http://127.0.0.1:9",),
                                             event_log_format=chosen))
    try:
        store = runtime.store
        assert isinstance(store, RedisStore) and store.compact_log is (chosen == "compact")
    finally:
        await runtime.aclose()
