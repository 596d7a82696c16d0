"""What each option means beyond its `--help` line: the longer explanation the configuration
reference (docs/configuration.md, written by reference.py) prints under the option. Keyed by the
option's name in options.py; an option without a note is described by its help alone."""

from __future__ import annotations

NOTES: dict[str, str] = {
    "api_keys": (
        'accepted client keys (`Authorization: Bearer KEY`)'
    ),
    "allow_origins": (
        'with auth off, browser origins (`https://app.example`) whose WebSocket handshakes are '
        "accepted besides the proxy's own (any other `Origin` gets 403)"
    ),
    "cache_mode": (
        '`off`, `exact` or `semantic`: the response cache (see guide.md, "Response cache")'
    ),
    "run_jobs": (
        'do not run background jobs in this process'
    ),
    "workers": (
        '`serve` processes on the port, or `auto` (one per usable core); more than 1 needs '
        '`--redis-url`. Each process is a whole proxy (own loop, connections, background '
        'worker); `SO_REUSEPORT` spreads connections over them; SIGTERM reaches every one; '
        '`/metrics` is per process (each scrape sees the process that answered)'
    ),
    "cache_ttl": (
        'seconds a cache entry lives'
    ),
    "embedding_model": (
        'a model the fleet serves on `/v1/embeddings`; required by `--cache semantic`, and '
        'turns on vector stores and the `file_search` tool (see guide.md, "Vector stores and '
        'file_search")'
    ),
    "cache_similarity": (
        'cosine (0-1] a semantic neighbour needs to be served'
    ),
    "cache_max_entry_bytes": (
        'larger answers are not cached'
    ),
    "cache_max_per_namespace": (
        'semantic entries kept per namespace (the oldest go first)'
    ),
    "cache_embedding_timeout": (
        'seconds an embedding call may take; slower (or failing) is a miss'
    ),
    "max_body_bytes": (
        'larger request bodies get 413'
    ),
    "max_file_bytes": (
        'largest file `POST /v1/files` accepts (exactly this is accepted, one byte more is a '
        '413, refused as the upload streams in); the body may exceed it by 64 KiB of multipart '
        'framing'
    ),
    "max_uploads_in_flight": (
        'uploads one process reads at once, at most half of them (rounded up) for one key; one '
        'more is a 429 (Retry-After) before its body is read. Each spools up to '
        '`--max-file-bytes` to a temporary file (`/tmp`), so the two together bound that disk: '
        "size a read-only container's `/tmp` from them (deploy/k8s: 1 GiB)"
    ),
    "body_timeout": (
        "seconds a request body may pause between two reads (as nginx's `client_body_timeout`);"
        ' past it the request is a 408 (`request_timeout`) and lets go of what it held (an '
        "upload's slot and spooled file). Only the body is timed, never an open stream"
    ),
    "header_timeout": (
        "seconds a connection has to send a whole request head, from its first byte (as nginx's"
        ' `client_header_timeout`); past it the connection is closed. A connection that sends '
        "nothing is closed after uvicorn's keep-alive timeout (5 s), as an idle kept-alive one"
    ),
    "forwarded_allow_ips": (
        "the proxies in front whose `X-Forwarded-For` and `X-Forwarded-Proto` are believed: "
        "a connection from one of them gets the client address and scheme they name (the "
        "nearest address that is not itself trusted). Addresses, networks (`10.0.0.0/8`) or "
        "`*`; uvicorn's variable and rules, read by the proxy's front middleware"
    ),
    "max_sealed_bytes": (
        'most one sealed blob may open to; more is a 400 `invalid_encrypted_content` naming it.'
        " What all of a request's blobs, references and history open to together is bounded by "
        '`--max-body-bytes`'
    ),
    "max_input_items": (
        'input items one create may carry (after `item_reference`s, before history); more is a '
        '400 naming `input`'
    ),
    "ping_interval": (
        'seconds between SSE comment pings on silent streams (Responses and chat pass-through),'
        ' and between WebSocket pings'
    ),
    "discovery_interval": (
        'seconds between fleet health/model checks (and `/metrics` load scrapes)'
    ),
    "params": (
        '`lenient`: unknown create fields ignored, named in `x-proxy-ignored-params`; `strict`:'
        ' 400'
    ),
    "hosted_tools": (
        '`drop`: hosted tools left out, named in `x-proxy-dropped-tools`; `reject`: 400'
    ),
    "lease_ttl": (
        "seconds a stored foreground response's lease lasts (renewed every third of it); a "
        "killed instance's responses end `failed` within about 1.5 leases"
    ),
    "send_timeout": (
        "seconds a stream's write may stay blocked on a client that stopped reading; then the "
        'stream is abandoned and its upstream request aborted'
    ),
    "ws_max_age": (
        'seconds a WebSocket connection (`GET /v1/responses` upgraded) lives; then it gets an '
        'error frame with code `websocket_connection_limit_reached` and is closed'
    ),
    "ws_max_connections_per_key": (
        'WebSocket connections one key (without auth: all clients together) holds open at once '
        'in one process; one more handshake is refused with a 429 `rate_limit_exceeded` '
        '(Retry-After: 1). Per process: with N instances a key holds at most N times this'
    ),
    "ws_max_lanes": (
        'lanes (`stream_id` in `response.create`) one WebSocket connection runs at once, beside '
        'its unnamed one; a create opening one more gets an `error` event (code '
        '`too_many_lanes`, param `stream_id`). Each lane queues up to 16 creates in order'
    ),
    "upstreams": (
        'vLLM server roots; a trailing `/v1` is accepted'
    ),
    "upstream_api_key": (
        "key sent to the fleet (the client's key never is)"
    ),
    "replicas": (
        'the replicas as a YAML or JSON list: `url` (required), `reasoning_efforts` (the '
        '`reasoning.effort` values it takes; others are mapped to the nearest), `weight` '
        '(default 1: share of un-keyed traffic and of the load bound), `api_key` (sent to that '
        'replica instead of `--upstream-api-key`; never logged), `max_concurrency`, `models` '
        '(the replica serves only these, even before discovery), `name` (its label on '
        '`/metrics`; default `replica-<n>`, counting from 1). Instead of `--upstream`; both is '
        'a config error'
    ),
    "affinity_load_factor": (
        "a keyed request leaves its replica when that one's load would pass this times the "
        "fleet's mean (≥ 1)"
    ),
    "redis_url": (
        'shared state; without it state is per-process and lost on exit. '
        '`redis://[:PASSWORD@]HOST[:PORT][/DB]` (one primary), `rediss://…` (TLS), '
        '`unix:///path.sock`, '
        '`redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB][?sentinel_password=SP]`'
        ' (the primary Sentinel calls MASTER, followed across failovers; see operations.md, '
        '"Redis: failover"), `redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]` '
        '(a Redis Cluster; '
        'the hosts are seeds, any few nodes; no db number; see operations.md, "Redis Cluster")'
    ),
    "redis_wait_replicas": (
        "after a response's create and its final write, wait (Redis `WAIT`, at most 1 s) until "
        'this many replicas hold them; a shortfall is logged and counted '
        '(`proxy_redis_wait_shortfalls`), not an error. Refused at start on a cluster (WAIT '
        "must go on the write's own connection)"
    ),
    "event_log_format": (
        '`compact`: a run of 16 or more deltas of one item in an event-log entry kept compact '
        "(~62 bytes of Redis a stored text delta instead of ~255, ~0.55x Redis's instructions "
        "per stored token), read by every release from c405424 on; `full`: entries as "
        "releases before it read them. Set `full` for a rolling upgrade from such a release "
        "(until none runs) and before rolling back to one (operations.md, \"Event logs across "
        'an upgrade")'
    ),
    "connect_timeout": (
        'seconds to connect to a replica'
    ),
    "first_byte_timeout": (
        'seconds a non-streamed upstream call may take'
    ),
    "idle_timeout": (
        'seconds allowed between two chunks of a stream'
    ),
    "max_connections_per_upstream": (
        'connections to one replica at most (the pool: twice that, at least 4096, in all), so '
        'one hung replica cannot hold every slot'
    ),
    "upstream_ca_bundle": (
        'PEM file of CAs that https upstreams are verified against (TLS is always verified)'
    ),
    "first_token_timeout": (
        'seconds a stream may wait for its first upstream chunk (vLLM sends headers before it '
        'queues); a chat stream then gets 504, a started Responses stream `response.failed`'
    ),
    "worker_concurrency": (
        'background jobs run at once per process'
    ),
    "response_ttl": (
        'seconds stored responses and conversations live'
    ),
    "heartbeat_interval": (
        "seconds between job heartbeats; a dead worker's jobs are taken over within 3 intervals"
    ),
    "max_queued_jobs": (
        "one key's queued + running background jobs (responses and vector store ingestion "
        'alike); past that, that key gets 429 (Retry-After) while other keys still queue. The '
        "queue serves keys in turn, so a key's job starts after one job of each key ahead of "
        "it, not after another key's backlog"
    ),
    "max_queued_jobs_total": (
        'queued + running background jobs of all keys together (what bounds the queue in '
        'Redis); past that, 429'
    ),
    "shutdown_grace": (
        'seconds running jobs get to finish when a worker stops, and (`serve`) open streams get'
        ' to drain after SIGTERM'
    ),
    "event_ttl": (
        'seconds event logs live; an older response replays rebuilt from its final object'
    ),
    "log_level": (
        '`debug`, `info`, `warning`, `error`'
    ),
    "log_format": (
        '`text`, or `json` (one object per line: `time`, `level`, `logger`, `request_id`, '
        "`message`, and the access log's fields)"
    ),
    "otlp_endpoint": (
        'OTLP/HTTP collector base URL for traces (`/v1/traces` added unless given); unset: no '
        'tracing, no cost (see operations.md, "Tracing")'
    ),
    "fleet_secret": (
        'authenticates sealed blobs (reasoning and compaction `encrypted_content`). Without it,'
        ' the first instance stores 32 random bytes in Redis (`fleet:secret`, `SET NX`, no TTL)'
        ' and every instance and worker on that Redis reads them at start (the embedded store: '
        'a random secret per process, so blobs do not survive a restart); there is no public '
        'default. Give one to keep blobs valid across a Redis flush or to share them between '
        'deployments. Comma-separated for rotation: the first seals, every one opens (add the '
        'new one second everywhere, then first, then drop the old). The placeholders shipped in'
        ' `deploy/` are refused at start'
    ),
    "mcp_allow": (
        "URL prefixes an `mcp` tool's `server_url` must start with, compared by scheme, host, "
        'port and whole path segments after the URL is checked to be in normal form '
        '(`http://h:` admits any port of h; see guide.md, "MCP tools"); without any, every MCP tool'
        ' is a 400 saying how to enable it'
    ),
    "max_mcp_calls": (
        "MCP tool calls one response may make at most (a request's `max_tool_calls` can only "
        'lower it); then the model must answer'
    ),
    "mcp_timeout": (
        "seconds one MCP operation (listing a server's tools, or one call) may take; "
        '`--connect-timeout` bounds its connect. Slower: the listing fails the response, the '
        'call fails and the model is told'
    ),
    "web_search_url": (
        'a SearXNG-compatible JSON endpoint (`GET URL?q=...&format=json`) the proxy runs '
        '`web_search` / `web_search_preview` tools with (see guide.md, "Web search"); unset: '
        'they stay hosted tools, dropped or refused per `--hosted-tools`'
    ),
    "web_search_timeout": (
        'seconds one search may take, connect included'
    ),
    "web_search_results": (
        'results given to the model per search'
    ),
    "vector_store_max_chunks": (
        'chunks one vector store may hold (a search scans them all: ~4 ms at 10^5 chunks of 256'
        ' dimensions)'
    ),
    "vector_cache_bytes": (
        "memory one process keeps stores' vectors in between searches (LRU; a store is reloaded"
        ' only when it changed)'
    ),
    "ingest_memory_budget": (
        "memory all of a process's vector-store ingestions may hold at once; each reserves 8x "
        "its file's size before reading it and waits for its share (a file larger than the "
        'budget runs alone)'
    ),
    "extract_processes": (
        'child processes one proxy process reads PDF, HTML and JSON files in (input_file parts,'
        " ingestion), at most (each bounded to 512 MiB of address space), one key's documents "
        'in at most half of them; more wait for one'
    ),
    "extract_cpu_seconds": (
        'CPU seconds reading one PDF, HTML or JSON file may take; past it the child is killed '
        'and the file is `invalid_file` (a PDF is also bounded by 2000 pages, 8 MiB of decoded '
        'content and 250,000 operators)'
    ),
    "fetch_allow": (
        'URL prefixes of media (image, audio, video URLs in requests) the proxy fetches and '
        'sends to the fleet inline; a prefix without a host admits every public host of its '
        'scheme; private, loopback and link-local addresses only when a prefix names the host '
        'as an IP literal or `localhost`; `none`: data URLs only. The fleet never fetches a '
        "client's URL itself"
    ),
    "fetch_timeout": (
        'seconds one media fetch may take, connection included'
    ),
    "max_inflight_per_replica": (
        'when given, a fixed cap on the requests one replica takes at once from this process; '
        "unset, requests wait here only while the replica's own `/metrics` reports waiting "
        'requests (`vllm:num_requests_waiting` > 0), and then up to what it reported running + '
        '8 (see operations.md, "Flow control"). A healthy replica is never throttled by default'
    ),
    "max_queued_requests": (
        'requests that may wait for a saturated fleet; past that, 429 at once, unless another '
        "key holds at least two more places than the request's key: its newest waiter gets the "
        '429 and the request takes its place'
    ),
    "queue_timeout": (
        'seconds a request may wait for a saturated fleet; then 429'
    ),
    "setup_slots": (
        'creates set up at once per process, in arrival order, until each is admitted to a '
        "replica (0: no gate; measured not to lower a burst's median TTFT, "
        'benchmarks-history.md '
        '"Bursts: what a burst\'s first tokens wait for"); a wait past `--queue-timeout` is '
        'the admission queue\'s 429'
    ),
    "routing": (
        'how a replica is picked: `affinity` (operations.md, "Flow control"), or the baselines '
        '`round_robin` and '
        '`least_loaded` (ignore affinity keys; for benchmarks)'
    ),
    "keys_file": (
        'client keys with per-key limits, JSON (YAML when the name ends in `.yaml`/`.yml`): '
        '`{"defaults": {...}, "keys": [{"key": "sk-...", "name": "team-a", "rpm": 60, "tpm": '
        '100000, "max_streams": 8, "token_budget": 10000000, "max_stored_bytes": 1073741824, '
        '"priority": false, "cache_group": "team-a"}]}`, every limit optional (positive '
        "integers; `max_stored_bytes` ≥ 0, 0 = none); a key's missing limits come from "
        '`defaults`, which also apply to `--api-key` keys. Per key only: `priority` (its '
        '`service_tier: "priority"` is honoured) and `cache_group` (keys with one group share '
        "vLLM's prefix cache). The placeholder `replace-with-client-keys` is refused. Its keys "
        'are accepted like `--api-key`s. A bad field stops the start naming it (`--keys-file: '
        'keys[2].rpm: …`). See operations.md, "Per-key limits"'
    ),
    "max_stored_bytes_per_key": (
        'bytes of stored responses and conversations one key may hold when its keys-file entry '
        'sets no `max_stored_bytes` (the anonymous tenant of a proxy without keys too); past it'
        ' a storing request is a 429 `insufficient_quota`; 0 = no limit'
    ),
    "https_proxy": (
        "https upstreams go through this `http://[user:pass@]host:port` proxy's CONNECT tunnel "
        'unless `NO_PROXY` names them (`*`, hosts, `.suffix`es, `host:port`); plain-http '
        'upstreams are always reached directly (`HTTP_PROXY` is not used)'
    ),
}
