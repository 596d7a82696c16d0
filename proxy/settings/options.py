"""Every option, declared once: the field it sets, its validator, its flag and help, its
environment variable, and the commands that take it. cli.py builds the parser from this table,
build.py the settings; a new option is one row here and one field in groups.py.

Rows are in `--help` order (`serve`'s own options, then those `serve` and `worker` share). The
default shown in `--help` is the field's own (groups.py), so the two cannot drift; `shown`
spells it for people where the number is not readable ("16 MiB").
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.settings import checks as c
from proxy.settings.checks import Parse

BOTH = ("serve", "worker")
SERVE = ("serve",)


@dataclass(frozen=True)
class Option:
    # The option's own name: `Settings.of(name=...)`, `settings.replace(name=...)`.
    name: str
    # `group.field` in Settings.
    path: str
    parse: Parse
    # None: no flag (set from the environment only, or only by code: tests).
    help: str | None = None
    flag: str = ""  # "": `--` + name with dashes
    env: tuple[str, ...] | None = None  # None: PROXY_ + the flag's name; (): none
    commands: tuple[str, ...] = BOTH
    repeat: bool = False  # a repeatable flag; its variable is comma-separated
    switch: bool = False  # a flag without a value that turns the field off
    shown: str | None = None  # the default as --help says it; None: the field's own; "": none

    @property
    def flag_name(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """The key of the parsed flags (argparse's `dest`)."""
        return self.flag_name[2:].replace("-", "_")

    @property
    def env_names(self) -> tuple[str, ...]:
        if self.env is not None:
            return self.env
        return ("PROXY_" + self.dest.upper(),)

    @property
    def group(self) -> str:
        return self.path.split(".", 1)[0]

    @property
    def field(self) -> str:
        return self.path.split(".", 1)[1]


def _serve(name: str, path: str, parse: Parse, help: str, **more: object) -> Option:
    return Option(name, path, parse, help, commands=SERVE, **more)  # type: ignore[arg-type]


OPTIONS: tuple[Option, ...] = (
    # -- serve only ------------------------------------------------------------------------
    _serve("host", "server.host", c.text, "bind address"),
    _serve("port", "server.port", c.check_port, "port"),
    _serve("api_keys", "tenancy.api_keys", c.api_keys, "accepted client key (repeatable)",
           flag="--api-key", env=("PROXY_API_KEYS",), repeat=True),
    # The admin API and the console (web/routes/admin.py); off without it.
    _serve("admin_key", "tenancy.admin_key", c.admin_key,
           "the operator's key for /admin/ (keys managed live) and /console; never a client "
           "key; unset: both are off (404)", shown=""),
    _serve("allow_origins", "tenancy.allow_origins", c.origins,
           "with auth off, a browser origin (scheme://host[:port]) whose WebSocket handshakes "
           "are accepted besides the proxy's own (repeatable; env PROXY_ALLOW_ORIGIN, "
           "comma-separated)", flag="--allow-origin", repeat=True),
    _serve("cache_mode", "cache.mode", c.cache_mode, "off | exact | semantic", flag="--cache"),
    _serve("run_jobs", "jobs.run", c.off, "do not run background jobs", flag="--no-worker",
           env=(), switch=True),
    _serve("workers", "server.workers", c.workers,
           "serving processes on the port: a count or `auto` (one per core); more than 1 needs "
           "--redis-url"),
    _serve("cache_ttl", "cache.ttl", c.count, "seconds cache entries live"),
    _serve("embedding_model", "cache.embedding_model", c.stripped,
           "fleet model for /v1/embeddings (semantic)"),
    _serve("cache_similarity", "cache.similarity", c.similarity, "cosine a semantic hit needs"),
    _serve("cache_max_entry_bytes", "cache.max_entry_bytes", c.count, "largest answer cached",
           shown="1 MiB"),
    _serve("cache_max_per_namespace", "cache.max_per_namespace", c.count,
           "semantic entries kept per namespace"),
    _serve("cache_embedding_timeout", "cache.embedding_timeout", c.seconds,
           "seconds an embedding call may take; slower is a miss"),
    _serve("max_body_bytes", "limits.max_body_bytes", c.count, "largest accepted request body",
           shown="16 MiB"),
    # Files, prompts, file inputs.
    _serve("max_file_bytes", "limits.max_file_bytes", c.count,
           "largest file accepted by POST /v1/files", shown="32 MiB"),
    _serve("max_uploads_in_flight", "limits.max_uploads_in_flight", c.count,
           "uploads one process takes at once (each may spool --max-file-bytes to /tmp)"),
    _serve("body_timeout", "limits.body_timeout", c.seconds,
           "seconds a request body may pause between two reads; past it, 408"),
    _serve("header_timeout", "server.header_timeout", c.seconds,
           "seconds a connection has to send a whole request head; past it, closed"),
    _serve("forwarded_allow_ips", "server.forwarded_allow_ips", c.hosts,
           "hosts (addresses, networks, or *) whose X-Forwarded-For and X-Forwarded-Proto set "
           "the client's address and scheme (repeatable; env FORWARDED_ALLOW_IPS, "
           "comma-separated)", env=("FORWARDED_ALLOW_IPS",), repeat=True,
           shown="127.0.0.1,::1"),
    # Not more than --max-body-bytes, and lowered to it by default (build.py).
    _serve("max_sealed_bytes", "sealing.max_bytes", c.count,
           "most one sealed blob may inflate to", shown="1 MiB"),
    _serve("max_input_items", "limits.max_input_items", c.count,
           "input items accepted in one create"),
    _serve("ping_interval", "streams.ping_interval", c.seconds,
           "seconds between SSE keep-alive pings"),
    _serve("discovery_interval", "fleet.discovery_interval", c.seconds,
           "seconds between fleet health checks"),
    _serve("params", "tolerance.params", c.mode(c.PARAMS_MODES),
           "lenient | strict: unknown create fields ignored (and named in a header) or refused"),
    _serve("hosted_tools", "tolerance.hosted_tools", c.mode(c.HOSTED_TOOLS_MODES),
           "drop | reject: hosted tools such as web_search left out (and named in a header) "
           "or refused"),
    _serve("lease_ttl", "store.lease_ttl", c.seconds,
           "seconds a stored foreground response's lease lasts: a dead instance's responses "
           "end failed within ~1.5x"),
    _serve("send_timeout", "streams.send_timeout", c.seconds,
           "seconds a stream may wait on a client that stopped reading"),
    _serve("ws_max_age", "streams.ws_max_age", c.seconds,
           "seconds a WebSocket connection lasts before it is closed"),
    _serve("ws_max_connections_per_key", "streams.ws_max_per_key", c.count,
           "WebSocket connections one key holds open at once in one process; past it the "
           "handshake is a 429"),
    _serve("ws_max_lanes", "streams.ws_max_lanes", c.count,
           "lanes (stream_id) one WebSocket connection runs at once; one more is an error "
           "event naming stream_id"),
    # -- serve and worker ------------------------------------------------------------------
    Option("upstreams", "fleet.upstreams", c.upstreams, "vLLM server root URL (repeatable)",
           flag="--upstream", env=("PROXY_UPSTREAMS",), repeat=True),
    Option("upstream_api_key", "upstream.api_key", c.text,
           "key sent to the upstream instead of the client's"),
    # Not together with --upstream (build.py).
    Option("replicas", "fleet.replicas", c.fleet_file,
           "YAML/JSON file of replicas (url, weight, api_key, max_concurrency, models, "
           "reasoning_efforts); "
           "instead of --upstream", flag="--fleet"),
    Option("affinity_load_factor", "fleet.affinity_load_factor", c.load_factor,
           "a keyed request leaves its replica above this times the mean load"),
    # -- Redis topology: where the store is, and how durable a response's end is.
    Option("redis_url", "store.redis_url", c.check_redis_url,
           "redis://[:pw@]host:port/db, rediss://... (TLS), "
           "redis+sentinel://[:pw@]host:port[,host:port...]/master[/db], or "
           "redis+cluster://[:pw@]host:port[,host:port...] (seeds); omitted = embedded store"),
    Option("redis_wait_replicas", "store.wait_replicas", c.replica_count,
           "after a response's create and its final write, wait (Redis WAIT, at most 1 s) until "
           "this many replicas have them; 0 = do not wait. Needs --redis-url"),
    Option("event_log_format", "store.event_log_format", c.mode(c.EVENT_LOG_FORMATS),
           "compact | full: compact (the default) keeps runs of deltas in a quarter of the "
           "bytes; full for an upgrade from, or a rollback to, a release before c405424"),
    Option("connect_timeout", "timeouts.connect", c.seconds,
           "seconds to connect to an upstream"),
    Option("first_byte_timeout", "timeouts.first_byte", c.seconds,
           "seconds to the upstream's headers"),
    Option("idle_timeout", "timeouts.idle", c.seconds, "seconds allowed between two chunks"),
    Option("max_connections_per_upstream", "upstream.max_connections", c.count,
           "connections to one replica at most"),
    Option("upstream_ca_bundle", "upstream.ca_bundle", c.existing_file,
           "PEM file of CAs that https upstreams are verified against (default: the system's)"),
    Option("first_token_timeout", "timeouts.first_token", c.seconds,
           "seconds a stream may wait for its first upstream chunk"),
    Option("worker_concurrency", "jobs.concurrency", c.count, "background jobs run at once"),
    Option("response_ttl", "store.response_ttl", c.count, "seconds stored objects live",
           shown="30 days"),
    Option("heartbeat_interval", "jobs.heartbeat_interval", c.seconds,
           "seconds between a worker's job heartbeats"),
    Option("max_queued_jobs", "jobs.max_queued", c.count,
           "background jobs (queued + running, responses and ingestion) one key may have"),
    Option("max_queued_jobs_total", "jobs.max_queued_total", c.count,
           "background jobs (queued + running) the whole queue may hold (default: 10 x "
           "--max-queued-jobs)", shown="10 x --max-queued-jobs"),
    Option("shutdown_grace", "server.shutdown_grace", c.seconds,
           "seconds running jobs get to finish at shutdown"),
    Option("event_ttl", "store.event_ttl", c.count, "seconds event logs live, for replay"),
    Option("log_level", "server.log_level", c.log_level, "debug, info, warning, error"),
    Option("log_format", "server.log_format", c.log_format, "text | json"),
    # Tracing (telemetry/tracing.py): off unless an endpoint is given; the standard OTLP variable
    # is honoured after ours, as every OpenTelemetry SDK reads it.
    Option("otlp_endpoint", "server.otlp_endpoint", c.otlp_endpoint,
           "OTLP/HTTP collector URL for traces (base URL; /v1/traces is added; default off)",
           env=("PROXY_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"), shown=""),
    Option("fleet_secret", "sealing.secret", c.fleet_secret,
           "secret shared by all instances, seals blobs (default: a random one per deployment, "
           "kept in Redis)"),
    Option("mcp_allow", "mcp.allow", c.mcp_allow,
           "URL prefix of MCP servers the proxy may call (repeatable; default none: MCP tools "
           "are refused)", repeat=True),
    Option("max_mcp_calls", "mcp.max_calls", c.count, "MCP tool calls one response may make"),
    Option("mcp_timeout", "mcp.timeout", c.seconds,
           "seconds one MCP list or call may take, connect included"),
    Option("code_interpreter_mcp", "mcp.code_interpreter_url", c.web_search_url,
           "MCP server (streamable HTTP) whose tool runs the code_interpreter tool's code; it "
           "must be admitted by --mcp-allow (default none: code_interpreter stays a hosted "
           "tool, dropped or refused per --hosted-tools)"),
    Option("code_interpreter_tool", "mcp.code_interpreter_tool", c.text,
           "name of the --code-interpreter-mcp server's tool that runs code; it takes "
           "{\"code\": \"...\"} and returns what the code printed"),
    # The web_search tool, run by the proxy against the operator's own search endpoint.
    Option("web_search_url", "web_search.url", c.web_search_url,
           "SearXNG-compatible JSON search endpoint (GET URL?q=...&format=json) the proxy runs "
           "web_search / web_search_preview tools with (default none: they stay hosted tools, "
           "dropped or refused per --hosted-tools)", flag="--web-search",
           env=("PROXY_WEB_SEARCH",)),
    Option("web_search_timeout", "web_search.timeout", c.seconds,
           "seconds one web search may take, connect included"),
    Option("web_search_results", "web_search.max_results", c.count,
           "web search results given to the model per search"),
    # Vector stores and file_search: bounds per store and per process.
    Option("vector_store_max_files", "vectors.max_files", c.count,
           "files one vector store may hold"),
    Option("vector_store_max_chunks", "vectors.max_chunks", c.count,
           "chunks one vector store may hold (a search scans them all)"),
    Option("vector_cache_bytes", "vectors.cache_bytes", c.count,
           "memory a process keeps vector stores' vectors in between searches",
           shown="512 MiB"),
    # What reading files may cost a process (docs/contract.md "Cost bounds").
    Option("ingest_memory_budget", "vectors.ingest_memory_budget", c.count,
           "memory all of a process's ingestions may hold at once (each reserves 8x its file)",
           shown="256 MiB"),
    Option("extract_processes", "limits.extract_processes", c.count,
           "child processes one proxy process reads PDF, HTML and JSON files in, at most"),
    Option("extract_cpu_seconds", "limits.extract_cpu_seconds", c.seconds,
           "CPU seconds reading one PDF, HTML or JSON file may take; past it, invalid_file"),
    Option("fetch_allow", "fetch.allow", c.fetch_allow,
           "URL prefix of images/media the proxy may fetch for the fleet and send inline "
           "(repeatable; default https:// to public addresses; `none`: data: URLs only)",
           repeat=True),
    Option("fetch_timeout", "fetch.timeout", c.seconds,
           "seconds one media fetch may take, connect included"),
    Option("max_inflight_per_replica", "flow.max_inflight_per_replica", c.count,
           "requests one replica takes at once from this process (default: no fixed cap; "
           "requests wait here only while the replica reports waiting requests)"),
    Option("max_queued_requests", "flow.max_queued_requests", c.count,
           "requests that may wait for a saturated fleet"),
    Option("queue_timeout", "flow.queue_timeout", c.seconds,
           "seconds a request may wait for a saturated fleet"),
    # Bursts: services/fleet/setups.py. Off by default: measured, it moves the
    # first arrivals' first tokens forward but not the median, and adds to the p99
    # (docs/benchmarks-history.md "Bursts: what a burst's first tokens wait for").
    Option("setup_slots", "flow.setup_slots", c.setup_slots,
           "creates set up at once, in arrival order, before their upstream call (0: no "
           "gate: every arrival's set-up advances together)"),
    Option("routing", "fleet.routing", c.mode(c.ROUTING_MODES),
           "affinity | round_robin | least_loaded"),
    Option("keys_file", "tenancy.keys_file", c.keys_file,
           "JSON or YAML file of client keys with rpm, tpm, max_streams and token_budget "
           "limits"),
    # Multi-tenant storage bound: core/policy/storagebudget.py.
    Option("max_stored_bytes_per_key", "tenancy.max_stored_bytes_per_key", c.byte_count,
           "bytes of stored responses and conversations one key may hold, for keys whose "
           "keys-file entry sets no max_stored_bytes; 0 = no limit", shown="1 GiB"),
    # -- the environment only: the names every HTTP client reads ----------------------------
    Option("https_proxy", "upstream.https_proxy", c.check_proxy_url,
           env=("HTTPS_PROXY", "https_proxy")),
    Option("no_proxy", "upstream.no_proxy", c.text, env=("NO_PROXY", "no_proxy")),
    # -- code only (tests) -----------------------------------------------------------------
    Option("follow_idle", "streams.follow_idle", c.seconds, env=()),
)

# Option name -> (group, field): what `Settings.of` / `Settings.replace` accept besides groups.
PATHS: dict[str, tuple[str, str]] = {opt.name: (opt.group, opt.field) for opt in OPTIONS}
