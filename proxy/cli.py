"""Command line: `responses-proxy serve | worker | simulate`.

Parsing and validation happen before anything starts; a bad flag ends the process with exit code 2
and one line naming the flag (never a traceback).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence

from proxy.gctune import tune_for_serving
from proxy.logs import configure_logging
from proxy.settings import (
    ConfigError,
    Settings,
    accepted_keys,
    build_settings,
    describe,
    require_upstreams,
)

log = logging.getLogger("proxy")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's own errors (unknown flag, missing value) keep the one-line promise too.
        self.exit(2, f"responses-proxy: error: {message}\n")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--upstream", action="append", help="vLLM server root URL (repeatable)")
    p.add_argument("--upstream-api-key", help="key sent to the upstream instead of the client's")
    p.add_argument("--fleet", help="YAML/JSON file of replicas (url, weight, api_key, "
                                   "max_concurrency, models); instead of --upstream")
    p.add_argument("--affinity-load-factor",
                   help="a keyed request leaves its replica above this times the mean load "
                        "(default 1.25)")
    p.add_argument("--redis-url", help="redis://host:port/db; omitted = embedded store")
    p.add_argument("--connect-timeout", help="seconds to connect to an upstream (default 5)")
    p.add_argument("--first-byte-timeout", help="seconds to the upstream's headers (default 120)")
    p.add_argument("--idle-timeout", help="seconds allowed between two chunks (default 60)")
    p.add_argument("--max-connections-per-upstream",
                   help="connections to one replica at most (default 1024)")
    p.add_argument("--upstream-ca-bundle", help="PEM file of CAs that https upstreams are "
                                                "verified against (default: the system's)")
    p.add_argument("--first-token-timeout",
                   help="seconds a stream may wait for its first upstream chunk (default 120)")
    p.add_argument("--worker-concurrency", help="background jobs run at once (default 16)")
    p.add_argument("--response-ttl", help="seconds stored objects live (default 30 days)")
    p.add_argument("--heartbeat-interval",
                   help="seconds between a worker's job heartbeats (default 2)")
    p.add_argument("--max-queued-jobs", help="background jobs queued at most (default 10000)")
    p.add_argument("--shutdown-grace",
                   help="seconds running jobs get to finish at shutdown (default 30)")
    p.add_argument("--event-ttl", help="seconds event logs live, for replay (default 3600)")
    p.add_argument("--log-level", help="debug, info, warning, error (default info)")
    p.add_argument("--log-format", help="text | json (default text)")
    p.add_argument("--fleet-secret",
                   help="secret shared by all instances, seals blobs (default: a random one "
                        "per deployment, kept in Redis)")
    p.add_argument("--mcp-allow", action="append",
                   help="URL prefix of MCP servers the proxy may call (repeatable; default "
                        "none: MCP tools are refused)")
    p.add_argument("--max-mcp-calls", help="MCP tool calls one response may make (default 16)")
    p.add_argument("--mcp-timeout",
                   help="seconds one MCP list or call may take, connect included (default 60)")
    p.add_argument("--fetch-allow", action="append",
                   help="URL prefix of images/media the proxy may fetch for the fleet and send "
                        "inline (repeatable; default https:// to public addresses; `none`: "
                        "data: URLs only)")
    p.add_argument("--fetch-timeout",
                   help="seconds one media fetch may take, connect included (default 10)")
    p.add_argument("--max-inflight-per-replica",
                   help="requests one replica takes at once from this process (default 64)")
    p.add_argument("--max-queued-requests",
                   help="requests that may wait for a saturated fleet (default 1024)")
    p.add_argument("--queue-timeout",
                   help="seconds a request may wait for a saturated fleet (default 30)")
    p.add_argument("--routing", help="affinity | round_robin | least_loaded (default affinity)")
    p.add_argument("--keys-file", help="JSON or YAML file of client keys with rpm, tpm, "
                                       "max_streams and token_budget limits")
    # Multi-tenant storage bound (issue 23): core/storagebudget.py.
    p.add_argument("--max-stored-bytes-per-key",
                   help="bytes of stored responses and conversations one key may hold, for "
                        "keys whose keys-file entry sets no max_stored_bytes; 0 = no limit "
                        "(default 1 GiB)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="responses-proxy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", help="port (default 8080)")
    serve.add_argument("--api-key", action="append", help="accepted client key (repeatable)")
    serve.add_argument("--allow-origin", action="append",
                       help="with auth off, a browser origin (scheme://host[:port]) whose "
                            "WebSocket handshakes are accepted besides the proxy's own "
                            "(repeatable; env PROXY_ALLOW_ORIGIN, comma-separated)")
    serve.add_argument("--cache", help="off | exact | semantic (default off)")
    serve.add_argument("--no-worker", action="store_true", help="do not run background jobs")
    serve.add_argument("--workers",
                       help="serving processes on the port: a count or `auto` (one per core); "
                            "more than 1 needs --redis-url (default 1)")
    serve.add_argument("--cache-ttl", help="seconds cache entries live (default 86400)")
    serve.add_argument("--embedding-model", help="fleet model for /v1/embeddings (semantic)")
    serve.add_argument("--cache-similarity", help="cosine a semantic hit needs (default 0.95)")
    serve.add_argument("--cache-max-entry-bytes", help="largest answer cached (default 1 MiB)")
    serve.add_argument("--cache-max-per-namespace",
                       help="semantic entries kept per namespace (default 256)")
    serve.add_argument("--cache-embedding-timeout",
                       help="seconds an embedding call may take; slower is a miss (default 0.5)")
    serve.add_argument("--max-body-bytes", help="largest accepted request body (default 16 MiB)")
    serve.add_argument("--max-sealed-bytes",
                       help="most one sealed blob may inflate to (default 1 MiB)")
    serve.add_argument("--max-input-items",
                       help="input items accepted in one create (default 2048)")
    serve.add_argument("--ping-interval", help="seconds between SSE keep-alive pings (default 15)")
    serve.add_argument("--discovery-interval", help="seconds between fleet health checks")
    serve.add_argument("--params", help="lenient | strict: unknown create fields ignored (and "
                                        "named in a header) or refused (default lenient)")
    serve.add_argument("--hosted-tools", help="drop | reject: hosted tools such as web_search "
                                              "left out (and named in a header) or refused "
                                              "(default drop)")
    serve.add_argument("--lease-ttl",
                       help="seconds a stored foreground response's lease lasts: a dead "
                            "instance's responses end failed within ~1.5x (default 10)")
    serve.add_argument("--send-timeout",
                       help="seconds a stream may wait on a client that stopped reading "
                            "(default 30)")
    serve.add_argument("--ws-max-age",
                       help="seconds a WebSocket connection lasts before it is closed "
                            "(default 3600)")
    _add_common(serve)

    worker = sub.add_parser("worker", help="run background jobs only")
    _add_common(worker)

    sim = sub.add_parser("simulate", help="run the bundled vLLM simulator")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", default="8000")
    sim.add_argument("--token-delay-ms", default="0", help="delay between tokens")
    sim.add_argument("--ttft-ms", default="0", help="delay before the first token")
    sim.add_argument(
        "--reasoning-field",
        default="reasoning",
        help="reasoning | reasoning_content | both (vLLM before 0.16 used reasoning_content)",
    )
    sim.add_argument("--model", action="append", help="served model name (repeatable)")
    sim.add_argument("--max-model-len", default="32768", help="context length in tokens")
    sim.add_argument("--prefill-ms-per-token", default="0",
                     help="prefill time per prompt token not in the prefix cache (default 0)")
    sim.add_argument("--prefix-cache-blocks", default="4096",
                     help="16-token blocks the prefix cache remembers (default 4096)")
    return parser


def _configure_logging(level: str, fmt: str = "text") -> None:
    configure_logging(level, fmt)



def _serve(settings: Settings) -> None:
    for line in describe(settings):
        log.info(line)
    if not accepted_keys(settings):
        log.warning("no API keys configured: the proxy accepts every request (auth is off)")
    if settings.workers == 1:
        _serve_one(settings)
        return
    from proxy.prefork import Supervisor, listening_sockets

    try:
        sockets = listening_sockets(settings.host, settings.port, settings.workers)
    except OSError as exc:
        raise ConfigError("--port", f"cannot listen on {settings.host}:{settings.port}: "
                                    f"{exc.strerror or exc}") from None
    log.info("serving with %d processes on %s:%d", settings.workers, settings.host,
             settings.port)

    def child(sock: socket.socket, parent: int) -> int:
        _serve_one(settings, sock, parent)
        return 0

    # A child's drain takes up to `--shutdown-grace`, then uvicorn's own 5 s: the supervisor
    # waits that long, and a little more, before it kills what is left.
    supervisor = Supervisor(settings.workers, sockets, child,
                            stop_timeout=settings.shutdown_grace + 10)
    code = supervisor.run()
    if code:
        raise SystemExit(code)


def _serve_one(settings: Settings, sock: socket.socket | None = None,
               parent: int | None = None) -> None:
    import uvicorn

    from proxy.app import create_app
    from proxy.server import DrainingServer
    from proxy.web.state import app_runtime

    app = create_app(settings)
    tune_for_serving()  # after the imports and the app: what is alive now lives forever
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,  # ours is web/access.py
        log_config=None,  # uvicorn's own lines go through our handler (format, request id)
        # The drain (SIGTERM) has already given streams `--shutdown-grace`; what is left then
        # (replays of responses made elsewhere) gets this long before uvicorn cuts it.
        timeout_graceful_shutdown=5,
        # Larger frames are refused by the transport itself (close 1009); up to this size the
        # handler answers an over-long frame with an error frame (web/websocket.py).
        ws_max_size=2 * settings.max_body_bytes,
        # WebSocket keep-alive pings on the SSE pings' interval: one knob for idle sessions
        # behind proxies that cut silent connections.
        ws_ping_interval=settings.ping_interval,
    )
    server = DrainingServer(config, drain=lambda: app_runtime(app).drain(), parent_pid=parent)
    server.run(sockets=[sock] if sock is not None else None)


def _worker(settings: Settings) -> None:
    from proxy.worker import run_worker

    tune_for_serving()
    run_worker(settings)


def _simulate(args: argparse.Namespace) -> None:
    import uvicorn

    from proxy.settings import check_port, check_positive

    port = check_port(args.port)
    delay = float(args.token_delay_ms)
    ttft = float(args.ttft_ms)
    if delay < 0 or ttft < 0:
        raise ConfigError("--token-delay-ms", "delays must be >= 0")
    prefill = float(args.prefill_ms_per_token)
    if prefill < 0:
        raise ConfigError("--prefill-ms-per-token", "must be >= 0")
    blocks = int(args.prefix_cache_blocks)
    if blocks < 0:
        raise ConfigError("--prefix-cache-blocks", "must be >= 0")
    if args.reasoning_field not in ("reasoning", "reasoning_content", "both"):
        raise ConfigError("--reasoning-field", "use reasoning, reasoning_content or both")
    from proxy.simulator import SimConfig, create_app

    config = SimConfig(
        token_delay_ms=delay,
        ttft_ms=ttft,
        reasoning_field=args.reasoning_field,
        max_model_len=int(check_positive(args.max_model_len, "--max-model-len", integer=True)),
        prefill_ms_per_token=prefill,
        prefix_cache_blocks=blocks,
        **({"models": tuple(args.model)} if args.model else {}),
    )
    log.info("vLLM simulator on http://%s:%d", args.host, port)
    app = create_app(config)
    # The bench's upstream: its full collections (~100 ms each under load) delayed tokens of
    # every row, the direct one included.
    tune_for_serving()
    uvicorn.run(app, host=args.host, port=port, log_level="warning", access_log=False)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        if args.command == "simulate":
            _configure_logging("info")
            _simulate(args)
            return
        settings = build_settings(vars(args), os.environ)
        _configure_logging(settings.log_level, settings.log_format)
        if args.command == "worker":
            require_upstreams(settings, "worker")
            if not settings.redis_url:
                raise ConfigError("--redis-url", "`worker` needs a shared Redis")
            _worker(settings)
        else:
            require_upstreams(settings, "serve")
            _serve(settings)
    except ConfigError as exc:
        sys.stderr.write(f"responses-proxy: error: {exc}\n")
        raise SystemExit(2) from None
    except ValueError as exc:  # e.g. float("x") on a simulator flag
        sys.stderr.write(f"responses-proxy: error: {exc}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
