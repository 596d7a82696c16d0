"""`python -m bench.tracing` (run by `make bench`): what OpenTelemetry tracing costs the proxy.

The same load through three proxies on one redis-server and one simulator:

    off    no `--otlp-endpoint`: no middleware, no span anywhere (the default)
    live   `--otlp-endpoint` to a live OTLP/HTTP collector (tests/support/otlp.py's receiver,
           its own process: it decodes every batch, as a Collector would)
    dead   `--otlp-endpoint` to a closed port (connection refused): the exporter's thread
           fails every batch, the queue fills and drops; requests must not notice

Load: `--streams` closed-loop clients of stored Responses streams (`store: true`, so a
request makes every kind of span: the request's, its upstream call's, the create and final
writes, and the shared event-log flushes), `--tokens` tokens at `--delay-ms`, with bench/loadgen.py
(a measured window after a ramp). The rows alternate (off, live, dead, off, live, dead ...) for
`--rounds` rounds so the shared machine's drift falls on all three alike; each figure is the
median over rounds.

Reported per system: proxy CPU (utime+stime of the proxy process, the exporter's thread
included) per 1,000 streamed tokens, TTFT p50 and p99 (requests started inside the window),
errors, and for `live` the spans the collector received. Bounded: each row at most
`--max-seconds` plus a request's drain; the whole run about 2 minutes by default.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import shutil
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from bench.loadgen import RowPlan, run_row
from bench.options import module_parser
from bench.procs import CLK_TCK, Service, free_port
from bench.stack import HOST, http_get, http_ok, redis_and_simulator
from bench.stats import percentile
from bench.systems import SYSTEMS

MODES = ("off", "live", "dead")


@dataclass
class Figures:
    mode: str
    cpu_ms_per_1k: list[float] = field(default_factory=list)
    ttft_p50: list[float] = field(default_factory=list)
    ttft_p99: list[float] = field(default_factory=list)
    errors: int = 0
    requests: int = 0

    def line(self) -> str:
        def median(values: list[float]) -> str:
            return f"{statistics.median(values):7.2f}" if values else "      -"
        return (f"| {self.mode:4s} | {median(self.cpu_ms_per_1k)} | {median(self.ttft_p50)} | "
                f"{median(self.ttft_p99)} | {self.requests} | {self.errors} |")


def measure(port: int, service: Service, figures: Figures, options: argparse.Namespace,
            seconds: float | None = None) -> None:
    """One row against one proxy (a window of `seconds`, default `--seconds`); its figures
    appended to `figures`."""
    system = SYSTEMS["responses-store"]
    duration = options.tokens * options.delay_ms / 1000
    plan = RowPlan(host=HOST, port=port,
                   request=system.request(HOST, port, options.tokens, options.delay_ms),
                   kind=system.kind, tokens=options.tokens, concurrency=options.streams,
                   ramp=duration, min_seconds=seconds or options.seconds,
                   max_seconds=max(seconds or 0.0, options.max_seconds) if seconds is None
                   else seconds, timeout=15.0 + 3 * duration)
    run = asyncio.run(run_row(plan, service.cpu_ticks))
    start, end = run.window
    inside = [s for s in run.samples if start <= s.start <= end]
    ttfts = [s.ttft * 1000 for s in inside if s.ttft is not None and s.error is None]
    figures.requests += len(inside)
    figures.errors += sum(1 for s in run.samples if s.error is not None)
    first, last = run.marks
    if run.window_tokens:
        figures.cpu_ms_per_1k.append((last - first) / CLK_TCK * 1000
                                     / (run.window_tokens / 1000))
    p50, p99 = percentile(ttfts, 50), percentile(ttfts, 99)
    if p50 is not None and p99 is not None:
        figures.ttft_p50.append(p50)
        figures.ttft_p99.append(p99)


def collector_spans(port: int) -> int:
    status, body = http_get(port, "/stats")
    return int(orjson.loads(body)["spans"]) if status == 200 else -1


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = module_parser("bench.tracing", __doc__)
    for flag, kind, default, text in OPTIONS:
        parser.add_argument(flag, type=kind, default=default, help=text)
    return parser.parse_args(argv)


OPTIONS: tuple[tuple[str, type, float, str], ...] = (
    ("--streams", int, 64, "closed-loop clients"),
    ("--tokens", int, 100, "tokens per answer"),
    ("--delay-ms", float, 5.0, "ms per token"),
    ("--seconds", float, 6.0, "a row's window, at least"),
    ("--max-seconds", float, 12.0, "a row's window, at most"),
    ("--rounds", int, 3, "off/live/dead rounds (figures: medians)"),
    ("--warmup-seconds", float, 2.0, "an unmeasured row per proxy first"),
)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    services: list[Service] = []
    logs = None
    try:
        base = redis_and_simulator("bench-tracing-", services)
        if base is None:
            return 1
        logs, env = base.logs, base.env
        collector_port, dead_port = free_port(), free_port()  # dead: nothing listens there
        services.append(Service("collector", [
            sys.executable, "-m", "tests.support.otlp", str(collector_port)],
            logs / "collector.log", env=env).start(lambda: http_ok(collector_port, "/stats")))
        endpoints = {"off": [], "live": ["--otlp-endpoint", f"http://{HOST}:{collector_port}"],
                     "dead": ["--otlp-endpoint", f"http://{HOST}:{dead_port}"]}
        proxies: dict[str, tuple[int, Service]] = {}
        for mode in MODES:
            port = free_port()
            proxy = Service(f"proxy-{mode}", [
                sys.executable, "-m", "proxy", "serve", "--host", HOST, "--port", str(port),
                "--upstream", f"http://{HOST}:{base.sim_port}", "--no-worker",
                "--redis-url", f"redis://{HOST}:{base.redis_port}/0", *endpoints[mode]],
                logs / f"proxy-{mode}.log", env=env)
            services.append(proxy.start(functools.partial(http_ok, port, "/readyz")))
            proxies[mode] = (port, proxy)
        print(f"bench.tracing: {options.streams} stored streams x {options.tokens} tokens at "
              f"{options.delay_ms:g} ms, {options.rounds} rounds of off/live/dead; shared "
              "machine: compare within one run", flush=True)
        figures = {mode: Figures(mode) for mode in MODES}
        for mode in MODES:  # warm: connections, scripts, the exporter's first batch (its imports)
            port, proxy = proxies[mode]
            measure(port, proxy, Figures(mode), options, seconds=options.warmup_seconds)
        for _ in range(options.rounds):
            for mode in MODES:
                port, proxy = proxies[mode]
                measure(port, proxy, figures[mode], options)
        print("| tracing | proxy CPU ms / 1k tokens | TTFT p50 ms | TTFT p99 ms | requests | "
              "errors |\n|---|---|---|---|---|---|")
        for mode in MODES:
            print(figures[mode].line())
        off, live = figures["off"].cpu_ms_per_1k, figures["live"].cpu_ms_per_1k
        if off and live:
            added = statistics.median(live) - statistics.median(off)
            print(f"tracing on adds {added:+.2f} ms of proxy CPU per 1k tokens "
                  f"({added / statistics.median(off) * 100:+.0f}%); the live collector got "
                  f"{collector_spans(collector_port)} spans")
    finally:
        for service in reversed(services):
            service.stop()
        if logs is not None:
            shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
