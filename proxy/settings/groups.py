"""The settings, one frozen group per concern; a service receives its group, not the whole.

Each group's fields carry their types and defaults; which flag and environment variable set a
field, its help and its validator are in options.py (one row per option). `Settings.of` and
`Settings.replace` take either a group (`timeouts=Timeouts(...)`) or an option's name
(`cache_ttl=60`, `upstreams=(...)`), so a test changes one value without spelling its group.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from proxy.core.policy.keysfile import KeysFile
from proxy.core.policy.storagebudget import DEFAULT_MAX_STORED_BYTES
from proxy.settings.fleetfile import ReplicaSpec

# `--fetch-allow` not given: https URLs, of public addresses only (core/policy/urlpolicy.py).
FETCH_ALLOW_DEFAULT = ("https://",)


@dataclass(frozen=True)
class ServerSettings:
    """The process: where it listens, how many of it, what it logs, how long it drains."""

    host: str = "127.0.0.1"
    port: int = 8080
    # `serve --workers N`: serving processes on one port (prefork.py); more than one shares
    # state only through Redis, so it needs `store.redis_url`.
    workers: int = 1
    log_level: str = "info"
    # `text` for people, `json` (one object per line) for log pipelines.
    log_format: str = "text"
    # OTLP/HTTP collector (base URL) for traces; None: no tracing at all (telemetry/tracing.py).
    otlp_endpoint: str | None = None
    # Seconds running jobs get to finish when a worker stops, and open streams get to drain
    # after SIGTERM. A process matter (runtime, prefork), not only the jobs'.
    shutdown_grace: float = 30.0
    # Seconds a connection has to deliver a whole request head from its first byte (nginx's
    # client_header_timeout); past it the connection is closed (proxy/process/headtimeout.py).
    header_timeout: float = 10.0
    # Hosts trusted to say who the client is (`X-Forwarded-For`, `X-Forwarded-Proto`):
    # uvicorn's default, which its `FORWARDED_ALLOW_IPS` set before the front read the headers
    # (proxy/web/middleware/forwarded.py).
    forwarded_allow_ips: tuple[str, ...] = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class FleetSettings:
    """The replicas and how one is picked (services/fleet/fleet.py)."""

    upstreams: tuple[str, ...] = ()
    # The fleet file's replicas (`--fleet`); their URLs are `upstreams` too.
    replicas: tuple[ReplicaSpec, ...] = ()
    # A keyed request leaves its replica once that one's load passes the mean by this factor.
    affinity_load_factor: float = 1.25
    # `affinity` (the default), or the baselines `round_robin` and `least_loaded` that ignore
    # affinity keys (benchmarks).
    routing: str = "affinity"
    # How often the fleet re-reads each replica's /health and /v1/models.
    discovery_interval: float = 10.0


@dataclass(frozen=True)
class UpstreamSettings:
    """The HTTP client to the fleet (client.py)."""

    api_key: str | None = None
    # At most this many connections to one replica (the pool holds twice that, at least
    # 4,096), so one hung replica cannot hold every slot of the pool. A default, not a
    # throttle: above what one vLLM runs at once (256-1,024 sequences) with headroom for the
    # discovery scrapes, `/tokenize` and summaries beside 1,024 streams (measured: at 1,024 a
    # stream could wait for a slot a finished one had not yet handed back).
    max_connections: int = 2048
    # TLS to https upstreams is always verified: against this CA bundle (PEM) when given,
    # else the system's store.
    ca_bundle: str | None = None
    # HTTPS_PROXY / NO_PROXY (the environment's usual names): https upstreams are reached
    # through the proxy's CONNECT tunnel unless NO_PROXY names them.
    https_proxy: str | None = None
    no_proxy: str = ""


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
class FlowSettings:
    """Flow control (services/fleet/admission.py): a replica takes at most
    `max_inflight_per_replica` requests at once from this process (None: adaptive, held only
    while the replica reports waiting requests); past that requests wait, at most
    `max_queued_requests` of them and each at most `queue_timeout` seconds, then 429.
    `setup_slots`: creates set up at once in arrival order (0: no gate)."""

    max_inflight_per_replica: int | None = None
    max_queued_requests: int = 1024
    queue_timeout: float = 30.0
    # Creates set up at once, FIFO, each slot held until admitted (services/fleet/setups.py);
    # 0: no gate. A set-up waits at most `queue_timeout`.
    setup_slots: int = 0


@dataclass(frozen=True)
class StoreSettings:
    """Where state lives and how long (store/keys.py says which key lives how long)."""

    # None: the embedded store (one process; lost on exit).
    redis_url: str | None = None
    response_ttl: int = 30 * 24 * 3600
    # Event logs are big (one entry per delta) and replay is for resuming recent streams; an
    # older response still replays, rebuilt from its final object.
    event_ttl: int = 3600
    # Seconds a stored foreground response's lease lasts unless its instance renews it (every
    # third of it); a dead instance's responses end `failed` within about 1.5 leases.
    lease_ttl: float = 10.0
    # Replicas that must hold a response's create and final write before they count as done
    # (Redis WAIT, bounded: store/redis.py); 0: none, the primary's acknowledgement suffices.
    wait_replicas: int = 0
    # "compact": event-log entries keep a run of 16+ deltas compact (store/lua/packing.py):
    # ~0.25x Redis's memory and ~0.55x its instructions per stored token. The default since
    # every release from c405424 on reads it, and the landed ones (2963486 and after) wrote
    # `full`: written by the releases after those that read it, as a format change goes.
    # "full": entries as 6fd3aab and before read them, for a rolling upgrade from, or a
    # rollback to, such a release: one ending a response whose writer died restores it from
    # the log and would lose compact deltas (docs/operations.md, "Event logs across an
    # upgrade").
    event_log_format: str = "compact"


@dataclass(frozen=True)
class JobSettings:
    """Background jobs: a worker refreshes its running jobs every `heartbeat_interval` seconds;
    a job whose worker stopped is taken over within 3 intervals. The queue serves client keys in
    turn; one key holds at most `max_queued` jobs (queued + running, responses and ingestion
    alike), the whole queue at most `max_queued_total`; past either, 429."""

    # Run background jobs in this process (`serve --no-worker`: not).
    run: bool = True
    concurrency: int = 16
    heartbeat_interval: float = 2.0
    max_queued: int = 1_000
    # Unless given: QUEUED_TOTAL_PER_KEY x `max_queued` (settings/build.py), so raising one
    # key's share raises the whole queue's with it.
    max_queued_total: int = 10_000


# The whole queue's default bound in keys' shares: ten keys may fill theirs at once, and Redis
# holds at most that many jobs' specs.
QUEUED_TOTAL_PER_KEY = 10


@dataclass(frozen=True)
class StreamSettings:
    """Open streams to clients (SSE and WebSocket)."""

    ping_interval: float = 15.0
    # Seconds a stream's write to a client that stopped reading may stay blocked before the
    # stream is abandoned (its upstream request aborted, its connection freed).
    send_timeout: float = 30.0
    # Seconds a WebSocket connection lives before it is closed with the error
    # `websocket_connection_limit_reached`.
    ws_max_age: float = 3600.0
    # WebSocket connections one key may hold open at once in one process; one more handshake
    # is refused with a 429 (one key cannot hold every socket).
    ws_max_per_key: int = 16
    # Lanes (`stream_id`) of one WebSocket connection running at once, each a response of its
    # own (a stream slot of the key): room for an agent's parallel sub-tasks, not for one
    # socket to hold a replica's whole batch.
    ws_max_lanes: int = 8
    # A replay that sees no event for this long re-checks the response's status.
    follow_idle: float = 30.0


@dataclass(frozen=True)
class LimitSettings:
    """What one request may carry."""

    max_body_bytes: int = 16 * 1024 * 1024
    # The Files API: the largest file one upload may carry (exactly this is accepted);
    # the upload's body may exceed it by its multipart framing (web/middleware/bodylimits.py).
    max_file_bytes: int = 32 * 1024 * 1024
    # Uploads one process takes at once: each may spool up to max_file_bytes to a temporary
    # file while it streams in (web/routes/files.py), so together they bound that disk (the
    # k8s manifest sizes /tmp from it). One more is a 429 before its body is read.
    max_uploads_in_flight: int = 8
    # Seconds a request body may pause between two reads (nginx's client_body_timeout): past
    # it the request is a 408 and lets go of what it held (a task, an upload's slot).
    body_timeout: float = 60.0
    # Most input items one request (or one conversation add) may carry.
    max_input_items: int = 2048
    # Bounded reading: PDF, HTML and JSON files are read in child processes (files/extraction.py),
    # at most this many per proxy process, each document in at most this many CPU seconds.
    extract_processes: int = 2
    extract_cpu_seconds: float = 10.0


@dataclass(frozen=True)
class SealingSettings:
    """Sealed blobs (core/seal.py, core/request/expansion.py)."""

    # Fleet-wide secret that authenticates sealed blobs; every instance sharing one Redis must
    # have the same one. None: a random secret per deployment, shared through the store
    # (services/process/sealing.py); there is no public default.
    secret: str | None = None
    # The most one sealed blob (reasoning `encrypted_content`, a compaction item) may inflate
    # to; what all of a request's references, history and opened blobs add up to is bounded
    # by `max_body_bytes`. At most `max_body_bytes` (the default is lowered to it).
    max_bytes: int = 1024 * 1024

    def secrets(self) -> tuple[bytes, ...]:
        """The operator's fleet secrets, comma-separated: the first seals, every one opens
        (rotation). Empty: none was given (services/process/sealing.py makes one per deployment)."""
        return tuple(part.strip().encode() for part in (self.secret or "").split(",")
                     if part.strip())


@dataclass(frozen=True)
class TenancySettings:
    """Who may call, and what one key may keep."""

    api_keys: tuple[str, ...] = ()
    # `--keys-file`: more accepted keys, each with a name and limits (services/metering/limits.py).
    keys_file: KeysFile | None = None
    # Bytes one key may keep in the shared store when its keys-file entry (or the file's
    # defaults) sets no `max_stored_bytes`; the anonymous tenant of a proxy without keys too.
    # 0: no limit. core/policy/storagebudget.py says why 1 GiB.
    max_stored_bytes_per_key: int = DEFAULT_MAX_STORED_BYTES
    # With auth off, WebSocket handshakes from these browser origins (`https://app.example`)
    # are accepted besides the proxy's own; any other `Origin` is refused (core/policy/origin.py).
    allow_origins: tuple[str, ...] = ()
    # `--admin-key`: the admin API and the console (web/routes/admin.py); None: both off.
    admin_key: str | None = None

    def accepted_keys(self) -> tuple[str, ...]:
        """Every client key: `--api-key`s and the keys file's (auth is on when there is one)."""
        listed = self.keys_file.keys if self.keys_file else ()
        return self.api_keys + tuple(entry.key for entry in listed)

    def __repr__(self) -> str:  # settings are logged: never a key
        return (f"TenancySettings(api_keys=<{len(self.api_keys)}>, keys_file={self.keys_file!r}, "
                f"admin_key={'<set>' if self.admin_key else None})")


