"""Validators: one raw value (a flag's string, or an environment variable's) in, one typed value
out, or a `ConfigError` naming the flag (docs/contract.md "Bad configuration": one line, no
traceback).

Each takes the value and the flag it came from (`Parse` below), so the option table can say
which validator a setting uses without a lambda per row. Values that depend on another setting
(the sealed-blob cap on the body limit, `--workers` on a Redis URL) are checked after all of
them, in build.py.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from urllib.parse import urlsplit

import orjson
import yaml

from proxy.core.policy.keysfile import KeysFile, KeysFileError, parse_keys_file
from proxy.core.policy.origin import parse_origin
from proxy.core.policy.urlpolicy import UrlRefused, parse_prefix, parse_target
from proxy.core.storage.topology import BadRedisUrl, parse_redis_url
from proxy.settings.fleetfile import FleetFileError, ReplicaSpec, load_fleet

# A value as given (never None or empty: those mean "not given", build.py) and its flag.
Parse = Callable[[object, str], object]

CACHE_MODES = ("off", "exact", "semantic")
PARAMS_MODES = ("lenient", "strict")
# How event-log entries keep a run of deltas (store/lua/packing.py, "Compact deltas").
EVENT_LOG_FORMATS = ("full", "compact")
HOSTED_TOOLS_MODES = ("drop", "reject")
ROUTING_MODES = ("affinity", "round_robin", "least_loaded")

# The example values shipped in deploy/ (docker-compose.yml, k8s/secret.yaml): a deployment
# that kept one would run with a secret or a key anyone can read, so they refuse to start.
PLACEHOLDERS = frozenset({"replace-with-client-keys", "replace-with-a-long-random-secret",
                          "change-me-to-a-long-random-secret"})


class ConfigError(ValueError):
    """A setting that cannot be used. `flag` names the command-line flag it came from."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


def split(value: str | None) -> list[str]:
    """A comma-separated environment value (`PROXY_UPSTREAMS=a,b`) as a list."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def text(value: object, flag: str) -> str:
    return str(value)


def otlp_endpoint(value: object, flag: str) -> str:
    """An http(s) URL with a host: the collector's base URL (tracing.py adds /v1/traces)."""
    url = str(value).strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(flag, "not an http(s) URL with a host")
    return url


def off(value: object, flag: str) -> bool:
    """A switch given (`--no-worker`): the field it names is off."""
    return False


def stripped(value: object, flag: str) -> str | None:
    """Surrounding blanks dropped; nothing left is None (not given)."""
    return str(value).strip() or None


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


def upstreams(values: object, flag: str) -> tuple[str, ...]:
    return tuple(normalize_upstream(str(url)) for url in _items(values))


def check_redis_url(url: object, flag: str = "--redis-url") -> str:
    """One of the forms core/storage/topology.py reads (one primary, TLS, Sentinel, Cluster).
    The message names what is wrong, not the URL: it may carry a password."""
    try:
        return parse_redis_url(str(url)).url
    except BadRedisUrl as exc:
        raise ConfigError("--redis-url", f"not a Redis URL: {exc}") from None


def check_proxy_url(url: object, flag: str = "HTTPS_PROXY") -> str:
    """An `http://[user:pass@]host:port` proxy (TLS to the proxy itself is not supported)."""
    parts = urlsplit(str(url).strip())
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError("HTTPS_PROXY", f"bad port in proxy URL: {url!r}") from None
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError("HTTPS_PROXY", f"only http://host:port proxies are supported: {url!r}")
    # Kept as given: the upstream client parses it again.
    return str(url)


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


def count(value: object, flag: str) -> int:
    """A whole number above 0 (jobs, items, bytes, seconds of a TTL)."""
    return int(check_positive(value, flag, integer=True))


def seconds(value: object, flag: str) -> float:
    return check_positive(value, flag)


