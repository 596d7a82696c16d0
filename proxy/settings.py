"""Settings: one frozen object built once at start from flags and the environment.

Flags win over environment variables, which win over defaults. Every value is validated here,
before anything starts, and a bad one raises `ConfigError` naming the flag, so the CLI can exit
with one line instead of a traceback (CONTRACT.md "Bad configuration").
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import orjson
import yaml

from proxy.core.keysfile import KeysFile, KeysFileError, parse_keys_file
from proxy.core.origin import parse_origin
from proxy.core.storagebudget import DEFAULT_MAX_STORED_BYTES
from proxy.core.urlpolicy import UrlRefused, parse_prefix
from proxy.fleetfile import FleetFileError, ReplicaSpec, load_fleet

CACHE_MODES = ("off", "exact", "semantic")
PARAMS_MODES = ("lenient", "strict")
HOSTED_TOOLS_MODES = ("drop", "reject")
ROUTING_MODES = ("affinity", "round_robin", "least_loaded")


class ConfigError(ValueError):
    """A setting that cannot be used. `flag` names the command-line flag it came from."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


# `--fetch-allow` not given: https URLs, of public addresses only (core/urlpolicy.py).
FETCH_ALLOW_DEFAULT = ("https://",)

@dataclass(frozen=True)
class Timeouts:
    """Seconds. `first_byte` bounds the wait for the upstream's response headers, `idle` the gap
    between two chunks of a stream (a stalled replica becomes `response.failed`, not a hang)."""

    connect: float = 5.0
    first_byte: float = 120.0
    idle: float = 60.0
    # A stream's budget from sending the request to the upstream's first body byte: vLLM sends
    # its headers before it has even queued the request, so a queue wait is not an idle gap.
    first_token: float = 120.0


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    upstreams: tuple[str, ...] = ()
    upstream_api_key: str | None = None
    # The fleet file's replicas (`--fleet`); their URLs are `upstreams` too.
    fleet: tuple[ReplicaSpec, ...] = ()
    # A keyed request leaves its replica once that one's load passes the mean by this factor.
    affinity_load_factor: float = 1.25
    redis_url: str | None = None
    api_keys: tuple[str, ...] = ()
    cache: str = "off"
    worker: bool = True
    worker_concurrency: int = 16
    max_body_bytes: int = 16 * 1024 * 1024
    timeouts: Timeouts = field(default_factory=Timeouts)
    ping_interval: float = 15.0
    # Seconds a stream's write to a client that stopped reading may stay blocked before the
    # stream is abandoned (its upstream request aborted, its connection freed).
    send_timeout: float = 30.0
    # Seconds a WebSocket connection lives before it is closed with the error
    # `websocket_connection_limit_reached`.
    ws_max_age: float = 3600.0
    # Upstream connections: at most this many to one replica (of 2048 in all), so one hung
    # replica cannot hold every slot of the pool.
    max_connections_per_upstream: int = 1024
    # TLS to https upstreams is always verified: against this CA bundle (PEM) when given,
    # else the system's store.
    upstream_ca_bundle: str | None = None
    # HTTPS_PROXY / NO_PROXY (the environment's usual names): https upstreams are reached
    # through the proxy's CONNECT tunnel unless NO_PROXY names them.
    https_proxy: str | None = None
    no_proxy: str = ""
    # How often the fleet re-reads each replica's /health and /v1/models.
    discovery_interval: float = 10.0
    response_ttl: int = 30 * 24 * 3600
    # Event logs are big (one entry per delta) and replay is for resuming recent streams; an
    # older response still replays, rebuilt from its final object.
    event_ttl: int = 3600
    # Most input items one request (or one conversation add) may carry.
    max_input_items: int = 2048
    # Background jobs: a worker refreshes its running jobs every `heartbeat_interval` seconds;
    # a job whose worker stopped is taken over within 3 intervals. The queue holds at most
    # `max_queued_jobs` (queued + running); past that, 429.
    heartbeat_interval: float = 2.0
    max_queued_jobs: int = 10_000
    # Seconds running jobs get to finish when a worker stops.
    shutdown_grace: float = 30.0
    # Seconds a stored foreground response's lease lasts unless its instance renews it (every
    # third of it); a dead instance's responses end `failed` within about 1.5 leases.
    lease_ttl: float = 10.0
    # A replay that sees no event for this long re-checks the response's status.
    follow_idle: float = 30.0
    log_level: str = "info"
    # `text` for people, `json` (one object per line) for log pipelines.
    log_format: str = "text"
    # Request tolerance (core/tolerance.py): unknown create fields ignored or refused; hosted
    # tools (web_search, ...) left out of the upstream request or refused.
    params: str = "lenient"
    hosted_tools: str = "drop"
    # Fleet-wide secret that authenticates sealed blobs (core/seal.py); every instance sharing
    # one Redis must have the same one. None: a random secret per deployment, shared through
    # the store (services/sealing.py); there is no public default.
    fleet_secret: str | None = None
    # The response cache (services/cache.py): entries live `cache_ttl` seconds; `semantic` asks
    # `embedding_model` on the fleet's /v1/embeddings and takes a neighbour at or above
    # `cache_similarity` (cosine). An answer bigger than `cache_max_entry_bytes` is not kept,
    # and one semantic namespace keeps its newest `cache_max_per_namespace` entries. An
    # embedding call slower than `cache_embedding_timeout` seconds is a miss.
    cache_ttl: int = 86_400
    embedding_model: str | None = None
    cache_similarity: float = 0.95
    cache_max_entry_bytes: int = 1024 * 1024
    cache_max_per_namespace: int = 256
    cache_embedding_timeout: float = 0.5
    # Flow control (services/admission.py): a replica takes at most `max_inflight_per_replica`
    # requests at once from this process; past that requests wait, at most
    # `max_queued_requests` of them and each at most `queue_timeout` seconds, then 429.
    max_inflight_per_replica: int = 64
    max_queued_requests: int = 1024
    queue_timeout: float = 30.0
    # How the fleet picks a replica: `affinity` (the default; services/fleet.py), or the
    # baselines `round_robin` and `least_loaded` that ignore affinity keys (benchmarks).
    routing: str = "affinity"
    # MCP tools run by the proxy (core/mcp.py, services/toolloop.py): the URL prefixes an MCP
    # `server_url` must start with (none: MCP tools are a 400), the calls one response may
    # make at most, and the seconds one MCP operation (list or call) may take.
    mcp_allow: tuple[str, ...] = ()
    max_mcp_calls: int = 16
    mcp_timeout: float = 60.0
    # URLs the proxy fetches for the fleet (issue 23, services/media.py): an image (or audio,
    # video) URL in a request is fetched here and sent to vLLM inline as a data: URL, when one
    # of these prefixes admits it (core/urlpolicy.py; the default: any https URL of a public
    # address); `()` fetches nothing (data: URLs only). Each fetch is bounded by
    # `fetch_timeout` seconds, and a request's fetched bytes by `max_body_bytes`.
    fetch_allow: tuple[str, ...] = FETCH_ALLOW_DEFAULT
    fetch_timeout: float = 10.0
    # `--keys-file`: more accepted keys, each with a name and limits (services/limits.py).
    keys_file: KeysFile | None = None
    # Multi-tenant storage bound (issue 23): bytes one key may keep in the shared store when
    # its keys-file entry (or the file's defaults) sets no `max_stored_bytes`; the anonymous
    # tenant of a proxy without keys too. 0: no limit. core/storagebudget.py says why 1 GiB.
    max_stored_bytes_per_key: int = DEFAULT_MAX_STORED_BYTES
    # `serve --workers N`: serving processes on one port (prefork.py); more than one shares
    # state only through Redis, so it needs `redis_url`.
    workers: int = 1
    # -- issue 23, the edges (core/origin.py) --
    # With auth off, WebSocket handshakes from these browser origins (`https://app.example`)
    # are accepted besides the proxy's own; any other `Origin` is refused.
    allow_origins: tuple[str, ...] = ()

    # -- issue 23, sealed blobs and expansion (core/seal.py, core/expansion.py) ------------
    # The most one sealed blob (reasoning `encrypted_content`, a compaction item) may inflate
    # to; what all of a request's references, history and opened blobs add up to is bounded
    # by `max_body_bytes`. At most `max_body_bytes` (the default is lowered to it).
    max_sealed_bytes: int = 1024 * 1024

    def replace(self, **changes: object) -> Settings:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def normalize_upstream(url: str, flag: str = "--upstream") -> str:
    """`http://h:8000`, `http://h:8000/` and `http://h:8000/v1` all mean the server root."""
    raw = url.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(flag, f"not an http(s) URL: {url!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(flag, f"bad port in URL: {url!r}") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}{path}"


def check_redis_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("redis", "rediss", "unix") or (
        parts.scheme != "unix" and not parts.hostname
    ):
        raise ConfigError("--redis-url", f"not a redis:// URL: {url!r}")
    return url.strip()


def check_proxy_url(url: str) -> str:
    """An `http://[user:pass@]host:port` proxy (TLS to the proxy itself is not supported)."""
    parts = urlsplit(url.strip())
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError("HTTPS_PROXY", f"bad port in proxy URL: {url!r}") from None
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError("HTTPS_PROXY", f"only http://host:port proxies are supported: {url!r}")
    return url.strip()


def check_port(value: object, flag: str = "--port") -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise ConfigError(flag, f"not a port number: {value!r}") from None
    if not 0 < port < 65536:
        raise ConfigError(flag, f"port out of range 1-65535: {port}")
    return port


def check_positive(value: object, flag: str, *, integer: bool = False) -> float:
    try:
        number = int(str(value)) if integer else float(str(value))
    except ValueError:
        raise ConfigError(flag, f"not a number: {value!r}") from None
    if number <= 0:
        raise ConfigError(flag, f"must be greater than 0: {value!r}")
    return number


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def build_settings(flags: Mapping[str, object], env: Mapping[str, str]) -> Settings:
    """Merge parsed flags (None or empty = not given) with `PROXY_*` variables, then validate."""

    def pick(name: str, env_name: str) -> object:
        value = flags.get(name)
        if value is None or value == [] or value == ():
            return env.get(env_name)
        return value

    upstream_values = flags.get("upstream") or _split(env.get("PROXY_UPSTREAMS"))
    upstreams = tuple(normalize_upstream(str(u)) for u in upstream_values)  # type: ignore[attr-defined]
    fleet = _fleet_file(pick("fleet", "PROXY_FLEET"), upstreams)
    upstreams = upstreams or tuple(spec.url for spec in fleet)

    redis_url = pick("redis_url", "PROXY_REDIS_URL")
    key_values = flags.get("api_key") or _split(env.get("PROXY_API_KEYS"))
    api_keys = tuple(str(k) for k in key_values)  # type: ignore[attr-defined]
    if any(not key or any(c.isspace() for c in key) for key in api_keys):
        raise ConfigError("--api-key", "keys must be non-empty and contain no whitespace")

    cache = str(pick("cache", "PROXY_CACHE") or "off").strip().lower()
    if cache not in CACHE_MODES:
        raise ConfigError("--cache", f"unknown cache mode {cache!r} (use off, exact or semantic)")
    embedding_model = str(pick("embedding_model", "PROXY_EMBEDDING_MODEL") or "").strip()
    if cache == "semantic" and not embedding_model:
        # Said at start rather than at the first request: semantic needs vectors from the fleet.
        raise ConfigError("--embedding-model", "`--cache semantic` needs the name of a model "
                                               "the fleet serves on /v1/embeddings")

    log_level, log_format = _logging(pick)

    defaults = Settings()

    def mode(name: str, choices: tuple[str, ...]) -> str:
        value = str(pick(name, "PROXY_" + name.upper()) or getattr(defaults, name))
        value = value.strip().lower()
        if value not in choices:
            raise ConfigError("--" + name.replace("_", "-"),
                              f"unknown mode {value!r} (use {' or '.join(choices)})")
        return value

    def number(name: str, default: float, *, integer: bool = False) -> float:
        """A positive number from `--<name>` / `PROXY_<NAME>`, else `default`."""
        flag = "--" + name.replace("_", "-")
        return check_positive(pick(name, "PROXY_" + name.upper()) or default, flag,
                              integer=integer)

    def count(name: str) -> int:
        return int(number(name, getattr(defaults, name), integer=True))

    def seconds(name: str) -> float:
        return number(name, getattr(defaults, name))

    timeouts = Timeouts(
        connect=number("connect_timeout", defaults.timeouts.connect),
        first_byte=number("first_byte_timeout", defaults.timeouts.first_byte),
        idle=number("idle_timeout", defaults.timeouts.idle),
        first_token=number("first_token_timeout", defaults.timeouts.first_token),
    )
    upstream_key = pick("upstream_api_key", "PROXY_UPSTREAM_API_KEY")
    fleet_secret = _fleet_secret(pick("fleet_secret", "PROXY_FLEET_SECRET"))
    _refuse_placeholders("--api-key / PROXY_API_KEYS", api_keys)
    ca_bundle, https_proxy = _upstream_client(pick, env)
    workers = _workers(pick("workers", "PROXY_WORKERS"), shared=bool(redis_url))
    return Settings(
        workers=workers,
        host=str(pick("host", "PROXY_HOST") or defaults.host),
        port=check_port(pick("port", "PROXY_PORT") or defaults.port),
        upstreams=upstreams,
        upstream_api_key=str(upstream_key) if upstream_key else None,
        redis_url=check_redis_url(str(redis_url)) if redis_url else None,
        api_keys=api_keys,
        cache=cache,
        worker=not flags.get("no_worker"),
        worker_concurrency=count("worker_concurrency"),
        max_body_bytes=count("max_body_bytes"),
        max_input_items=count("max_input_items"),
        timeouts=timeouts,
        ping_interval=seconds("ping_interval"),
        send_timeout=seconds("send_timeout"),
        ws_max_age=seconds("ws_max_age"),
        max_connections_per_upstream=count("max_connections_per_upstream"),
        upstream_ca_bundle=ca_bundle,
        https_proxy=https_proxy,
        no_proxy=env.get("NO_PROXY") or env.get("no_proxy") or "",
        discovery_interval=seconds("discovery_interval"),
        response_ttl=count("response_ttl"),
        event_ttl=count("event_ttl"),
        heartbeat_interval=seconds("heartbeat_interval"),
        max_queued_jobs=count("max_queued_jobs"),
        shutdown_grace=seconds("shutdown_grace"),
        lease_ttl=seconds("lease_ttl"),
        log_level=log_level,
        log_format=log_format,
        params=mode("params", PARAMS_MODES),
        hosted_tools=mode("hosted_tools", HOSTED_TOOLS_MODES),
        fleet_secret=fleet_secret,
        max_sealed_bytes=_sealed_cap(pick("max_sealed_bytes", "PROXY_MAX_SEALED_BYTES"),
                                     count("max_body_bytes")),
        cache_ttl=count("cache_ttl"),
        embedding_model=embedding_model or None,
        cache_similarity=_similarity(pick("cache_similarity", "PROXY_CACHE_SIMILARITY")),
        cache_max_entry_bytes=count("cache_max_entry_bytes"),
        cache_max_per_namespace=count("cache_max_per_namespace"),
        cache_embedding_timeout=seconds("cache_embedding_timeout"),
        max_inflight_per_replica=count("max_inflight_per_replica"),
        max_queued_requests=count("max_queued_requests"),
        queue_timeout=seconds("queue_timeout"),
        routing=mode("routing", ROUTING_MODES),
        mcp_allow=_mcp_allow(flags.get("mcp_allow") or _split(env.get("PROXY_MCP_ALLOW"))),
        max_mcp_calls=count("max_mcp_calls"),
        mcp_timeout=seconds("mcp_timeout"),
        fetch_allow=_fetch_allow(flags.get("fetch_allow") or
                                 _split(env.get("PROXY_FETCH_ALLOW"))),
        fetch_timeout=seconds("fetch_timeout"),
        keys_file=_keys_file(pick),
        max_stored_bytes_per_key=_byte_count(pick, "max_stored_bytes_per_key",
                                             defaults.max_stored_bytes_per_key),
        fleet=fleet,
        affinity_load_factor=_load_factor(pick("affinity_load_factor",
                                               "PROXY_AFFINITY_LOAD_FACTOR")),
        allow_origins=_origins(flags.get("allow_origin")
                               or _split(env.get("PROXY_ALLOW_ORIGIN"))),
    )


Pick = Callable[[str, str], object]


def _mcp_allow(values: object) -> tuple[str, ...]:
    """Each prefix an http(s) URL with a host (a bare scheme would admit everything)."""
    return _prefixes(values, "--mcp-allow", host_required=True)


def _fetch_allow(values: object) -> tuple[str, ...]:
    """Not given: the default (https, public addresses); `none`: fetch nothing."""
    if not values:
        return FETCH_ALLOW_DEFAULT
    if [str(v).strip().lower() for v in values] == ["none"]:  # type: ignore[attr-defined]
        return ()
    return _prefixes(values, "--fetch-allow", host_required=False)


def _prefixes(values: object, flag: str, *, host_required: bool) -> tuple[str, ...]:
    out: list[str] = []
    for value in values or ():  # type: ignore[attr-defined]
        prefix = str(value).strip()
        try:
            parse_prefix(prefix, host_required=host_required)
        except UrlRefused as exc:
            example = "https://tools.example.com/mcp" if host_required else "https://"
            raise ConfigError(flag, f"{prefix!r} is not an http(s) URL prefix ({exc}), "
                                    f"e.g. {example}") from None
        out.append(prefix)
    return tuple(out)


def _origins(values: object) -> tuple[str, ...]:
    """Each an origin as a browser sends it: `scheme://host[:port]`, nothing after."""
    out: list[str] = []
    for value in values or ():  # type: ignore[attr-defined]
        text = str(value).strip()
        if parse_origin(text) is None:
            raise ConfigError("--allow-origin", f"{text!r} is not an origin: expected "
                                                "scheme://host[:port], e.g. https://app.example")
        out.append(text)
    return tuple(out)


def _workers(value: object, *, shared: bool) -> int:
    """`--workers`: a count >= 1, or `auto` (the cores this process may run on). More than one
    needs a shared store (`shared`: a Redis URL)."""
    if value is None or value == "":
        return 1
    if str(value).strip().lower() == "auto":
        workers = max(1, len(os.sched_getaffinity(0)))
    else:
        workers = int(check_positive(value, "--workers", integer=True))
    if workers > 1 and not shared:
        # The embedded store lives in one process's memory: N processes would be N proxies
        # that cannot see each other's responses, streams or jobs.
        raise ConfigError("--workers", "more than one process needs a shared store: "
                                       "give --redis-url (or use --workers 1)")
    return workers


def _fleet_file(path: object, upstreams: tuple[str, ...]) -> tuple[ReplicaSpec, ...]:
    """The replicas of `--fleet FILE`; none without it. Not together with `--upstream`: two
    lists of the fleet would disagree sooner or later."""
    if not path:
        return ()
    if upstreams:
        raise ConfigError("--fleet", "give either --fleet or --upstream (PROXY_UPSTREAMS), "
                                     "not both")
    try:
        return load_fleet(str(path), normalize_upstream)
    except FleetFileError as exc:
        raise ConfigError("--fleet", str(exc)) from None


def _load_factor(value: object) -> float:
    if value is None or value == "":
        return Settings.affinity_load_factor
    factor = check_positive(value, "--affinity-load-factor")
    if not 1 <= factor < float("inf"):
        raise ConfigError("--affinity-load-factor", "must be >= 1 (1 = no replica above the "
                                                    "mean; larger keeps more affinity)")
    return factor


def _logging(pick: Pick) -> tuple[str, str]:
    """`--log-level` and `--log-format`, validated."""
    log_level = str(pick("log_level", "PROXY_LOG_LEVEL") or "info").lower()
    if not isinstance(logging.getLevelName(log_level.upper()), int):
        raise ConfigError("--log-level", f"unknown log level {log_level!r}")
    log_format = str(pick("log_format", "PROXY_LOG_FORMAT") or "text").strip().lower()
    if log_format not in ("text", "json"):
        raise ConfigError("--log-format", f"unknown log format {log_format!r} (use text or json)")
    return log_level, log_format


def _upstream_client(pick: Pick, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The CA bundle and the HTTPS proxy the upstream client uses, validated."""
    ca_bundle = pick("upstream_ca_bundle", "PROXY_UPSTREAM_CA_BUNDLE")
    if ca_bundle and not os.path.isfile(str(ca_bundle)):
        raise ConfigError("--upstream-ca-bundle", f"no such file: {ca_bundle}")
    https_proxy = env.get("HTTPS_PROXY") or env.get("https_proxy") or None
    if https_proxy:
        check_proxy_url(https_proxy)
    return (str(ca_bundle) if ca_bundle else None), https_proxy


def _byte_count(pick: Pick, name: str, default: int) -> int:
    """A non-negative integer from `--<name>` / `PROXY_<NAME>` (0 is meaningful: no limit)."""
    value = pick(name, "PROXY_" + name.upper())
    if value is None or value == "":
        return default
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()):
        raise ConfigError("--" + name.replace("_", "-"),
                          f"must be a whole number of bytes (0: no limit), got {value!r}")
    return int(text)


def _keys_file(pick: Pick) -> KeysFile | None:
    path = pick("keys_file", "PROXY_KEYS_FILE")
    if not path:
        return None
    keys = load_keys_file(str(path))
    _refuse_placeholders("--keys-file", [entry.key for entry in keys.keys])
    return keys


def load_keys_file(path: str) -> KeysFile:
    """Read `--keys-file`: YAML when the name ends in .yaml/.yml, else JSON. Every problem is
    one ConfigError naming the flag and the field."""
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ConfigError("--keys-file", f"cannot read {path}: {exc.strerror}") from None
    yaml_file = path.lower().endswith((".yaml", ".yml"))
    try:
        data = yaml.safe_load(raw) if yaml_file else orjson.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:  # orjson.JSONDecodeError is a ValueError
        detail = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError("--keys-file", f"{path} is not valid "
                                         f"{'YAML' if yaml_file else 'JSON'}: {detail}") from None
    try:
        return parse_keys_file(data)
    except KeysFileError as exc:
        raise ConfigError("--keys-file", str(exc)) from None


# The example values shipped in deploy/ (docker-compose.yml, k8s/secret.yaml): a deployment
# that kept one would run with a secret or a key anyone can read, so they refuse to start.
PLACEHOLDERS = frozenset({"replace-with-client-keys", "replace-with-a-long-random-secret",
                          "change-me-to-a-long-random-secret"})


def _refuse_placeholders(setting: str, values: Sequence[str]) -> None:
    for value in values:
        if value.strip() in PLACEHOLDERS:
            raise ConfigError(setting, f"{value.strip()!r} is the placeholder shipped in "
                                       "deploy/; set a value of your own")


def _fleet_secret(value: object) -> str | None:
    """`--fleet-secret`: comma-separated secrets (the first seals, every one opens). Empty or
    absent: None (a random secret per deployment, services/sealing.py)."""
    if value is None or not str(value).strip():
        return None
    parts = _split(str(value))
    if not parts:
        raise ConfigError("--fleet-secret", "give at least one non-empty secret")
    _refuse_placeholders("--fleet-secret / PROXY_FLEET_SECRET", parts)
    return str(value)


def _sealed_cap(value: object, body: int) -> int:
    """`--max-sealed-bytes`; by default 1 MiB, or the body limit when that is smaller."""
    if value is None or value == "":
        return min(Settings.max_sealed_bytes, body)
    cap = int(check_positive(value, "--max-sealed-bytes", integer=True))
    if cap > body:
        raise ConfigError("--max-sealed-bytes", f"must be at most --max-body-bytes ({body})")
    return cap


def fleet_secrets(settings: Settings) -> tuple[bytes, ...]:
    """The operator's fleet secrets, comma-separated: the first seals, every one opens
    (rotation). Empty: none was given (services/sealing.py makes one per deployment)."""
    return tuple(part.encode() for part in _split(settings.fleet_secret))


def _similarity(value: object) -> float:
    """A cosine threshold in (0, 1]: 1 only takes identical vectors."""
    if value is None or value == "":
        return Settings.cache_similarity
    number = check_positive(value, "--cache-similarity")
    if number > 1:
        raise ConfigError("--cache-similarity", f"a cosine is at most 1: {value!r}")
    return number


def accepted_keys(settings: Settings) -> tuple[str, ...]:
    """Every client key: `--api-key`s and the keys file's (auth is on when there is one)."""
    listed = settings.keys_file.keys if settings.keys_file else ()
    return settings.api_keys + tuple(entry.key for entry in listed)


def require_upstreams(settings: Settings, command: str) -> None:
    if not settings.upstreams:
        raise ConfigError("--upstream", f"`{command}` needs at least one upstream")


def describe(settings: Settings) -> Sequence[str]:
    """Lines for the start-up log: what runs, never a secret."""
    return (
        f"upstreams: {', '.join(settings.upstreams) or '(none)'}",
        f"store: {'redis' if settings.redis_url else 'embedded (one instance; lost on exit)'}",
        f"auth: {f'{len(keys)} key(s)' if (keys := accepted_keys(settings)) else 'OFF (no keys)'}",
        f"cache: {settings.cache}",
        f"processes: {settings.workers}",
    )