@dataclass(frozen=True)
class McpSettings:
    """MCP tools run by the proxy (core/mcp.py, services/generation/toolloop.py): the URL prefixes
    an MCP `server_url` must start with (none: MCP tools are a 400), the calls one response may make
    at most, and the seconds one MCP operation (list or call) may take."""

    allow: tuple[str, ...] = ()
    max_calls: int = 16
    timeout: float = 60.0
    # code_interpreter served by the operator's MCP server at this URL (admitted by `allow`),
    # its calls run as that server's tool of this name; None: code_interpreter stays a hosted
    # tool dropped or refused (`--hosted-tools`).
    code_interpreter_url: str | None = None
    code_interpreter_tool: str = "run_code"


@dataclass(frozen=True)
class WebSearchSettings:
    """The web_search tool run by the proxy (proxy/services/tools/websearch.py,
    core/hosted.py): `url` a SearXNG-compatible JSON endpoint (`GET url?q=...&format=json`;
    None: web_search stays a hosted tool dropped or refused, `--hosted-tools`), each search
    bounded by `timeout` seconds, the first `max_results` results given to the model."""

    url: str | None = None
    timeout: float = 10.0
    max_results: int = 5


@dataclass(frozen=True)
class VectorSettings:
    """Vector stores and file_search (services/vectors/): a store holds at most `max_files`
    files and `max_chunks` chunks (a search multiplies them all: its time and the memory of one
    store's vectors grow with it); a process keeps at most `cache_bytes` of stores' vectors in
    memory between searches. Vectors come from `cache.embedding_model`."""

    max_files: int = 1000
    max_chunks: int = 100_000
    cache_bytes: int = 512 * 1024 * 1024
    # What all of a process's ingestions may hold at once (services/vectors/memory.py:
    # each reserves 8x its file). 256 MiB: one 32 MiB file (--max-file-bytes) at a time beside
    # the vector cache and the requests in a 1 GiB pod; smaller files run several at once.
    ingest_memory_budget: int = 256 * 1024 * 1024