def byte_count(value: object, flag: str) -> int:
    """A non-negative integer (0 is meaningful: no limit)."""
    digits = str(value).strip()
    if not (digits.isascii() and digits.isdigit()):
        raise ConfigError(flag, f"must be a whole number of bytes (0: no limit), got {value!r}")
    return int(digits)


def replica_count(value: object, flag: str) -> int:
    """A non-negative number of replicas (0: do not wait for any)."""
    digits = str(value).strip()
    if not (digits.isascii() and digits.isdigit()):
        raise ConfigError(flag, f"must be a whole number of replicas (0: none), got {value!r}")
    return int(digits)


def setup_slots(value: object, flag: str) -> int:
    """A whole number of creates set up at once, in arrival order (0: no gate)."""
    digits = str(value).strip()
    if not (digits.isascii() and digits.isdigit()):
        raise ConfigError(flag, f"must be a whole number of set-ups (0: no gate), got {value!r}")
    return int(digits)


def mode(choices: tuple[str, ...]) -> Parse:
    """One of `choices`, any case."""

    def parse(value: object, flag: str) -> str:
        chosen = str(value).strip().lower()
        if chosen not in choices:
            raise ConfigError(flag, f"unknown mode {chosen!r} (use {' or '.join(choices)})")
        return chosen

    return parse


def cache_mode(value: object, flag: str) -> str:
    chosen = str(value).strip().lower()
    if chosen not in CACHE_MODES:
        raise ConfigError(flag, f"unknown cache mode {chosen!r} (use off, exact or semantic)")
    return chosen


def log_level(value: object, flag: str) -> str:
    level = str(value).lower()
    if not isinstance(logging.getLevelName(level.upper()), int):
        raise ConfigError(flag, f"unknown log level {level!r}")
    return level


def log_format(value: object, flag: str) -> str:
    chosen = str(value).strip().lower()
    if chosen not in ("text", "json"):
        raise ConfigError(flag, f"unknown log format {chosen!r} (use text or json)")
    return chosen


def workers(value: object, flag: str) -> int:
    """A count >= 1, or `auto` (the cores this process may run on). That more than one needs a
    shared store is checked in build.py."""
    if str(value).strip().lower() == "auto":
        return max(1, len(os.sched_getaffinity(0)))
    return count(value, flag)


def load_factor(value: object, flag: str) -> float:
    factor = check_positive(value, flag)
    if not 1 <= factor < float("inf"):
        raise ConfigError(flag, "must be >= 1 (1 = no replica above the "
                                "mean; larger keeps more affinity)")
    return factor


def similarity(value: object, flag: str) -> float:
    """A cosine threshold in (0, 1]: 1 only takes identical vectors."""
    number = check_positive(value, flag)
    if number > 1:
        raise ConfigError(flag, f"a cosine is at most 1: {value!r}")
    return number


# The admin key creates and revokes client keys: at least 128 bits as hex.
MIN_ADMIN_KEY = 32


def api_keys(values: object, flag: str) -> tuple[str, ...]:
    keys = tuple(str(key) for key in _items(values))
    if any(not key or any(c.isspace() for c in key) for key in keys):
        raise ConfigError(flag, "keys must be non-empty and contain no whitespace")
    refuse_placeholders("--api-key / PROXY_API_KEYS", keys)
    return keys


def admin_key(value: object, flag: str) -> str:
    """The operator's admin key: long enough not to be guessed (the admin API creates keys)."""
    key = str(value).strip()
    if len(key) < MIN_ADMIN_KEY or any(c.isspace() for c in key):
        raise ConfigError(flag, f"must be at least {MIN_ADMIN_KEY} characters without "
                                "whitespace (e.g. `openssl rand -hex 32`)")
    refuse_placeholders(flag, [key])
    return key


def refuse_placeholders(setting: str, values: Sequence[str]) -> None:
    for value in values:
        if value.strip() in PLACEHOLDERS:
            raise ConfigError(setting, f"{value.strip()!r} is the placeholder shipped in "
                                       "deploy/; set a value of your own")


