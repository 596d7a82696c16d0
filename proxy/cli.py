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
from typing import Any

from proxy.process.gctune import tune_for_serving
from proxy.settings import (
    ConfigError,
    Settings,
    accepted_keys,
    build_settings,
    describe,
    require_upstreams,
)
from proxy.settings.build import shown_default
from proxy.settings.options import OPTIONS, Option
from proxy.telemetry.logs import configure_logging

log = logging.getLogger("proxy")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's own errors (unknown flag, missing value) keep the one-line promise too.
        self.exit(2, f"responses-proxy: error: {message}\n")


def _add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of `command`, from the option table (settings/options.py). Their argparse
    default is None: an absent flag falls back to the environment, then to the field's default
    (build.py), which is the one `--help` shows."""
    for opt in OPTIONS:
        if opt.help is None or command not in opt.commands:
            continue
        action = "store_true" if opt.switch else "append" if opt.repeat else "store"
        parser.add_argument(opt.flag_name, action=action, help=_help(opt))


def _help(opt: Option) -> str:
    shown = shown_default(opt)
    return f"{opt.help} (default {shown})" if shown else str(opt.help)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="responses-proxy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the proxy")
    _add_options(serve, "serve")

    worker = sub.add_parser("worker", help="run background jobs only")
    _add_options(worker, "worker")

    # The simulator's flags configure the simulator (SimConfig), not the proxy: no Settings.
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
    sim.add_argument("--max-logprobs", default="20", help="the most top_logprobs served")
    sim.add_argument("--prefill-ms-per-token", default="0",
                     help="prefill time per prompt token not in the prefix cache (default 0)")
    sim.add_argument("--prefix-cache-blocks", default="4096",
                     help="16-token blocks the prefix cache remembers (default 4096)")
    sim.add_argument("--no-auto-tool-choice", action="store_true",
                     help='answer tool_choice "auto" as vLLM started without '
                          "--enable-auto-tool-choice does (a 400)")
    # Real vLLM's shapes (simulator/answer/personas.py, docs/SIMULATOR.md "Personas").
    sim.add_argument("--persona", help="every model behaves as qwen3 | mistral | gpt-oss | "
                                       "deepseek-r1 | llama3 (default: by its name)")
    sim.add_argument("--vllm-version", help="the vLLM version X.Y whose shapes to send "
                                            "(default 0.16 for a persona, none otherwise)")
    sim.add_argument("--enable-prompt-tokens-details", action="store_true",
                     help="usage carries prompt_tokens_details.cached_tokens, as vLLM's flag")
    return parser


def _configure_logging(level: str, fmt: str = "text") -> None:
    configure_logging(level, fmt)



def _serve(settings: Settings) -> None:
    for line in describe(settings):
        log.info(line)
    if not accepted_keys(settings):
        log.warning("no API keys configured: the proxy accepts every request (auth is off)")
    if settings.server.workers == 1:
        _serve_one(settings)
        return
    from proxy.process.prefork import ProcessSupervisor, listening_sockets

    try:
        sockets = listening_sockets(settings.server.host, settings.server.port,
                                    settings.server.workers)
    except OSError as exc:
        raise ConfigError("--port", f"cannot listen on {settings.server.host}:"
                                    f"{settings.server.port}: {exc.strerror or exc}") from None
    log.info("serving with %d processes on %s:%d", settings.server.workers, settings.server.host,
             settings.server.port)

    from proxy.telemetry.metricsdir import MetricsDir, enable_in_child

    def child(sock: socket.socket, parent: int) -> int:
        enable_in_child()  # one /metrics for the instance: samples in shared files
        _serve_one(settings, sock, parent)
        return 0

    metrics_dir = MetricsDir.create()
    # A child's drain takes up to `--shutdown-grace`, then uvicorn's own 5 s: the supervisor
    # waits that long, and a little more, before it kills what is left.
    supervisor = ProcessSupervisor(settings.server.workers, sockets, child,
                            stop_timeout=settings.server.shutdown_grace + 10,
                            exited=metrics_dir.child_exited)
    try:
        code = supervisor.run()
    finally:
        metrics_dir.remove()
    if code:
        raise SystemExit(code)


def uvicorn_config(app: Any, settings: Settings, **overrides: Any) -> Any:
    """The `uvicorn.Config` of `serve` (`overrides`: bench/serverlaunch.py's variants; uvicorn's
    defaults pick httptools and uvloop, both installed with `uvicorn[standard]`)."""
    import uvicorn

    from proxy.process.headtimeout import protocol_for

    options: dict[str, Any] = dict(
        host=settings.server.host,
        port=settings.server.port,
        log_level="warning",
        access_log=False,  # ours is web/middleware/access.py
        # The client's address and scheme from a trusted proxy's `X-Forwarded-*` are read by
        # the app's front middleware (web/middleware/forwarded.py), by uvicorn's rules and from
        # `--forwarded-allow-ips` (FORWARDED_ALLOW_IPS, as uvicorn's): its own layer was a
        # coroutine and a pass over the headers more per request.
        proxy_headers=False,
        log_config=None,  # uvicorn's own lines go through our handler (format, request id)
        # The drain (SIGTERM) has already given streams `--shutdown-grace`; what is left then
        # (replays of responses made elsewhere) gets this long before uvicorn cuts it.
        timeout_graceful_shutdown=5,
        # Larger frames are refused by the transport itself (close 1009); up to this size the
        # handler answers an over-long frame with an error frame (web/socket/connection.py).
        ws_max_size=2 * settings.limits.max_body_bytes,
        # WebSocket keep-alive pings on the SSE pings' interval: one knob for idle sessions
        # behind proxies that cut silent connections.
        ws_ping_interval=settings.streams.ping_interval,
        # No `server: uvicorn` on every answer: it tells an outsider what to attack, and uvicorn
        # checks each header it sends with two regular expressions (~2.6k instructions a
        # response for this one). `date` stays: HTTP asks an origin with a clock to send it.
        server_header=False,
    )
    options.update(overrides)
    # Every request head within --header-timeout, and a new connection idle no longer than a
    # kept-alive one (proxy/process/headtimeout.py), whichever protocol is chosen.
    options["http"] = protocol_for(str(options.get("http", "auto")),
                                   settings.server.header_timeout)
    return uvicorn.Config(app, **options)


def _serve_one(settings: Settings, sock: socket.socket | None = None,
               parent: int | None = None) -> None:
    from proxy.app import app_runtime, create_app
    from proxy.process.server import DrainingServer

    app = create_app(settings)
    tune_for_serving()  # after the imports and the app: what is alive now lives forever
    config = uvicorn_config(app, settings)
    server = DrainingServer(config, drain=lambda: app_runtime(app).drain(), parent_pid=parent)
    server.run(sockets=[sock] if sock is not None else None)


def _worker(settings: Settings) -> None:
    from proxy.process.worker import run_worker

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
    from proxy.simulator.answer.personas import PERSONAS, parse_version

    if args.persona is not None and args.persona not in PERSONAS:
        raise ConfigError("--persona", f"use one of {', '.join(PERSONAS)}")
    if args.vllm_version is not None:
        try:
            parse_version(args.vllm_version)
        except ValueError as exc:
            raise ConfigError("--vllm-version", str(exc)) from None

    config = SimConfig(
        token_delay_ms=delay,
        ttft_ms=ttft,
        reasoning_field=args.reasoning_field,
        max_model_len=int(check_positive(args.max_model_len, "--max-model-len", integer=True)),
        prefill_ms_per_token=prefill,
        prefix_cache_blocks=blocks,
        auto_tool_choice=not args.no_auto_tool_choice,
        persona=args.persona,
        vllm_version=args.vllm_version,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        max_logprobs=int(check_positive(args.max_logprobs, "--max-logprobs", integer=True)),
        legacy_shapes=False,
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
        _configure_logging(settings.server.log_level, settings.server.log_format)
        if args.command == "worker":
            require_upstreams(settings, "worker")
            if not settings.store.redis_url:
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