@dataclass(frozen=True)
class FetchSettings:
    """URLs the proxy fetches for the fleet (services/fleet/media.py): an image (or audio, video)
    URL in a request is fetched here and sent to vLLM inline as a data: URL, when one of these
    prefixes admits it (core/policy/urlpolicy.py; the default: any https URL of a public address);
    `()` fetches nothing (data: URLs only). Each fetch is bounded by `timeout` seconds, and a
    request's fetched bytes by `limits.max_body_bytes`."""

    allow: tuple[str, ...] = FETCH_ALLOW_DEFAULT
    timeout: float = 10.0


@dataclass(frozen=True)
class CacheSettings:
    """The response cache (services/cache/responses.py): entries live `ttl` seconds; `semantic` asks
    `embedding_model` on the fleet's /v1/embeddings and takes a neighbour at or above
    `similarity` (cosine). An answer bigger than `max_entry_bytes` is not kept, and one
    semantic namespace keeps its newest `max_per_namespace` entries. An embedding call slower
    than `embedding_timeout` seconds is a miss."""

    mode: str = "off"
    ttl: int = 86_400
    embedding_model: str | None = None
    similarity: float = 0.95
    max_entry_bytes: int = 1024 * 1024
    max_per_namespace: int = 256
    embedding_timeout: float = 0.5


