"""Which Redis a `--redis-url` names, and how it is reached: parsed here, without I/O, so the
settings check refuses a bad URL at start and `open_store` (factory.py) builds its client from
the same reading.

Forms (docs/contract.md "Redis topologies"):
- `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`, `rediss://...` (TLS), `unix:///path.sock`:
  one primary; redis-py reads the URL itself (`kind == "single"`, `url` kept as given);
- `redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]`: the primary that the
  sentinels at those addresses call MASTER, followed across failovers. PASSWORD is the data
  nodes' (the primary's and its replicas' `requirepass`, what the proxy's commands need);
  sentinels often run without one, and AUTH to a server without a password is an error, so
  theirs is separate and optional: `?sentinel_password=...`;
- `redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]`: seeds of a Redis Cluster. Parsed so
  that the URL is understood, but not served yet (settings/build.py refuses it at start).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

SINGLE_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_PORT = 6379


class BadRedisUrl(ValueError):
    """The URL is not one of the forms above; the message says why (never the password)."""


@dataclass(frozen=True)
class RedisTarget:
    kind: str  # "single" | "sentinel" | "cluster"
    url: str  # as given (the single form is handed to redis-py as is)
    hosts: tuple[tuple[str, int], ...] = ()  # sentinels or cluster seeds
    master: str = ""  # the sentinels' name for the primary
    db: int = 0
    password: str | None = None  # the data nodes'
    sentinel_password: str | None = None


def parse_redis_url(raw: str) -> RedisTarget:
    url = raw.strip()
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in SINGLE_SCHEMES:
        return _single(url, scheme)
    if scheme in (SENTINEL_SCHEME, CLUSTER_SCHEME):
        return _multi(url, scheme)
    raise BadRedisUrl("expected redis://, rediss://, unix://, redis+sentinel:// or "
                      "redis+cluster://")


def _single(url: str, scheme: str) -> RedisTarget:
    parts = urlsplit(url)
    if scheme != "unix" and not parts.hostname:
        raise BadRedisUrl("no host")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise BadRedisUrl("bad port") from None
    return RedisTarget("single", url)


def _multi(url: str, scheme: str) -> RedisTarget:
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    password: str | None = None
    if "@" in netloc:
        auth, _, netloc = netloc.rpartition("@")
        # `:PASSWORD` (no user) or `USER:PASSWORD`: only the password is used.
        password = unquote(auth.partition(":")[2] if ":" in auth else auth) or None
    default_port = DEFAULT_SENTINEL_PORT if scheme == SENTINEL_SCHEME else DEFAULT_PORT
    hosts = tuple(_address(one, default_port) for one in netloc.split(","))
    options = parse_qs(query)
    sentinel_password = unquote(options["sentinel_password"][0]) \
        if options.get("sentinel_password") else None
    segments = [s for s in path.split("/") if s]
    if scheme == CLUSTER_SCHEME:
        if segments:
            raise BadRedisUrl("a cluster URL has no path (a cluster has only db 0)")
        return RedisTarget("cluster", url, hosts, password=password)
    if not segments or len(segments) > 2:
        raise BadRedisUrl("expected redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB]")
    db = 0
    if len(segments) == 2:
        if not segments[1].isdigit():
            raise BadRedisUrl(f"the db must be a number, got {segments[1]!r}")
        db = int(segments[1])
    return RedisTarget("sentinel", url, hosts, unquote(segments[0]), db, password,
                       sentinel_password)


def _address(text: str, default_port: int) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = text.strip(), str(default_port)
    host = host.strip("[]")  # [::1]:26379
    if not host:
        raise BadRedisUrl(f"no host in {text!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRedisUrl(f"bad port in {text!r}")
    return host, int(port)