def fleet_secret(value: object, flag: str) -> str | None:
    """Comma-separated secrets (the first seals, every one opens). Blank: None (a random secret
    per deployment, services/process/sealing.py)."""
    if not str(value).strip():
        return None
    parts = split(str(value))
    if not parts:
        raise ConfigError(flag, "give at least one non-empty secret")
    refuse_placeholders("--fleet-secret / PROXY_FLEET_SECRET", parts)
    return str(value)


def existing_file(value: object, flag: str) -> str:
    if not os.path.isfile(str(value)):
        raise ConfigError(flag, f"no such file: {value}")
    return str(value)


def mcp_allow(values: object, flag: str) -> tuple[str, ...]:
    """Each prefix an http(s) URL with a host (a bare scheme would admit everything)."""
    return _prefixes(values, flag, host_required=True)


def web_search_url(value: object, flag: str) -> str:
    """An http(s) URL in normal form (core/policy/urlpolicy.py), without a fragment: the endpoint
    the query is appended to."""
    text = str(value).strip()
    try:
        target = parse_target(text)
    except UrlRefused as exc:
        raise ConfigError(flag, f"{text!r} is not a usable URL ({exc}), e.g. "
                                "http://127.0.0.1:8888/search") from None
    if target.scheme not in ("http", "https") or "#" in text:
        raise ConfigError(flag, f"{text!r} must be an http(s) URL without a fragment, e.g. "
                                "http://127.0.0.1:8888/search")
    return text


def fetch_allow(values: object, flag: str) -> tuple[str, ...]:
    """`none` alone: fetch nothing (data: URLs only)."""
    if [str(v).strip().lower() for v in _items(values)] == ["none"]:
        return ()
    return _prefixes(values, flag, host_required=False)


def _prefixes(values: object, flag: str, *, host_required: bool) -> tuple[str, ...]:
    out: list[str] = []
    for value in _items(values):
        prefix = str(value).strip()
        try:
            parse_prefix(prefix, host_required=host_required)
        except UrlRefused as exc:
            example = "https://tools.example.com/mcp" if host_required else "https://"
            raise ConfigError(flag, f"{prefix!r} is not an http(s) URL prefix ({exc}), "
                                    f"e.g. {example}") from None
        out.append(prefix)
    return tuple(out)


def hosts(values: object, flag: str) -> tuple[str, ...]:
    """Hosts as uvicorn's `--forwarded-allow-ips` takes them (comma-separated in one flag
    too): addresses, networks, `*`, or any other text (compared as it is: a Unix socket's
    name), so none is refused."""
    return tuple(host for value in _items(values) for host in split(str(value)))


def origins(values: object, flag: str) -> tuple[str, ...]:
    """Each an origin as a browser sends it: `scheme://host[:port]`, nothing after."""
    out: list[str] = []
    for value in _items(values):
        origin = str(value).strip()
        if parse_origin(origin) is None:
            raise ConfigError(flag, f"{origin!r} is not an origin: expected "
                                    "scheme://host[:port], e.g. https://app.example")
        out.append(origin)
    return tuple(out)


def fleet_file(path: object, flag: str) -> tuple[ReplicaSpec, ...]:
    """The replicas of `--fleet FILE` (that it is not given with `--upstream`: build.py)."""
    try:
        return load_fleet(str(path), normalize_upstream)
    except FleetFileError as exc:
        raise ConfigError(flag, str(exc)) from None


def keys_file(path: object, flag: str) -> KeysFile:
    keys = load_keys_file(str(path))
    refuse_placeholders(flag, [entry.key for entry in keys.keys])
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
        return replace(parse_keys_file(data), source=path)
    except KeysFileError as exc:
        raise ConfigError("--keys-file", str(exc)) from None


def _items(values: object) -> Sequence[object]:
    """A repeatable option's values: a list from the flags, or a comma-split environment value."""
    return values if isinstance(values, (list, tuple)) else (values,)