@dataclass(frozen=True)
class ToleranceSettings:
    """Request tolerance (core/request/tolerance.py): unknown create fields ignored or refused;
    hosted
    tools (web_search, ...) left out of the upstream request or refused."""

    params: str = "lenient"
    hosted_tools: str = "drop"


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    timeouts: Timeouts = field(default_factory=Timeouts)
    flow: FlowSettings = field(default_factory=FlowSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    jobs: JobSettings = field(default_factory=JobSettings)
    streams: StreamSettings = field(default_factory=StreamSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    sealing: SealingSettings = field(default_factory=SealingSettings)
    tenancy: TenancySettings = field(default_factory=TenancySettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    web_search: WebSearchSettings = field(default_factory=WebSearchSettings)
    vectors: VectorSettings = field(default_factory=VectorSettings)
    fetch: FetchSettings = field(default_factory=FetchSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    tolerance: ToleranceSettings = field(default_factory=ToleranceSettings)

    @classmethod
    def of(cls, **changes: Any) -> Settings:
        """The defaults with `changes`: groups by name, single fields by their option's name
        (options.py), e.g. `Settings.of(upstreams=(url,), cache_ttl=60)`."""
        return cls().replace(**changes)

    def replace(self, **changes: Any) -> Settings:
        from proxy.settings.options import PATHS  # the table names the fields

        groups = {name: changes.pop(name) for name in list(changes) if name in _GROUPS}
        fields: dict[str, dict[str, Any]] = {}
        for name, value in changes.items():
            if name not in PATHS:
                raise TypeError(f"Settings has no group or option {name!r}")
            group, attr = PATHS[name]
            fields.setdefault(group, {})[attr] = value
        for group, values in fields.items():
            groups[group] = dataclasses.replace(groups.get(group, getattr(self, group)),
                                                **values)
        return dataclasses.replace(self, **groups)


_GROUPS = frozenset(f.name for f in dataclasses.fields(Settings))
